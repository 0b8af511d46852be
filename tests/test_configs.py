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
