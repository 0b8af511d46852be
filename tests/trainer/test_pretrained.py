"""Shipped pretrained models (trainer/pretrained.py, studies/repro/shipping.py): a tiny
run exported, loaded by folder and by name with the same outputs, evaluated by eval.py
unchanged; a changed byte, a foreign array and an oversized model are refused."""
import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trainer
from configs import mnist as mnist_cfg
from studies.repro import shipping
from trainer import pretrained
from trainer.config import TrainError
from tests.reference import jitted

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("pretrained")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, prepared_data):
  """(workdir of a 4-step 4×4 MNIST run, root with it exported as 'tiny')."""
  tmp = tmp_path_factory.mktemp("ship")
  c = mnist_cfg.get_config()
  c.model.update(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16)
  c.update(dict(image_size=4, num_train_steps=4, batch_size=4, eval_batch_size=4,
                eval_batches=1, eval_every=4, log_every=2, checkpoint_every=2,
                warmup_steps=1, progress=False, completion_images=0, num_images=2,
                num_samples=1, data_dir=prepared_data))
  wd, root = str(tmp / "wd"), tmp / "pretrained"
  trainer.train_and_evaluate(c, wd)
  meta = shipping.export(wd, "tiny", root=root, command="python train.py (tiny)",
                         commit="abc1234", bits_batches=1, log=lambda s: None)
  assert meta["steps"] == 4 and meta["num_train_steps"] == 4 and meta["commit"] == "abc1234"
  return wd, root


def logits(model, n=16):
  ids = jnp.arange(2 * n).reshape(2, n) % 256
  return np.asarray(jitted(model, lambda m, ids: m.forward_logp(ids), ids))


def test_a_shipped_model_loads_as_its_workdir(shipped, monkeypatch):
  wd, root = shipped
  meta = json.loads((root / "tiny" / pretrained.META).read_text())
  assert set(meta) >= {"command", "commit", "machine", "date", "train_wall_seconds",
                       "steps", "test_bits_per_dim", "sha256", "config", "model"}
  assert meta["sha256"] == pretrained.sha256(root / "tiny" / pretrained.WEIGHTS)
  assert (root / "tiny" / pretrained.WEIGHTS).stat().st_size == meta["bytes"] < 3 * 2 ** 20
  assert meta["train_wall_seconds"] > 0 and np.isfinite(meta["test_bits_per_dim"])
  _, ref, step = trainer.load_model(wd)
  cfg, got, s = trainer.load_model(str(root / "tiny"))          # by folder
  assert s == step == 4 and cfg.image_size == 4 and cfg.data_dir == ""
  np.testing.assert_array_equal(logits(ref), logits(got))
  monkeypatch.setattr(pretrained, "ROOT", root)
  monkeypatch.chdir(root.parent)       # a bare name that is no path here
  assert pretrained.names() == ["tiny"]
  np.testing.assert_array_equal(logits(ref), logits(trainer.load_model("tiny")[1]))
  with pytest.raises(TrainError, match="holds step 4 only, not 2"):
    trainer.load_model("tiny", step=2)
  with pytest.raises(TrainError, match="nor is it a shipped model's name.*tiny"):
    trainer.load_model("nope")


def test_eval_runs_on_a_shipped_model_unchanged(shipped, prepared_data, tmp_path):
  from trainer import evaluate
  _, root = shipped
  out = tmp_path / "ev"
  res = evaluate.evaluate_workdir(str(root / "tiny"), out=str(out), eval_batches=1,
                                  data_dir=prepared_data)
  assert res["step"] == 4 and np.isfinite(res["bits_per_dim"])
  assert res["completion_images_per_s"] > 0 and res["sample_images_per_s"] > 0
  assert (out / "completions.png").stat().st_size > 0 and (out / "eval.json").exists()
  assert sorted(os.listdir(root / "tiny")) == [pretrained.META, pretrained.WEIGHTS]


def test_a_changed_weights_file_is_refused(shipped, tmp_path):
  import shutil
  _, root = shipped
  bad = tmp_path / "bad"
  shutil.copytree(root / "tiny", bad)
  w = bad / pretrained.WEIGHTS
  data = bytearray(w.read_bytes())
  data[-100] ^= 1
  w.write_bytes(bytes(data))
  with pytest.raises(pretrained.ChecksumError, match="checksum mismatch for .*weights.npz"):
    trainer.load_model(str(bad))
  w.unlink()
  with pytest.raises(TrainError, match="is missing"):
    trainer.load_model(str(bad))


def test_foreign_arrays_and_oversized_models_are_refused(shipped, tmp_path):
  _, root = shipped
  _, model, _ = trainer.load_model(str(root / "tiny"))
  arrays = pretrained.weights(model)
  key = next(iter(arrays))
  with pytest.raises(TrainError, match="missing"):
    pretrained.fill(model, {k: v for k, v in arrays.items() if k != key})
  with pytest.raises(TrainError, match=f"{key} has shape"):
    pretrained.fill(model, {**arrays, key: np.zeros(arrays[key].shape + (2,))})
  with pytest.raises(TrainError, match="over the 0.00 MiB limit of a shipped model; nothing was written"):
    pretrained.save(tmp_path / "big", model, {}, max_bytes=10)
  assert not (tmp_path / "big").exists()


def test_the_index_page_tables_models_and_frontier(shipped, tmp_path):
  import shutil
  _, root = shipped
  idx = tmp_path / "idx"
  shutil.copytree(root, idx)
  (idx / shipping.FRONTIER).mkdir()
  rec = dict(name="d64L2", steps=30, params=118494, train_cpu_seconds=10.0,
             bits_per_dim=2.0, overrides={"learning_rate": 0.003, "batch_size": 32},
             completion_accuracy=0.75, completion_accuracy_se=0.02,
             original_accuracy=0.98, original_accuracy_se=0.005, blank_accuracy=0.54,
             blank_accuracy_se=0.02, random_bottom_accuracy=0.37,
             random_bottom_accuracy_se=0.02, n_images=500)
  (idx / shipping.FRONTIER / "runs.jsonl").write_text(json.dumps(rec) + "\n")
  page = pathlib.Path(shipping.write_index(idx)).read_text()
  assert "| `tiny` | linear |" in page and "abc1234" in page
  assert ("--run=d64L2:30:learning_rate=0.003,batch_size=32" in page
          and "| d64L2 | 118,494 | 30 |" in page and "lowest bits/dim" in page)
  assert "## Completions" not in page
  page = pathlib.Path(shipping.write_index(idx, {"tiny": {"steps": 4, "completion": rec}})).read_text()
  assert "| `tiny` (step 4) | 75.0 ± 2.0% |" in page and "Not the shipped step" not in page
  page = pathlib.Path(shipping.write_index(idx, {"tiny": {"steps": 2, "completion": rec}})).read_text()
  assert "**Not the shipped step**: tiny" in page
