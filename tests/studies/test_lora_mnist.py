"""The LoRA MNIST study (studies.repro.lora, its page studies.repro.lora_page) and the
shifts it calibrates.

The smoke preset runs on real MNIST when the data mirror is present, else on a
synthetic 10-class stand-in (so that CI without the mirror still runs the whole
study: calibration, full and LoRA fine-tuning, LoRA from scratch, the page).
"""
import json
import os

import numpy as np
import pytest
import scipy.ndimage

from data import fetch, shifts
import dataclasses

from studies.core import pages
from studies.repro import lora as lora_mnist, lora_page

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("studies_lora_mnist")


def test_shifts_are_the_documented_transforms():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
  u = x.astype(np.float32) / 255
  np.testing.assert_allclose(shifts.rotate(x, 0.0), u, atol=1e-6)
  np.testing.assert_allclose(shifts.rotate(x, 90.0), np.rot90(u, 1, axes=(1, 2)), atol=1e-5)
  np.testing.assert_allclose(shifts.rotate(x, 180.0), u[:, ::-1, ::-1], atol=1e-5)
  np.testing.assert_array_equal(shifts.quantize(x, 0.5), (u > 0.5).astype(np.float32))
  np.testing.assert_allclose(shifts.invert(x, 1.0), 1 - u, atol=1e-6)
  np.testing.assert_allclose(shifts.invert(x, 0.5), np.full_like(u, 0.5), atol=1e-6)
  assert shifts.to_uint8(shifts.invert(x, 1.0)).tolist() == (255 - x).tolist()
  assert shifts.parse("inverted") == ("inverted", 1.0)
  assert shifts.parse("rotated:30") == ("rotated", 30.0)
  with pytest.raises(ValueError, match="valid: \\['inverted', 'quantized', 'rotated'\\]"):
    shifts.parse("flipped")
  with pytest.raises(ValueError, match="strength must be in"):
    shifts.parse("inverted:2")


def test_a_bad_shift_is_refused_naming_the_key():
  import trainer
  from configs import mnist
  from models import ConfigError
  c = mnist.get_config()
  c.shift = "rotated:abc"
  with pytest.raises(ConfigError, match="config 'shift'.*not a number"):
    trainer.validate(c)
  c.shift = ""
  c.init_from = "somewhere"
  c.lora.rank = 4
  with pytest.raises(ConfigError, match="config 'init_from'.*lora.base_workdir"):
    trainer.validate(c)


def synthetic_mnist(n_train, n_test, seed=0):
  """10 classes of smooth random strokes, jittered and noisy; uint8 (N, 28, 28)."""
  rng = np.random.default_rng(seed)
  protos = scipy.ndimage.gaussian_filter(rng.random((10, 28, 28)), (0, 2, 2))
  protos = (protos > np.quantile(protos, 0.8, axis=(1, 2), keepdims=True)) * 220.0

  def draw(n):
    y = rng.integers(0, 10, n)
    x = np.stack([np.roll(protos[c], rng.integers(-1, 2, 2), (0, 1)) for c in y])
    x = np.clip(x + rng.normal(0, 20, x.shape), 0, 255).astype(np.uint8)
    return x, y
  return (*draw(n_train), *draw(n_test))


@pytest.fixture(scope="module")
def mnist_dir(request):
  """The run's shared data dir with MNIST (conftest.py), or None without a mirror."""
  mirror = fetch.default_mirror()
  if not all((mirror / rel).is_file() for rel, _, _ in fetch.FILES["mnist"]):
    return None
  return request.getfixturevalue("prepared_data")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, mnist_dir):
  out = tmp_path_factory.mktemp("lora_mnist")
  arrays = lora_mnist.load_mnist(mnist_dir) if mnist_dir else synthetic_mnist(4096, 1024)
  res = lora_mnist.mlp_study(lora_mnist.PRESETS["smoke"], arrays, log=lambda s: None)
  res.update(preset_name="smoke", preset=dataclasses.asdict(lora_mnist.PRESETS["smoke"]),
             run=pages.run_record("python -m scripts.lora_mnist --preset=smoke", "smoke"))
  lora_page.write_mlp(res, str(out), arrays[2])
  return res, out, "mnist" if mnist_dir else "synthetic"


