"""studies/bench/kv_cache.py (results/kv_cache/): every bytes-per-token cell of the page
is the decode state's formula (`attention.decode_state_bytes`) and equals the bytes of
the state's arrays, at the page's contexts and others; a tiny run of the whole study
writes a page whose figures come from its JSON, with exact rows at rounding error; the
whole-stack rows (hybrids beside pure ones) equal the arrays of the model's state."""
import json

import numpy as np
import pytest

from studies.bench import kv_cache as K
from studies.bench import kv_cache_page as KP


def small_gauge(monkeypatch):
  """The study's matmul gauge (timing.matmul_peak, 8 products of 1024-square: ~2 GFLOP
  each, at the start and at the end) at 128: the test checks that the gauge is
  recorded and paged, not this machine's speed."""
  from studies.core import timing
  real = timing.matmul_peak
  monkeypatch.setattr(timing, "matmul_peak", lambda n=None, *a, **k: real(128, *a, **k))


@pytest.mark.parametrize("row", K.ROWS, ids=[r.label for r in K.ROWS])
def test_predicted_bytes_equal_the_state_arrays(row):
  """predicted == measured for the page's setup at 1k, 4k, 16k (and 100, 513 past and
  below the window), from abstract states (nothing allocated); the bytes per token are
  exact integers: MHA 8 heads (64 + 64) 4, MLA (256 + 32) 4, int8 8·128 + 8·8, the
  window 0."""
  s = K.Setup()
  for L in s.contexts + (100, 513):
    b = K.state_bytes(row, s, L)
    assert b["predicted"] == b["measured"], (row.label, L, b)
  rec = {"bytes": {L: K.state_bytes(row, s, L) for L in s.contexts}}
  want = {"MHA": 4096, "GQA(4)": 2048, "MQA": 512, "MLA, d_c = 4 d_h": 1152,
          "MLA, d_c = d_h": 384, "int8 cache": 1088, "fp8 cache": 1088,
          "sliding window": 0}[row.label]
  assert K.per_token(rec, s.contexts) == K.predicted_per_token(rec, s.contexts) == want


def test_the_committed_page_is_written_from_its_json_alone(tmp_path):
  """The page's figures come from results.json: the committed JSON gives the committed
  page, byte for byte, and its cells (a row's formula, a timing, the whole-stack rows)
  are the JSON's. (make test's cover of the page; the tiny measured run is make
  test-all's, below.)"""
  rec = json.loads(open("results/kv_cache/results.json").read())
  KP.write(rec, str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert page == open("results/kv_cache/README.md").read()
  assert (tmp_path / "kv_cache.png").stat().st_size > 1000
  r = rec["rows"]
  big = str(rec["setup"]["contexts"][-1])
  assert "| MLA, d_c = 4 d_h | 1 | latent d_c = 256 + rope key d_r = 32 |" in page
  assert f"{r['MHA']['us'][big]:.1f}" in page
  assert "## Whole stacks: hybrids beside pure ones" in page   # computed, not timed
  assert rec["hybrids"]["Qwen3-Next style"]["layers"] == ["gated_deltanet"] * 3 + ["softmax"]


@pytest.mark.slow
def test_a_tiny_run_writes_its_page_from_its_json(tmp_path, monkeypatch):
  """make test-all's: the whole study measured at tiny shapes. Covered in make test by
  tests/studies/test_kv_cache.py::test_the_committed_page_is_written_from_its_json_alone
  (the page from its JSON), ::test_predicted_bytes_equal_the_state_arrays (every bytes
  cell), and the decode numerics by tests/attention/test_contract.py::test_decode_equals_forward
  (MHA, MLA exact) and tests/attention/test_decode.py (the int8 cache's bound, local's
  window)."""
  small_gauge(monkeypatch)
  s = K.Setup(heads=2, head_dim=8, contexts=(16, 32), steps=2, rounds=1)
  rows = [r for r in K.ROWS if r.label in ("MHA", "MLA, d_c = 4 d_h", "int8 cache")]
  rows.append(K.Row("sliding window", "local", None, options=(("window", 8),)))
  rec = K.measure(s, "python -m scripts.kv_cache (test)", rows=rows, log=lambda m: None)
  KP.write(rec, str(tmp_path))
  back = json.loads((tmp_path / "results.json").read_text())
  page = (tmp_path / "README.md").read_text()
  assert (tmp_path / "kv_cache.png").stat().st_size > 1000
  r = back["rows"]
  for k in ("MHA", "MLA, d_c = 4 d_h"):           # exact up to rounding
    assert max(r[k]["error"].values()) < 1e-5, r[k]["error"]
  assert 1e-4 < max(r["int8 cache"]["error"].values()) < 0.05
  assert max(r["sliding window"]["error"].values()) > 1e-3     # truncation past w = 8
  w = r["sliding window"]["bytes"]
  assert w["16"]["measured"] == w["32"]["measured"]            # flat past the window
  assert all(v > 0 for row in r.values() for v in row["us"].values())
  assert "| MLA, d_c = 4 d_h | 1 | latent d_c = 32 + rope key d_r = 4 |" in page
  assert f"{r['MHA']['us']['32']:.1f}" in page
  assert "## Whole stacks: hybrids beside pure ones" in page   # computed, not timed
  assert back["hybrids"]["Qwen3-Next style"]["layers"] == ["gated_deltanet"] * 3 + ["softmax"]
  KP.write(back, str(tmp_path / "again"))                       # --page_only's path
  assert (tmp_path / "again" / "README.md").read_text() == page


@pytest.mark.parametrize("label, pattern, group", K.HYBRIDS, ids=[h[0] for h in K.HYBRIDS])
def test_whole_stack_bytes_equal_the_model_state_arrays(label, pattern, group):
  """The page's whole-stack rows (the model-level count, models.count) equal the nbytes
  of the decode state the model's init_state builds, traced abstractly (nothing
  allocated), below and past local's window; past it, only the softmax layers' KV
  caches grow (Hkv (64 + 64) 4 bytes per token each)."""
  import jax
  from flax import nnx
  import attention
  from models import build
  s = dict(K.dataclasses.asdict(K.Setup()), contexts=(100, 300, 500))
  cfg = K.hybrid_config(pattern, s, group)
  model = nnx.eval_shape(lambda: build(cfg, rngs=nnx.Rngs(0)))
  got = K.hybrid_stacks(s)[label]["bytes"]
  for L in s["contexts"]:
    state = jax.eval_shape(lambda: model.init_state(1, L))
    assert got[L] == attention.state_nbytes(state), (label, L)
  growing = sum(n == "softmax" for n in K.hybrid_stacks(s)[label]["layers"])
  assert got[500] - got[300] == growing * 200 * (s["heads"] // group) * 2 * 64 * 4
