"""configs/: the README names every config file, and every task config loads and passes
train.py's validation (no data is read, nothing compiles)."""
import importlib
import pathlib
import re

import pytest

from trainer.config import validate

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "configs"
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
