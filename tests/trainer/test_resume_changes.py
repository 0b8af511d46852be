"""A run resumed under other settings says so, keeps the change and marks what it
invalidates (trainer.checkpoint.check_same_model / record_changes; train.py prints the
line when it resumes, tests/trainer/test_train.py's resume tests run that path)."""
import json
import os

import pytest

from configs import copy
from trainer import checkpoint as ckpt
from trainer.config import TrainError, validate


def test_a_resume_under_changed_settings_is_said_recorded_and_marks_eval_stale(tmp_path):
  wd = str(tmp_path)
  c = copy.get_config()
  assert ckpt.check_same_model(wd, validate(c), c) == {}        # a new workdir: written
  assert ckpt.check_same_model(wd, validate(c), c) == {}        # the same settings
  os.makedirs(os.path.join(wd, "eval"))
  with open(os.path.join(wd, "eval", "eval.json"), "w") as f:
    json.dump({"eval_loss": 1.0}, f)
  c.learning_rate, c.num_train_steps, c.model.remat = 3e-3, 4000, "block"
  changes = ckpt.check_same_model(wd, validate(c), c)
  assert changes == {"learning_rate": (1e-3, 3e-3), "num_train_steps": (2000, 4000),
                     "model.remat": ("none", "block")}
  line = ckpt.record_changes(wd, validate(c), c, changes, step=2000)
  assert line.startswith(f"resuming {wd} at step 2000 under changed settings: "
                         "learning_rate 0.001 -> 0.003, model.remat 'none' -> 'block', "
                         "num_train_steps 2000 -> 4000") and "eval/eval.json" in line, line
  hist = [json.loads(x) for x in open(os.path.join(wd, ckpt.HISTORY))]
  assert hist[0]["step"] == 2000 and hist[0]["changes"]["learning_rate"] == [1e-3, 3e-3]
  rec = json.load(open(os.path.join(wd, "config.json")))
  assert rec["config"]["learning_rate"] == 3e-3 and rec["model"]["remat"] == "block"
  assert "resumed at step 2000" in json.load(open(os.path.join(wd, "eval", "eval.json")))["stale"]
  assert ckpt.check_same_model(wd, validate(c), c) == {}        # recorded: no change now
  c.model.d_model = 32                                          # another model: refused
  with pytest.raises(TrainError, match="holds a run of a different model"):
    ckpt.check_same_model(wd, validate(c), c)
