"""train.py and eval.py from the command line: a user's mistake ends in one line on
stderr and exit status 1, with no traceback; a bug in the code keeps its traceback."""
import os
import subprocess
import sys

import pytest

from models import ConfigError
from trainer import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  p = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                     text=True, timeout=120)
  return p.returncode, p.stderr.strip().splitlines()


@pytest.mark.parametrize("override, message", [
    ("--config.model.dmodel=3", "no field 'model.dmodel'; did you mean model.d_model"),
    ("--config.batch_size=-3", "config 'batch_size': must be a positive int, got -3"),
    # a variant's option by a dotted flag: its name is checked before anything runs,
    ("--config.model.attention_options.local.windw=16",
     "--config.model.attention_options.local.windw: attention variant 'local' has no "
     "option 'windw'; did you mean window? (its options: scale, window)"),
    # and its value reaches the model config, whose variant refuses it
    ("--config.attention=local --config.model.attention_options.local.window=0",
     "model config 'attention_options.local': local attention: window must be a "
     "positive int"),
])
def test_train_bad_config_is_one_line(tmp_path, override, message):
  rc, err = run("train.py", "--config=configs/copy.py", f"--workdir={tmp_path}",
                *override.split())
  assert rc == 1 and len(err) == 1, err
  assert err[0].startswith("train.py: error: ") and message in err[0], err
  assert not os.listdir(tmp_path), "a refused run wrote to its workdir"



def test_a_config_preset_by_name_and_an_unknown_one(tmp_path):
  """`--config=configs/<task>.py:<preset>` reaches get_config; an unknown preset is one
  line that names the valid ones."""
  from configs import copy
  valid = ", ".join(sorted(copy.PRESETS))
  rc, err = run("train.py", "--config=configs/copy.py:tpu", f"--workdir={tmp_path}")
  assert rc == 1 and err == ["train.py: error: --config=configs/copy.py:tpu: "
                             f"configs/copy.py has no preset 'tpu'; valid: {valid} "
                             "(or none: configs/copy.py)"], err

def test_variant_options_by_dotted_flags():
  """--config.model.attention_options.<variant>.<option>=<value> sets the option on the
  config (read as its default's type; a literal where the default is None), in the
  `=` and the two-word forms, next to a file's own options; the model config gets it."""
  from configs import copy
  from trainer.config import validate
  argv = ["train.py", "--config=configs/copy.py", "--config.attention=local",
          "--config.model.attention_options.local.window=16",
          "--config.model.attention_options.flash.block_q", "32",
          "--config.model.attention_options.fp8.hadamard=true",
          "--config.model.attention_options.sparse.pattern=fixed",
          "--config.model.attention_options.linear.eps=1e-3"]
  rest, found = cli.option_overrides(argv)
  assert rest == argv[:3] and len(found) == 5
  c = copy.get_config()
  c.model.attention_options = {"flash": {"block_k": 8}}
  c.lock()
  cli.apply_option_overrides(c, found)
  assert c.model.attention_options.to_dict() == {
      "local": {"window": 16}, "flash": {"block_k": 8, "block_q": 32},
      "fp8": {"hadamard": True}, "sparse": {"pattern": "fixed"}, "linear": {"eps": 1e-3}}
  c.unlock()
  c.attention = "local"
  assert validate(c).options_for("local") == {"window": 16}


@pytest.mark.parametrize("text, default, value", [
    ("16", 128, 16), ("0.5", 1e-6, 0.5), ("False", True, False), ("fixed", "a", "fixed"),
    ("16", None, 16), ("None", None, None), ("xla", None, "xla")])
def test_option_values_take_the_type_of_the_default(text, default, value):
  got = cli.option_value(text, default)
  assert got == value and type(got) is type(value)
  with pytest.raises(ValueError, match="must be an int"):
    cli.option_value("16.5", 128)


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
