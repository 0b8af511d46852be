"""train.py and eval.py from the command line: a user's mistake ends in one line on
stderr and exit status 1, with no traceback; a bug in the code keeps its traceback."""
import os
import subprocess
import sys

import pytest

from models import ConfigError
from trainer import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  p = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                     text=True, timeout=120)
  return p.returncode, p.stderr.strip().splitlines()


@pytest.mark.parametrize("override, message", [
    ("--config.model.dmodel=3", "no field 'model.dmodel'; did you mean model.d_model"),
    ("--config.batch_size=-3", "config 'batch_size': must be a positive int, got -3"),
])
def test_train_bad_config_is_one_line(tmp_path, override, message):
  rc, err = run("train.py", "--config=configs/copy.py", f"--workdir={tmp_path}", override)
  assert rc == 1 and len(err) == 1, err
  assert err[0].startswith("train.py: error: ") and message in err[0], err


def test_eval_of_a_workdir_without_a_run_is_one_line(tmp_path):
  rc, err = run("eval.py", f"--workdir={tmp_path}")
  assert rc == 1 and err == [f"eval.py: error: {tmp_path}/config.json not found: "
                             f"{tmp_path} is not a train.py workdir"], err
  rc, err = run("eval.py", f"--workdir={tmp_path}", "--eval_batches=-1")
  assert rc == 1 and err == ["eval.py: error: eval_batches must be >= 0 (0 = the whole "
                             "test split), got -1"], err

  rc, err = run("eval.py", f"--workdir={tmp_path}", "--pretrained=mnist14_linear")
  assert rc == 1 and len(err) == 1 and "exactly one of --workdir and --pretrained" in err[0]
  rc, err = run("eval.py", "--pretrained=no_such_model")
  assert rc == 1 and len(err) == 1 and "nor is it a shipped model's name" in err[0], err


def test_user_errors_exit_1_and_bugs_keep_their_traceback(capsys):
  def user(argv):
    raise ConfigError("config 'x': bad")

  def bug(argv):
    raise ZeroDivisionError("a bug")

  with pytest.raises(SystemExit) as e:
    cli.user_errors(user)([])
  assert e.value.code == 1 and "error: config 'x': bad" in capsys.readouterr().err
  with pytest.raises(ZeroDivisionError):
    cli.user_errors(bug)([])


def test_closest_keys_match_the_name_and_the_leaf():
  from configs import mnist
  c = mnist.get_config()
  assert cli.closest_keys(c, "model.dmodel")[0] == "model.d_model"
  assert "learning_rate" in cli.closest_keys(c, "learning_rat")
  assert "model.num_heads" in cli.closest_keys(c, "num_heads")
