"""train.py and eval.py from the command line: a user's mistake ends in one line on
stderr and exit status 1, with no traceback; a bug in the code keeps its traceback."""
import os
import subprocess
import sys

import pytest

from models import ConfigError
from trainer import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# One process runs every command line of this module (a process importing jax costs
# ~1.5 CPU-s): it imports what train.py and eval.py import, then forks a child per
# command line, which runs the script as `python <script> <args>` would (argv[0] the
# script, __name__ "__main__", an uncaught exception's traceback on stderr and exit
# status 1, sys.exit's status or message as the interpreter gives them); the child's
# exit status and stderr are the command line's. jax's backend is not started before
# the fork (jax warns on a fork after it, which would be a second stderr line).
DRIVER = r"""
import json, os, runpy, sys, tempfile, traceback
import trainer.loop, trainer.evaluate, trainer.cli, absl.app, ml_collections.config_flags
cases, out = json.loads(sys.argv[1]), []
for args in cases:
  with tempfile.TemporaryFile() as err:
    pid = os.fork()
    if pid == 0:
      os.dup2(err.fileno(), 2)
      sys.argv = list(args)
      try:
        runpy.run_path(args[0], run_name="__main__")
        code = 0
      except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, (int, type(None))):
          print(e.code, file=sys.stderr)
      except BaseException:
        traceback.print_exc()
        code = 1
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(code)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    err.seek(0)
    out.append((status, err.read().decode()))
print(json.dumps(out))
"""


def run_all(*commands):
  """[(exit status, stderr lines)] of each command line (script, *args), all run by
  one process (DRIVER)."""
  import json
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  p = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  return [(rc, err.strip().splitlines()) for rc, err in json.loads(p.stdout.splitlines()[-1])]


BAD_CONFIGS = [
    ("--config.model.dmodel=3", "no field 'model.dmodel'; did you mean model.d_model"),
    ("--config.batch_size=-3", "config 'batch_size': must be a positive int, got -3"),
    # a variant's option by a dotted flag: its name is checked before anything runs,
    ("--config.model.attention_options.local.windw=16",
     "--config.model.attention_options.local.windw: attention variant 'local' has no "
     "option 'windw'; did you mean window? (its options: scale, sinks, window)"),
    # and its value reaches the model config, whose variant refuses it
    ("--config.attention=local --config.model.attention_options.local.window=0",
     "model config 'attention_options.local': local attention: window must be a "
     "positive int"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """{what: (workdir, exit status, stderr lines)} of every command line of this module,
  run by one process (`run_all`); each train.py line has an empty workdir of its own."""
  empty = str(tmp_path_factory.mktemp("eval_empty"))
  train = {("train", o): ["--config=configs/copy.py", *o.split()] for o, _ in BAD_CONFIGS}
  train["preset"] = ["--config=configs/copy.py:tpu"]
  train["wrong_type"] = ["--config=configs/copy.py", "--config.num_train_steps=abc"]
  train["text_bad_glob"] = ["--config=configs/text.py:cpu",
                            "--config.text.files=/nonexistent/*.txt"]
  workdirs = {w: str(tmp_path_factory.mktemp("train")) for w in train}
  commands = {w: ["train.py", f"--workdir={workdirs[w]}", *a] for w, a in train.items()}
  commands.update({
      "eval_no_run": ["eval.py", f"--workdir={empty}"],
      "eval_batches": ["eval.py", f"--workdir={empty}", "--eval_batches=-1"],
      "eval_both": ["eval.py", f"--workdir={empty}", "--pretrained=mnist14_linear"],
      "eval_unknown_pretrained": ["eval.py", "--pretrained=no_such_model"]})
  results = run_all(*commands.values())
  return {w: (workdirs.get(w, empty), *r) for w, r in zip(commands, results)}


@pytest.mark.parametrize("override, message", BAD_CONFIGS)
def test_train_bad_config_is_one_line(runs, override, message):
  workdir, rc, err = runs["train", override]
  assert rc == 1 and len(err) == 1, err
  assert err[0].startswith("train.py: error: ") and message in err[0], err
  assert not os.listdir(workdir), "a refused run wrote to its workdir"


def test_a_config_preset_by_name_and_an_unknown_one(runs):
  """`--config=configs/<task>.py:<preset>` reaches get_config; an unknown preset is one
  line that names the valid ones."""
  from configs import copy
  valid = ", ".join(sorted(copy.PRESETS))
  _, rc, err = runs["preset"]
  assert rc == 1 and err == ["train.py: error: --config=configs/copy.py:tpu: "
                             f"configs/copy.py has no preset 'tpu'; valid: {valid} "
                             "(or none: configs/copy.py)"], err


def test_a_text_corpus_that_matches_nothing_is_one_line(runs):
  """configs/text.py's own files by flag: a glob that matches no file ends in one line
  (the other refusals of a corpus: tests/data/test_tasks.py)."""
  _, rc, err = runs["text_bad_glob"]
  assert rc == 1 and err == ["train.py: error: text.files='/nonexistent/*.txt': no file "
                             "matches"], err


def test_train_names_the_key_of_a_wrong_type(runs):
  _, rc, err = runs["wrong_type"]
  assert rc != 0 and "num_train_steps" in "\n".join(err), err


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


def test_eval_of_a_workdir_without_a_run_is_one_line(runs):
  wd, rc, err = runs["eval_no_run"]
  assert rc == 1 and err == [f"eval.py: error: {wd}/config.json not found: "
                             f"{wd} is not a train.py workdir"], err
  _, rc, err = runs["eval_batches"]
  assert rc == 1 and err == ["eval.py: error: eval_batches must be >= 0 (0 = the whole "
                             "test split), got -1"], err

  _, rc, err = runs["eval_both"]
  assert rc == 1 and len(err) == 1 and "exactly one of --workdir and --pretrained" in err[0]
  _, rc, err = runs["eval_unknown_pretrained"]
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
