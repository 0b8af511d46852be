"""ring: over 4 devices (and 8 in make test-all) it equals softmax, forward and backward
(causal: on the balanced zig-zag layout, whose per-device work is counted here); without a mesh
it is flash; it decodes with the KV cache; in causal mode it skips exactly the shard
pairs above the diagonal.

The multi-device check runs in a subprocess with 8 simulated CPU devices
(tests/multidevice.py).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import attention
from attention import ring as ring_lib
from tests import multidevice

TOL = 1e-5


# (name, (B, Tq, Tk, Hq, Hkv, D, Dv), keyword arguments) of the no-mesh check: what the
# single-device sweeps (the contract, the models, the positions) leave ring out of,
# because there it is flash (`attention.native_names(own_compute=True)`)
NO_MESH_CASES = [
    ("causal_gqa_self", (1, 12, 12, 4, 2, 8, 8), dict(causal=True, block_q=4, block_k=4)),
    ("cross_mqa_padding_dv", (2, 6, 10, 2, 1, 8, 4), dict(block_k=4, mask="padding")),
    ("alibi_segments_causal", (2, 12, 12, 2, 2, 8, 8),
     dict(causal=True, block_q=4, block_k=4, positions="alibi", segments=True)),
    ("rope_dense_mask_scale", (1, 8, 8, 2, 2, 8, 8),
     dict(positions="rope", mask="dense", scale=0.3)),
]


def _no_mesh_inputs(shape, kw):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  rng = np.random.default_rng(len(kw))
  arr = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
  q, k, v = arr(B, Tq, Hq, D), arr(B, Tk, Hkv, D), arr(B, Tk, Hkv, Dv)
  kw = dict(kw)
  if kw.get("mask") == "padding":
    kw["mask"] = jnp.asarray(np.arange(Tk)[None, None, None] < np.array([Tk, Tk - 3])
                             [:, None, None, None])
  elif kw.get("mask") == "dense":
    kw["mask"] = jnp.asarray(rng.random((B, 1, Tq, Tk)) < 0.7).at[..., 0].set(True)
  if kw.pop("segments", False):
    seg = jnp.asarray(np.array([[1] * 5 + [2] * 7, [3] * 3 + [4] * 6 + [0] * 3]))
    kw.update(q_seg=seg, k_seg=seg)
  return q, k, v, kw


def test_ring_without_a_mesh_is_flash():
  """No mesh in context (or a seq axis of 1): ring is flash's function, bit for bit,
  forward and gradients, with every argument handed on (causal, masks, segment ids,
  ALiBi and RoPE, cross lengths, GQA/MQA, Dv != D, scale, tiles): the jaxpr of its
  value_and_grad is flash's, the arrays (masks, ids, positions) its arguments, so that
  one handed to another parameter shows, and its constants equal. Traced only, nothing
  compiled: the same program computes the same bits, and what flash computes is
  checked against softmax by the contract and tests/attention/test_exact.py."""
  one = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "seq"))   # seq of 1
  ring, flash = attention.get("ring"), attention.get("flash")
  for name, shape, kw in NO_MESH_CASES:
    q, k, v, kw = _no_mesh_inputs(shape, kw)
    statics = {a: x for a, x in kw.items() if not hasattr(x, "shape")}
    arrays = {a: x for a, x in kw.items() if hasattr(x, "shape")}

    def program(f, **more):
      loss = lambda q, k, v, arrays: jnp.sum(f(q, k, v, **statics, **arrays, **more) ** 2)
      closed = jax.make_jaxpr(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v, arrays)
      return str(closed.jaxpr), closed.consts

    want, want_consts = program(flash)
    assert "custom_vjp_call" in want or "dot_general" in want, name     # a real program
    for got, consts in (program(ring), program(ring, mesh=one)):
      assert got == want, name
      assert len(consts) == len(want_consts), name
      for a, b in zip(consts, want_consts):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_ring_decodes_with_the_kv_cache():
  """Its decode state is the exact family's KV cache: chunked prefill then steps give
  the causal forward pass, and ring's options (block sizes, axis) are ignored there."""
  from tests.attention.test_decode import SHAPE, run_decode
  from tests.attention.test_exact import make_inputs
  q, k, v = (jnp.asarray(x) for x in make_inputs(SHAPE, dtype=np.float32))
  out, state = jax.jit(lambda q, k, v: run_decode("ring", q, k, v, chunks=[4, 1, 3, 1],
                                                  block_q=4, axis="seq"))(q, k, v)
  ref = attention.get("softmax")(q, k, v, causal=True)
  np.testing.assert_allclose(out, ref, atol=1e-5)
  assert state.name == "ring" and int(state.pos) == SHAPE[1]


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("n, Tq, Tk", [(4, 32, 32), (8, 16, 32), (4, 32, 8)])
def test_ring_skips_exactly_the_chunk_pairs_above_the_diagonal(n, Tq, Tk, layout):
  """Causal: a (query chunk, key chunk) pair is visited iff some pair of positions in it
  is visible under the bottom-right aligned mask, in either layout (zig-zag: device p
  holds chunks p and 2n - 1 - p of 2n; (4, 32, 8) has too few keys for 2n chunks and
  stays contiguous)."""
  d = attention.Dims(1, Tq, Tk, 1, 1, 8, 8)
  r = ring_lib._make_ring(None, "seq", n, None, None, d, True, layout, 8, 8, 1.0)
  assert r.m == (2 if layout == "zigzag" and Tk % (2 * n) == 0 else 1)
  cq, ck = r.dc.Tq, r.dc.Tk
  allowed = np.asarray(attention.causal_mask(Tq, Tk))
  rows = set()
  for me in range(n):
    for hq in range(r.m):
      a = r.chunk(me, hq)
      rows.add(a)
      for src in range(n):
        for hk in range(r.m):
          b = r.chunk(src, hk)
          block = allowed[a * cq:(a + 1) * cq, b * ck:(b + 1) * ck]
          assert bool(r.visible(a, b)) == block.any(), (me, src, hq, hk)
  assert rows == set(range(n * r.m))           # every chunk of queries on one device


