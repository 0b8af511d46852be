"""studies/bench/mgpu.py without a GPU: the float64 reference against softmax, and the
page from a results record (one FLOP count per function on every row, both peaks)."""
import jax.numpy as jnp
import numpy as np

import attention
from studies.bench import mgpu as M


def test_reference64_is_softmax_attention_and_its_gradients():
  (q, k, v), w = M.inputs(1, 6, 9, 4, 2, 8, jnp.float32, seed=0)
  o, dq, dk, dv = M.reference64(q, k, v, w, causal=True)
  f, g = M.jitted(lambda q, k, v, c: attention.get("softmax")(q, k, v, causal=c), True)
  for x, r in zip([f(q, k, v), *g(q, k, v, w)], (o, dq, dk, dv)):
    np.testing.assert_allclose(np.asarray(x), r, atol=2e-5)


def test_page_counts_one_flop_count_per_function(tmp_path):
  run = dict(command="python -m scripts.mgpu_bench", date="2026-11-28", backend="gpu",
             device_kind="NVIDIA H200", device_count=1, jax_version="0.11.2",
             jaxlib="0.11.2", preset="gpu")
  row = {"B": 4, "H": 16, "flash_mgpu": {"fwd": 1e-3, "fwd_bwd": 3e-3},
         "cudnn": {"fwd": 1.1e-3, "fwd_bwd": "ValueError: x"}}
  res = dict(run=run, name="h200", device="NVIDIA H200 (gpu)", datasheet_bf16=989.4e12,
             peak={"flop_per_s": 7e14, "n": 8192, "dtype": "bfloat16", "runs": 10,
                   "statistic": "median"},
             correctness=[dict(shape=[1, 8, 8, 2, 2, 64], causal=True, dtype="bfloat16",
                               flash_mgpu={"out": 1e-3, "dq": 2e-3, "dk": 3e-3, "dv": 4e-3},
                               sdpa={"error": "refused"})],
             cases={"D128_causal": dict(D=128, causal=True, tuning=dict(N=4096),
                                        speed={"4096": row})})
  M.write_page(res, str(tmp_path))
  page = (tmp_path / "mgpu_h200.md").read_text()
  tf = M.fa_flops(4, 16, 4096, 128, True, "fwd") / 1e-3        # the causal half
  assert f"| 4096 | flash_mgpu | 1.000 | {tf / 1e12:.0f} | {tf / 7e14 * 100:.0f}% | " \
         f"{tf / 989.4e12 * 100:.0f}% |" in page
  assert "1.10×" in page and "ValueError" in page and "refused" in page
