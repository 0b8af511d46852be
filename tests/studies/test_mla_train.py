"""studies/mechanisms/mla_train.py: the MLA-against-MHA/GQA training comparison. Its runs
are stand-ins (no training): what is checked is the cache arithmetic, that the rate is
chosen on validation alone, that the reporting seeds are fresh, that the ledger
resumes, and that the page states its verdicts."""
import json
import math

import pytest

from studies.variants import compare as cv
from studies.mechanisms import mla_train as m
from studies.core import protocol, sweep


def test_cache_bytes_per_token():
  # the preset: 4 heads of d_h = 32; float32; mla d_r = d_h / 2 = 16
  got = {r.name: m.cache_per_token(r) for r in m.ROWS}
  assert got == {"MHA": 2 * 4 * 32 * 4, "GQA(2)": 2 * 2 * 32 * 4, "MQA": 2 * 32 * 4,
                 "MLA, d_c = 4 d_h": (128 + 16) * 4, "MLA, d_c = d_h": (32 + 16) * 4,
                 "MHA + RoPE": 2 * 4 * 32 * 4}


def test_unknown_row_lists_the_valid_ones():
  with pytest.raises(ValueError, match="valid: \\['MHA'"):
    m.row("MLA")


def fake_ensure(calls, val, test):
  """cv.ensure's stand-in: the validation loss val(row variant, latent, lr), the
  test loss test(variant, latent, lr, seed)."""
  def ensure(task, preset, variant, workdir, overrides, run=None, proto=False):
    assert proto and overrides["test_fraction"] == 0.05
    lat = overrides.get("model", {}).get("attention_options", {}).get("mla", {}).get(
        "latent_dim")
    kv = overrides.get("model", {}).get("num_kv_heads")
    lr, seed = overrides["learning_rate"], overrides["seed"]
    calls.append((variant, kv, lat, lr, seed))
    c = cv.make_config(task, preset, variant, overrides)
    return {"status": "ok", "variant": variant, "task": task, "preset": preset,
            "config": sweep.config_fingerprint(c), "date": "2026-11-28",
            "validation": val(variant, kv, lat, lr), "params": 1000,
            "eval": {"eval_loss": test(variant, kv, lat, lr, seed)}, "cpu_seconds": 1.0}
  return ensure


def test_rate_chosen_on_validation_and_fresh_seeds_reported(tmp_path, monkeypatch):
  calls = []
  # validation prefers 1e-3; a test figure that preferred 3e-4 must not matter
  val = lambda v, kv, lat, lr: {3e-4: 2.0, 1e-3: 1.5, 3e-3: 1.8}[lr]
  test = lambda v, kv, lat, lr, s: (0.5 if lr == 3e-4 else 1.6) + 0.01 * s
  monkeypatch.setattr(cv, "ensure", fake_ensure(calls, val, test))
  monkeypatch.setattr(sweep, "gauge", lambda: {})
  rows = [m.row("MHA"), m.row("MLA, d_c = d_h")]
  m.study(rows, str(tmp_path / "wd"), str(tmp_path / "out"), command="test", log=lambda s: 0)
  mha = [c for c in calls if c[0] == "softmax"]
  assert [c[3:] for c in mha] == [(3e-4, 0), (1e-3, 0), (3e-3, 0),
                                  (1e-3, 1), (1e-3, 2), (1e-3, 3)]
  assert [c for c in calls if c[0] == "mla"][0][1:3] == (1, 32)
  # resumable: a second call finds every run in the ledger and trains nothing
  n = len(calls)
  m.study(rows, str(tmp_path / "wd2"), str(tmp_path / "out"), command="again",
          log=lambda s: 0)
  assert len(calls) == n
  done = m.runs_done(str(tmp_path / "out"))
  assert {e["seed"] for e in done if e["lr"] == 1e-3} == {0, 1, 2, 3}
  assert len(json.load(open(tmp_path / "out" / "run.json"))) == 2


def test_page_verdicts(tmp_path, monkeypatch):
  calls = []
  val = lambda v, kv, lat, lr: {3e-4: 2.0, 1e-3: 1.5, 3e-3: 1.8}[lr]
  # MLA (d_c = d_h) worse than MHA by 0.1 nats on every seed, with some spread
  test = lambda v, kv, lat, lr, s: 1.5 + (0.1 if v == "mla" else 0) + 0.003 * s * s
  monkeypatch.setattr(cv, "ensure", fake_ensure(calls, val, test))
  monkeypatch.setattr(sweep, "gauge", lambda: {})
  out = str(tmp_path / "out")
  m.study([m.row("MHA"), m.row("MLA, d_c = d_h")], str(tmp_path / "wd"), out,
          command="python -m scripts.mla_train", log=lambda s: 0)
  text = open(m.write_page(out)).read()
  assert protocol.new_line(protocol.record(m.PAGE, m.VERSION)) in text
  mla = next(l for l in text.splitlines() if l.startswith("| MLA, d_c = d_h |"))
  assert "equal on every seed" not in mla and "| 192 |" in mla
  # the same constant gap on every seed: no spread in the difference, so "worse"
  assert "worse (Δ +0.100" in mla, mla
  assert f"{(1.5 + 0.1 + 0.003 * 14 / 3) / math.log(2):.3f}" in mla
  assert "| MQA | 256 | - | - | not run yet | - |" in text
  assert "| MLA, d_c = d_h | MQA | 192 vs 256 | not run yet |" in text
  assert "| MLA, d_c = 4 d_h | MHA + RoPE | 576 vs 1024 | not run yet |" in text
  s = json.load(open(tmp_path / "out" / "summary.json"))
  assert list(s["verdicts"]) == ["MLA, d_c = d_h vs MHA"]
  assert s["protocol"]["selected_on"] == "validation"
  assert (tmp_path / "out" / "quality_vs_cache.png").stat().st_size > 5000
