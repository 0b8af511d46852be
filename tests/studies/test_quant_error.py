"""studies.bench.quant_error (the fp8 page and the KV-cache errors, one decode_all) and
studies.bench.ring_memory's page, on tiny shapes."""
import json

import jax
import numpy as np
import pytest

from studies.bench import quant_error as qe, ring_memory


def test_decode_all_matches_the_causal_forward_and_int8_is_within_its_bound():
  import attention
  q, k, v = jax.random.normal(jax.random.key(0), (3, 1, 12, 2, 8))
  out, st = qe.DECODE_ALL(q, k, v, None)
  ref = attention.get("softmax")(q, k, v, causal=True)
  np.testing.assert_allclose(out, ref, atol=1e-5)
  r = qe.kv_int8(batch=1, T=16, heads=2, head_dim=8)
  assert 0 < r["max_abs_error"] <= r["bound"] and r["ratio"] > 2


@pytest.mark.slow   # end to end (make test-all); the study's parts have cheap tests of their own
def test_tiny_study_page_comes_back_from_its_json(tmp_path):
  r = qe.measure([128], [16], 16, 2, 0, "python -m scripts.fp8_error (test)")
  qe.write(json.loads(json.dumps(r)), str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert page.startswith("# FP8 attention") and "## FP8 KV cache against the int8 cache" in page
  assert (tmp_path / "rmse.png").stat().st_size > 1000
  (tmp_path / "README.md").unlink()
  qe.write(json.load(open(tmp_path / "results.json")), str(tmp_path))
  assert (tmp_path / "README.md").read_text() == page


def test_ring_memory_page_says_what_its_table_says(tmp_path):
  MiB = 2 ** 20
  parts = {T: {p: [3 * T // p * MiB / 1024, 3 * T // p * MiB / 1024,
                   (40 if p == 2 else 10) * MiB] for p in ring_memory.DEVICES}
           for T in (1024, 2048)}
  r = {"run": {"command": "python -m scripts.ring_memory", "date": "2026-01-01",
               "host": "h", "jax_version": "0", "simulated_devices": 8},
       "shape": {"B": 1, "H": 8, "D": 64}, "lens": [1024, 2048],
       "parts": parts, "softmax": {1024: 100 * MiB, 2048: 400 * MiB}}
  ring_memory.write(json.loads(json.dumps(r)), str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert "| 1024 | 16.0 | 43.0 | 11.5 | 10.8 | 0.67 | 100.0 |" in page
  assert "some split plans more per device than one device holding everything" in page
  assert "0.67 (N = 1024)" in page
  with pytest.raises(RuntimeError, match="needs 8 devices"):
    ring_memory.per_device_bytes("ring", 8, 64, 1, 1, 8)
