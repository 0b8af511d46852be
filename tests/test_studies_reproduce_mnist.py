"""studies.reproduce_mnist: the attention timing and, with MNIST, the smoke preset."""
import json

import numpy as np
import pytest

from studies import reproduce_mnist as rm


def test_slope_fits_log_log_and_scaling_times_every_variant():
  assert rm.slope({1024: 1.0, 2048: 4.0, 4096: 16.0}) == pytest.approx(2.0)
  assert rm.slope({256: 5.0, 1024: 1.0, 2048: 2.0}) == pytest.approx(1.0)   # >= 1024 only
  assert np.isnan(rm.slope({1024: 1.0}))
  sc = rm.scaling((16, 32), softmax_max_len=16, H=1, D=4, repeats=1)
  assert set(sc) == {"softmax", "flash", "linear"}
  assert set(sc["softmax"]["forward"]) == {16}                 # capped by softmax_max_len
  assert set(sc["linear"]["forward+backward"]) == {16, 32}
  assert all(t > 0 for v in sc.values() for d in v.values() for t in d.values())


def test_smoke_preset_writes_the_page(tmp_path, prepared_data):
  data_dir = prepared_data
  out = tmp_path / "out"
  res = rm.run("smoke", str(out), str(tmp_path / "wd"), data_dir=str(data_dir),
               log=lambda *a: None)
  assert set(res["models"]) == {"softmax", "linear"}
  for m in res["models"].values():
    assert 0 < m["bits_per_dim"] < 8 and m["steps"] == rm.PRESETS["smoke"].steps
  assert len(res["generation"]) == 4
  assert all(g["images_per_s"] > 0 for g in res["generation"].values())
  page = (out / "README.md").read_text()
  assert "**These are CPU results.**" in page and "| paper (Table 2): linear | 0.644" in page
  for f in ("completions_softmax.png", "completions_linear.png", "samples_softmax.png",
            "samples_linear.png", "scaling.png"):
    assert (out / f).stat().st_size > 100
  saved = json.loads((out / "results.json").read_text())
  assert saved["preset_name"] == "smoke" and saved["run"]["preset"] == "smoke"
  (out / "README.md").unlink()
  rm.write_page(saved, str(out))        # the page comes back from results.json alone
  assert (out / "README.md").read_text() == page
