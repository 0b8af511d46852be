"""flash_mgpu (Mosaic GPU kernels for Hopper): forward and backward against float64
softmax attention, and what it refuses.

On the CPU the kernels run in Mosaic GPU's interpret mode (threads, shared memory,
barriers and TMA simulated; the interpreter also checks that every barrier phase is
observed), which takes seconds per call: one causal GQA case whose lengths are off the
tiles and Tq < Tk (bottom-right alignment, skipped and masked tiles, padded keys),
in bf16. On a GPU the compiled kernels take the study's checks (studies/bench/mgpu.py:
bf16 and fp16, causal and not, GQA, D 64, 96 and 128).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention.flash_mgpu import flash_mgpu
from studies.bench import mgpu as M

ON_GPU = jax.default_backend() == "gpu"
# bf16 inputs, bf16 P and dS: errors relative to the largest reference entry
TOL = {"bfloat16": 2e-2, "float16": 4e-3}
CPU_CASES = ((1, 80, 200, 2, 1, 64, True, "bfloat16"),)


def check(case, **cfg):
  B, Tq, Tk, H, Hkv, D, causal, dt = case
  (q, k, v), w = M.inputs(B, Tq, Tk, H, Hkv, D, jnp.dtype(dt), seed=3)
  ref = M.reference64(q, k, v, w, causal)
  f, g = M.jitted(lambda q, k, v, c: flash_mgpu(q, k, v, causal=c, **cfg), causal)
  got = [f(q, k, v), *g(q, k, v, w)]
  for name, x, r in zip(("out", "dq", "dk", "dv"), got, ref):
    assert x.shape == r.shape, name
    err = np.abs(np.asarray(x, np.float64) - r).max() / np.abs(r).max()
    assert err < TOL[dt], f"{name}: relative error {err:.3g} >= {TOL[dt]}"


@pytest.mark.parametrize("case", M.CHECKS if ON_GPU else CPU_CASES, ids=str)
def test_forward_and_gradients_match_float64(case):
  check(case)


def test_tiles_and_stages_are_the_same_function():
  """Other tiles and ring depths compute the same result (CPU: one other setting)."""
  case = (1, 128, 192, 1, 1, 64, True, "bfloat16")
  for cfg in ([dict(block_k=64, stages=3)] if not ON_GPU else
              [dict(block_k=64, stages=3), dict(block_k=256, stages=2)]):
    check(case, **cfg)


def test_refusals_name_the_reason():
  q = jnp.zeros((1, 8, 2, 8), jnp.float32)
  cases = [
      (dict(mask=jnp.ones((1, 1, 8, 8), bool)), "masks"),
      (dict(q_seg=jnp.zeros((1, 8), jnp.int32), k_seg=jnp.zeros((1, 8), jnp.int32)),
       "segment"),
      (dict(positions="alibi"), "alibi"),
      (dict(block_q=48), "block_q"),
      (dict(stages=1), "stages"),
      (dict(compute_dtype=jnp.float32), "compute_dtype"),
  ]
  for kw, word in cases:
    with pytest.raises(attention.AttentionError, match=word):
      flash_mgpu(q, q, q, **kw)
  with jax.enable_x64(True):
    with pytest.raises(attention.AttentionError, match="float64"):
      flash_mgpu(q.astype(jnp.float64), q, q)


def test_lowers_for_a_hopper_gpu_from_the_cpu():
  """The compiled path (wgmma from registers, in-place accumulators: not what interpret
  mode runs) lowers to Mosaic GPU for 'cuda', forward and backward."""
  from jax import export
  x = jax.ShapeDtypeStruct((1, 256, 2, 128), jnp.bfloat16)
  w = jax.ShapeDtypeStruct((1, 256, 2, 128), jnp.float32)
  for causal in (False, True):
    f, g = M.jitted(lambda q, k, v, c: flash_mgpu(q, k, v, causal=c, interpret=False), causal)
    for fn, args in ((f, (x, x, x)), (g, (x, x, x, w))):
      text = export.export(fn, platforms=["cuda"])(*args).mlir_module()
      assert "mosaic_gpu" in text
