"""The completion metric's plumbing (trainer/digit_judge.py, evaluate.completion_metric) with a
tiny judge trained for a few steps: storage and checksums, retraining on demand,
the three baselines, and eval.py's JSON/npz/TensorBoard outputs. The real 99%
classifier is trained by `python -m scripts.train_classifier`, never here."""
import json
import os

import numpy as np
import pytest

from trainer import digit_judge

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("digit_judge")

TINY = digit_judge.Recipe(steps=3, batch=16, channels=(2, 4), hidden=8)
SIDE = 8


def fake_mnist(n=64, seed=0):
  """(x (n, 64) 0..255 int32, labels (n,)): random 8×8 'images', labels from their sums."""
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 256, size=(n, SIDE * SIDE)).astype(np.int32)
  return x, x.sum(1) % 10


@pytest.fixture(scope="module")
def arrays():
  (a, b), (c, d) = fake_mnist(64, 0), fake_mnist(32, 1)
  return a, b, c, d


def test_trained_on_demand_saved_with_checksums_then_reused(tmp_path, arrays):
  logs = []
  m1, meta = digit_judge.load(SIDE, data_dir=tmp_path, recipe=TINY, arrays=arrays,
                             log=logs.append)
  folder = digit_judge.path(SIDE, "", tmp_path)
  assert folder == tmp_path / "classifier" / "mnist_8"
  assert digit_judge.verify(folder) is None and "SHA256SUMS is missing" in logs[0]
  assert meta["steps"] == 3 and 0 <= meta["test_accuracy"] <= 1 and meta["side"] == SIDE
  logs.clear()
  m2, _ = digit_judge.load(SIDE, data_dir=tmp_path, recipe=TINY, arrays=arrays,
                          log=logs.append)
  assert logs == []                                     # reused, not retrained
  x = arrays[2]
  np.testing.assert_array_equal(digit_judge.predict(m1, x, SIDE),
                                digit_judge.predict(m2, x, SIDE))
  # a corrupt file is named and the judge retrained
  w = folder / "weights.msgpack"
  w.write_bytes(w.read_bytes()[:-1] + b"\0")
  assert "checksum mismatch" in digit_judge.verify(folder)
  digit_judge.load(SIDE, data_dir=tmp_path, recipe=TINY, arrays=arrays, log=logs.append)
  assert "checksum mismatch" in logs[0] and digit_judge.verify(folder) is None
  # another recipe retrains too
  logs.clear()
  other = digit_judge.Recipe(steps=3, batch=16, channels=(2, 4), hidden=8, seed=1)
  digit_judge.load(SIDE, data_dir=tmp_path, recipe=other, arrays=arrays, log=logs.append)
  assert "another recipe" in logs[0]


def test_baselines_and_metric_arithmetic(tmp_path, arrays):
  model, _ = digit_judge.load(SIDE, data_dir=tmp_path, recipe=TINY, arrays=arrays,
                             log=lambda s: None)
  x, y = arrays[2], arrays[3]
  given = SIDE * SIDE // 2
  blank, mixed, other = digit_judge.baselines(x, given=given, seed=0)
  assert (blank[:, given:] == 0).all() and (blank[:, :given] == x[:, :given]).all()
  assert (other != np.arange(len(x))).all()                    # never its own bottom
  np.testing.assert_array_equal(mixed[:, given:], x[other, given:])
  pred = digit_judge.predict(model, x, SIDE)
  # completions equal to the originals score exactly the originals' accuracy; two
  # samples per image (one original, one blank) score their mean per image
  res = digit_judge.completion_accuracy(x, x, y, side=SIDE, given=given, model=model)
  assert res["completion_accuracy"] == res["original_accuracy"] == np.mean(pred == y)
  assert res["n_images"] == len(x) and res["samples_per_image"] == 1
  two = np.stack([x, blank], 1)
  res2 = digit_judge.completion_accuracy(two, x, y, side=SIDE, given=given, model=model)
  assert res2["samples_per_image"] == 2
  np.testing.assert_allclose(res2["completion_accuracy"],
                             (res["original_accuracy"] + res["blank_accuracy"]) / 2)
  np.testing.assert_allclose(res["completion_lead_over_blank"],
                             res["completion_accuracy"] - res["blank_accuracy"])
  with pytest.raises(ValueError, match="not completions of these images"):
    digit_judge.completion_accuracy(mixed[::-1], x, y, side=SIDE, given=given, model=model)


def test_eval_completion_metric_writes_json_npz_and_tensorboard(tmp_path, arrays,
                                                               monkeypatch):
  """trainer.evaluate.completion_metric on an untrained 8×8 pixel model and 8×8 stand-in test
  images, judged by a tiny digit judge saved beforehand in the data dir: every figure is
  there, and the npz holds what the figure was computed from."""
  import types
  import jax
  from flax import nnx
  from trainer import evaluate
  import trainer
  from configs import mnist as mnist_cfg
  from models import ModelConfig, build
  data_dir = tmp_path / "data"
  digit_judge.load(SIDE, data_dir=data_dir, recipe=TINY, arrays=arrays, log=lambda s: None)
  monkeypatch.setattr(digit_judge, "RECIPE", TINY)       # so eval.py reuses that one
  cfg = mnist_cfg.get_config()
  cfg.update(dict(data_dir=str(data_dir), image_size=SIDE, completion_images=6))
  cfg.model.update(dict(d_model=8, num_heads=1, d_ff=8, num_layers=1, max_len=64,
                        num_mixtures=1, vocab_size=256))
  task = types.SimpleNamespace(side=SIDE, test_x=arrays[2], test_y=arrays[3])
  model = build(ModelConfig.from_dict(trainer.model_dict(cfg)), rngs=nnx.Rngs(0))
  model.eval()
  out = tmp_path / "eval"
  out.mkdir()
  res = evaluate.completion_metric(cfg, task, model, str(out), "cache",
                                   jax.random.PRNGKey(0), str(tmp_path), 7)
  for k in ("completion", "original", "blank", "random_bottom"):
    assert 0 <= res[f"{k}_accuracy"] <= 1 and res[f"{k}_accuracy_se"] >= 0
  assert res["n_images"] == 6 and 0 <= res["classifier_test_accuracy"] <= 1
  json.dumps(res)                                           # JSON-serialisable
  z = np.load(out / "completion_metric.npz")
  given = int(z["given"])
  assert given == 32 and z["completed"].shape == (6, 64) and z["hidden_mask"].sum() == 32
  np.testing.assert_array_equal(z["completed"][:, :given], z["originals"][:, :given])
  np.testing.assert_array_equal(z["labels"], task.test_y[:6])
  again = digit_judge.completion_accuracy(z["completed"], z["originals"], z["labels"],
                                         side=SIDE, given=given, data_dir=data_dir)
  assert again["completion_accuracy"] == res["completion_accuracy"]
  assert any(f.startswith("events") for f in os.listdir(tmp_path / "tb"))