def test_zigzag_ring_balances_the_causal_work():
  """The tiles each device computes (the ring's own schedule: its visited chunk pairs,
  flash's tiles inside them, the same forward and backward): equal on every device
  under the zig-zag layout; under the contiguous layout device p computes p full shard
  pairs plus its diagonal one, 13.4 times the first device's work on the last at
  N = 4096 over 8 (64-row tiles). Both cover the causal triangle exactly."""
  for n, N, b in ((8, 4096, 64), (4, 32, 4)):
    zz = ring_lib.device_work(n, N, N, layout="zigzag", block_q=b, block_k=b)
    flat = ring_lib.device_work(n, N, N, layout="contiguous", block_q=b, block_k=b)
    t = N // n // b                                 # tiles per side of a shard pair
    assert flat == [p * t * t + t * (t + 1) // 2 for p in range(n)], flat
    assert max(zz) <= 1.1 * min(zz) and len(set(zz)) == 1, zz
    assert sum(zz) == sum(flat) == (N // b) * (N // b + 1) // 2, (zz, flat)
  assert ring_lib.device_work(8, 4096, 4096, block_q=64, block_k=64) == [260] * 8
  assert flat == [3, 7, 11, 15]


def _assert_equals_softmax(res, cases):
  assert res["devices"] == 8
  assert set(res["cases"]) == set(cases)
  for name, c in res["cases"].items():
    for what in ("out", "dq", "dk", "dv"):
      assert c[what] < TOL, (name, what, c)
    assert c["out_scale"] > 0.1, name
    assert "seq" in c["out_spec"] and c["out_devices"] == 8, c   # left split over seq


def test_ring_over_4_devices_equals_softmax():
  """Forward and gradients within 1e-5 of single-device softmax (float32), over 4 seq
  devices with the batch also split over a data axis of 2 (multidevice.RING_FAST):
  causal self-attention (zig-zag), GQA, MQA, Dv != D, cross (Tq != Tk, bottom-right
  causal), key padding and dense masks, segment ids (packed rows, the key ids
  travelling with their shard), ALiBi; per-device memory on 8 devices below a third of
  one device's (N = 4096, compiled forward + backward); and the refusals. The seq axis
  of 8 runs in test_ring_over_8_devices_equals_softmax (make test-all): the ring's
  code does not depend on the device count but through the hops of a fori_loop and
  the permutations built from it, and the memory check compiles it over 8 here."""
  res = multidevice.run("ring", cases=list(multidevice.RING_FAST))
  _assert_equals_softmax(res, multidevice.RING_FAST)
  # per device, 8 devices hold an eighth of q, k, v and the gradients; a ring that
  # gathered K/V or the gradients would not get below a third
  mem = {int(n): b for n, b in res["memory"].items()}
  assert mem[8] < mem[1] / 3, mem
  assert "must be multiples of 4" in res["errors"]["indivisible"]
  assert "mesh axis 'context'" in res["errors"]["no_axis"]


@pytest.mark.slow
def test_ring_over_8_devices_equals_softmax():
  """The cases of multidevice.RING_CASES outside RING_FAST: causal GQA over 4 x 2 and
  cross MQA with padding over a seq axis of 8, forward and gradients within 1e-5 of
  softmax. Covered in make test by
  tests/attention/test_ring.py::test_ring_over_4_devices_equals_softmax (the same
  facts over 4 seq devices; ring over 8 compiled by its memory check)."""
  cases = [c[0] for c in multidevice.RING_CASES if c[0] not in multidevice.RING_FAST]
  _assert_equals_softmax(multidevice.run("ring", cases=cases, checks=False), cases)
