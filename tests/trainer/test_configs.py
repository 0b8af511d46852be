"""configs/: the README names every config file, and every task config loads and passes
train.py's validation (no data is read, nothing compiles)."""
import importlib
import pathlib
import re

import pytest

from trainer.config import validate

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
FILES = sorted(p.stem for p in CONFIGS.glob("*.py") if p.stem != "__init__")


def test_the_readme_lists_every_config_and_only_those():
  readme = (CONFIGS / "README.md").read_text(encoding="utf-8")
  listed = set(re.findall(r"^\| `(\w+)\.py` \|", readme, flags=re.M))
  assert listed == set(FILES), (
      f"configs/README.md lacks {sorted(set(FILES) - listed)} and lists missing "
      f"{sorted(listed - set(FILES))}")


@pytest.mark.parametrize("name", [n for n in FILES if n != "base"])
def test_every_task_config_loads_and_validates(name):
  config = importlib.import_module(f"configs.{name}").get_config()
  assert config.task, name
  validate(config)


PRESETS = [(n, p) for n in FILES if n != "base"
           for p in getattr(importlib.import_module(f"configs.{n}"), "PRESETS", {})]


def test_every_training_task_has_a_cpu_preset():
  tasks = {importlib.import_module(f"configs.{n}").get_config().task for n, _ in PRESETS}
  assert tasks >= {"copy", "mnist", "listops", "shakespeare", "multi30k"}, tasks
  assert all((n, "cpu") in PRESETS for n, _ in PRESETS)


@pytest.mark.parametrize("name, preset", PRESETS)
def test_every_preset_validates_and_sets_only_fields_the_config_has(name, preset):
  """A preset sets existing fields: a misspelt one would be a new field of the
  ConfigDict that nothing reads (a preset that silently does less)."""
  mod = importlib.import_module(f"configs.{name}")
  plain, config = mod.get_config(), mod.get_config(preset)
  validate(config)

  def paths(d, pre=""):
    return {pre + k for k in d} | {p for k, v in d.items() if isinstance(v, dict)
                                   and k != "attention_options"
                                   for p in paths(v, f"{pre}{k}.")}
  new = paths(config.to_dict()) - paths(plain.to_dict())
  assert not new, f"configs/{name}.py:{preset} adds fields {sorted(new)}"
  assert config.to_dict() != plain.to_dict()


def test_an_unknown_preset_names_the_valid_ones():
  from configs import copy
  valid = ", ".join(sorted(copy.PRESETS))
  assert valid.startswith("cpu, ") and valid.endswith(", gpu")
  with pytest.raises(ValueError, match=f"no preset 'tpu'; valid: {valid}"):
    copy.get_config("tpu")


def _leaves(c, prefix=""):
  """(dotted key, value, type) of every field of a ConfigDict, less the open mapping
  model.attention_options (its variant options go by `option_overrides`, tested in
  test_cli.py)."""
  for k in sorted(c.keys()):
    key = f"{prefix}{k}"
    if key == "model.attention_options":
      continue
    v = c[k]
    if hasattr(v, "keys"):
      yield from _leaves(v, key + ".")
    else:
      yield key, v, c.get_type(k)


def _another(value, typ):
  """(flag text, the value it sets) of a value of the field's type: a placeholder (None
  by default) gets one of its type."""
  if value is None:
    return {int: ("2", 2), float: ("0.5", 0.5), str: ("softmax", "softmax"),
            bool: ("True", True)}[typ]
  if isinstance(value, bool):
    return str(not value), not value
  if isinstance(value, (int, float)):
    return repr(value + 1), value + 1
  if isinstance(value, tuple):
    return repr(value[:1]), value[:1]
  return value + "x", value + "x"


@pytest.mark.parametrize("name, preset", [(n, "") for n in FILES if n != "base"] + PRESETS)
def test_every_field_of_every_config_is_settable_by_flag(name, preset, monkeypatch):
  """`--config.<field>=<value>` reaches every field of every config and preset, as
  train.py parses it (ml_collections' config_flags, in process): a field whose default
  is None (model.num_kv_heads: MHA) must be a typed placeholder, since config_flags
  refuses to override a None."""
  from absl import flags
  from ml_collections import config_flags
  spec = f"configs/{name}.py" + (f":{preset}" if preset else "")
  c = importlib.import_module(f"configs.{name}").get_config(*([preset] if preset else []))
  want = {k: _another(v, t) for k, v, t in _leaves(c)}
  argv = ["train.py", f"--config={CONFIGS / name}.py" + (f":{preset}" if preset else "")]
  argv += [f"--config.{k}={text}" for k, (text, _) in want.items()]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv, lock_config=True)
  monkeypatch.setattr("sys.argv", argv)   # config_flags reads its overrides from sys.argv
  fv(argv)
  got = {k: v for k, v, _ in _leaves(fv.config)}
  wrong = {k: (got[k], v) for k, (_, v) in want.items() if got[k] != v}
  assert not wrong, f"{spec}: fields not set by their flag (got, wanted): {wrong}"