@pytest.mark.slow   # end to end (make test-all); the study's parts have cheap tests of their own
def test_smoke_study_counts_starts_and_calibrates(smoke):
  res, out, source = smoke
  P = lora_mnist.PRESETS["smoke"]
  runs = res["runs"]
  assert res["params"] == 784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10 == 55050
  for r in runs:
    assert len(r["acc"]) == P.seeds and all(0 <= a <= 1 for a in r["acc"])
    if r["kind"].startswith("lora"):
      assert r["trainable"] == r["rank"] * 1050          # (784+64)+(64+64)+(64+10)
  assert {(r["kind"], r["shift"], r["rank"]) for r in runs if r["kind"] == "lora_ft"} == {
      ("lora_ft", s, k) for s in lora_mnist.SHIFTS for k in P.ranks}
  for r in runs:
    if r["kind"] == "lora_ft":    # B = 0: adapted model == base model before any step
      np.testing.assert_allclose(r["acc_start"],
                                 res["calibration"][r["shift"]]["base_acc"], atol=1e-9)
  base_clean = np.mean(runs[0]["acc"])
  assert base_clean > 0.6, (source, base_clean)
  for name, c in res["calibration"].items():
    if c["reached"]:               # the chosen strength hits the report's base accuracy
      assert abs(np.mean(c["base_acc"]) - c["target"]) < 0.06, (name, c)
  ft = {r["shift"]: np.mean(r["acc"]) for r in runs if r["kind"] == "full_ft"}
  for name in ("rotated", "inverted"):   # fine-tuning recovers what the shift broke
    assert ft[name] > np.mean(res["calibration"][name]["base_acc"]) + 0.2, (name, ft)


@pytest.mark.slow   # end to end (make test-all); the study's parts have cheap tests of their own
def test_smoke_page_holds_both_tables_and_plots(smoke):
  res, out, _ = smoke
  page = open(os.path.join(out, "README.md")).read()
  assert "| full fine-tuning | – | 55,050 |" in page and "76.41" in page
  assert "| LoRA fine-tuning | 8 | 8,400 |" in page and "| 8 | 8,400 |" in page
  assert "--preset=smoke" in page
  for f in ("accuracy_vs_rank.png", "calibration.png", "shifts.png"):
    assert os.path.getsize(os.path.join(out, f)) > 1000
  assert json.load(open(os.path.join(out, "mlp.json")))["preset_name"] == "smoke"
  # each table says what of the report it reproduces; without a tuning record the
  # page says the learning rates were not tuned
  assert page.count("cells** (the report's figure within two standard deviations") == 2
  assert "no tuning record" in page
  os.remove(os.path.join(out, "README.md"))
  lora_page.write_page(str(out))                  # from the JSON alone
  assert open(os.path.join(out, "README.md")).read() == page


@pytest.mark.slow   # trains every method at two rates (make test-all)
def test_one_procedure_tunes_every_method():
  """tune trains each method at each lr of the grid on held-out images and keeps the
  best mean; the page shows the record and whether the run used its choices."""
  p = dataclasses.replace(lora_mnist.PRESETS["smoke"], ranks=(1,), grid=3, n_test=512,
                          base_epochs=1, ft_epochs=1, scratch_epochs=1)  # the procedure, cheaply
  t = lora_mnist.tune(p, synthetic_mnist(10000 + 2048, 16), grid=(3e-3, 1e-2),
                      log=lambda s: None)
  assert set(t["scores"]) == set(lora_mnist.METHODS) and t["grid"] == [3e-3, 1e-2]
  for k, sc in t["scores"].items():
    assert set(sc) == {"0.003", "0.01"} and t["chosen"][k] == float(max(sc, key=sc.get))
  t["run"] = {"command": "python -m scripts.lora_mnist --tune", "date": "2026-01-01"}
  assert "not** the tuned choices" in "\n".join(
      lora_page.tuning_lines({"ft_lr": 1.0, "lora_lr": 1.0, "scratch_lr": 1.0}, t))
  chosen = {lora_mnist.LR_FIELD[k]: v for k, v in t["chosen"].items()}
  lines = "\n".join(lora_page.tuning_lines(chosen, t))
  assert "one procedure for every method" in lines and "not** the tuned" not in lines


@pytest.mark.slow   # train.py's LoRA path end to end (make test-all); test_train covers a LoRA run
def test_pixel_smoke_compares_lora_with_full_fine_tuning(smoke, mnist_dir, tmp_path):
  """The pixel-Transformer part through train.py: base, then full fine-tuning
  (init_from) and LoRA r=8 on q, k, v, o (lora.base_workdir) on Inverted MNIST."""
  if mnist_dir is None:
    pytest.skip("no MNIST mirror (set ATTNLAB_DATA_MIRROR): the pixel part reads "
                "MNIST through train.py")
  _, out, _ = smoke
  res = lora_mnist.pixel_study(lora_mnist.PIXEL_PRESETS["smoke"], str(tmp_path / "wd"),
                               mnist_dir, log=lambda s: None)
  lora_page.write_pixel(dict(res, preset_name="smoke", run=pages.run_record("x", "smoke")),
                        str(out))
  full, lora = res["full_ft"], res["lora"]
  assert full["trainable"] == full["params"] == res["base"]["params"]
  assert lora["trainable"] == 4 * 8 * (16 + 16)      # 1 layer x (q,k,v,o) x r(in+out)
  assert lora["params"] == full["params"] + lora["trainable"]
  for r in (res["base"], full, lora):
    assert 0 < r["inverted"] < 8 and 0 < r["clean"] < 8       # bits/dim, finite
  page = open(os.path.join(out, "README.md")).read()
  assert "## Beyond the report: LoRA on the pixel Transformer" in page
  assert f"{lora['inverted']:.4f}" in page
