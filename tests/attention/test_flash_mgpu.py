"""flash_mgpu (Mosaic GPU kernels for Hopper): forward and backward against float64
softmax attention, and what it refuses.

On the CPU the kernels run in Mosaic GPU's interpret mode (threads, shared memory,
barriers and TMA simulated; the interpreter also checks that every barrier phase is
observed), which takes seconds per call: one causal GQA case whose lengths are off the
tiles and Tq < Tk (bottom-right alignment, skipped and masked tiles, padded keys),
in bf16. On a GPU the compiled kernels take the study's checks (studies/bench/mgpu.py:
bf16 and fp16, causal and not, GQA, D 64, 96 and 128).
"""
import json
import os
import pathlib
import subprocess
import sys

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
ROOT = pathlib.Path(__file__).resolve().parents[2]


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


# The forward under jax_enable_x64, turned on both ways (the process-wide config, which
# only a process of its own may set, and the context), causal and not, GQA, each call
# jitted: on a GPU it equals softmax attention; off a GPU (interpret mode, whose
# threads waited forever at their barriers under x64) it is refused in one line.
X64_DRIVER = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
import attention
from attention.flash_mgpu import flash_mgpu
rng = np.random.default_rng(0)
q = jnp.asarray(rng.standard_normal((1, 16, 4, 16)), jnp.float32)
k, v = (jnp.asarray(rng.standard_normal((1, 16, 2, 16)), jnp.float32) for _ in 'kv')

def forward(causal):
  try:
    out = jax.jit(lambda q, k, v: flash_mgpu(q, k, v, causal=causal))(q, k, v)
  except attention.AttentionError as e:
    return str(e)
  ref = attention.get('softmax')(q, k, v, causal=causal)
  return [str(out.dtype), float(jnp.abs(out - ref).max())]

res = {}
for causal in (False, True):
  with jax.enable_x64(True):
    res[f'context, causal={causal}'] = forward(causal)
jax.config.update('jax_enable_x64', True)
for causal in (False, True):
  res[f'config, causal={causal}'] = forward(causal)
print(json.dumps(res))
"""


def test_its_forward_under_x64_runs_on_a_gpu_or_is_refused_in_one_line():
  """jax_enable_x64 on (by the context and by jax.config.update), causal and not,
  B=1, T=16, Hq=4, Hkv=2, D=16, float32, in a process of its own under a timeout: a
  hang fails the test instead of stalling the suite."""
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  p = subprocess.run([sys.executable, "-c", X64_DRIVER], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=240)
  assert p.returncode == 0, p.stderr[-3000:]
  res = json.loads(p.stdout.splitlines()[-1])
  assert len(res) == 4, res
  for case, got in res.items():
    if ON_GPU:
      assert got[0] == "float32" and got[1] < 0.03, (case, got)
    else:
      assert isinstance(got, str) and "flash_mgpu: jax_enable_x64 is on" in got, (case, got)
      assert "\n" not in got, got


def test_lowers_for_a_hopper_gpu_under_x64():
  """Under jax_enable_x64 the compiled kernels still lower for 'cuda' (they are
  traced with x64 off: a Python int loop bound would otherwise make an int64 index
  that meets the int32 grid indices: non-causal, whose loop bounds are Python ints,
  was a TypeError), forward."""
  from jax import export
  x = jax.ShapeDtypeStruct((1, 128, 2, 64), jnp.bfloat16)
  with jax.enable_x64(True):
    f, _ = M.jitted(lambda q, k, v, c: flash_mgpu(q, k, v, causal=c, interpret=False), False)
    assert "mosaic_gpu" in export.export(f, platforms=["cuda"])(x, x, x).mlir_module()
