"""linear (three forms) and performer against float64 references of their definitions.

Each test compiles one program where it can (the cases of a test together) rather than
running eagerly (each op would compile on its own).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import performer as perf
from tests.reference import expand, favor

SHAPES = {  # B, Tq, Tk, Hq, Hkv, D, Dv
    "gqa_dv": (2, 13, 13, 4, 2, 8, 5),
    "tq<tk": (1, 7, 11, 2, 1, 4, 4),
    "tq>tk": (1, 11, 7, 2, 2, 4, 4),
}
PHI = {"elu": lambda x: np.where(x > 0, x + 1, np.exp(x)), "relu": lambda x: np.maximum(x, 0)}


def inputs(shape, seed=0, dtype=np.float64):
  B, Tq, Tk, Hq, Hkv, D, Dv = shape
  r = np.random.default_rng(seed)
  return (r.normal(size=(B, Tq, Hq, D)).astype(dtype), r.normal(size=(B, Tk, Hkv, D)).astype(dtype),
          r.normal(size=(B, Tk, Hkv, Dv)).astype(dtype))


def kernel_reference(fq, fk, v, causal, kmask=None, eps=1e-6, allowed=None):
  """out_i = Σ_j a_ij v_j / (Σ_j a_ij + eps), a_ij = φ(q_i)·φ(k_j), over allowed j
  (causal, kmask (B, Tk) and allowed (B, Tq, Tk))."""
  Hq = fq.shape[2]
  fk, v = expand(fk, Hq), expand(v, Hq)
  a = np.einsum("bihf,bjhf->bhij", fq, fk)
  Tq, Tk = a.shape[-2:]
  if causal:
    a = a * (np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq)
  if kmask is not None:
    a = a * kmask[:, None, None, :]
  if allowed is not None:
    a = a * allowed[:, None]
  return np.einsum("bhij,bjhd->bihd", a, v) / (a.sum(-1).transpose(0, 2, 1)[..., None] + eps)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_linear_matches_reference(shape_name):
  """Causal and not, φ = elu + 1 and relu, chunks of 4 under a key-padding mask, in one
  compiled program per shape."""
  q, k, v = inputs(SHAPES[shape_name])
  B, Tk = q.shape[0], k.shape[1]
  kmask = np.ones((B, Tk), bool)
  kmask[0, -2:] = False
  combos = [(causal, fm) for causal in (False, True) for fm in PHI]
  outs = jax.jit(lambda q, k, v: [attention.get("linear")(
      q, k, v, causal=causal, feature_map=fm, chunk_size=4, mask=kmask[:, None, None, :])
      for causal, fm in combos])(q, k, v)
  for (causal, fm), out in zip(combos, outs, strict=True):
    ref = kernel_reference(PHI[fm](q), PHI[fm](k), v, causal, kmask)
    np.testing.assert_allclose(out, ref, atol=1e-12, err_msg=f"causal={causal} {fm}")


@pytest.mark.usefixtures("x64")
def test_fully_masked_batch_and_unseen_queries_give_zeros():
  q, k, v = inputs(SHAPES["tq>tk"])
  unseen, masked = jax.jit(lambda q, k, v: (
      attention.get("linear")(q, k, v, causal=True),
      attention.get("linear")(q, k, v, mask=np.zeros((1, 1, 1, 7), bool))))(q, k, v)
  assert np.all(np.asarray(unseen)[:, :4] == 0)  # Tq - Tk = 4 queries see no key
  assert np.all(np.asarray(unseen)[:, 4:] != 0)
  out = np.asarray(masked)
  assert np.all(out == 0) and np.all(np.isfinite(out))


@pytest.mark.usefixtures("x64")
def test_parallel_chunked_and_rnn_forms_agree():
  q, k, v = inputs((2, 13, 13, 2, 2, 4, 3))
  f = attention.get("linear")
  sizes = (13, 1, 4, 5, 64)    # 13: one chunk, the masked quadratic form; 1: the RNN
  outs, parallel = jax.jit(lambda q, k, v: (
      [f(q, k, v, causal=True, chunk_size=c) for c in sizes], f(q, k, v)))(q, k, v)
  ref = outs[0]
  for c, out in zip(sizes[1:], outs[1:]):
    np.testing.assert_allclose(out, ref, atol=1e-12, err_msg=f"chunk_size={c}")
  # the non-causal parallel form is the last row of the causal form
  np.testing.assert_allclose(parallel[:, -1], ref[:, -1], atol=1e-12)


@pytest.mark.usefixtures("x64")
def test_the_gpu_unrolled_chunk_scan_is_the_same_function(monkeypatch):
  """On a GPU the chunk scan is unrolled (attention.core.common.scan_unroll, against the
  host sync of every loop trip there): forced here, output and gradients equal the
  scan's."""
  from attention.core import common
  q, k, v = (jnp.asarray(x) for x in inputs((2, 13, 13, 2, 2, 4, 3)))
  g = lambda q, k, v: jax.value_and_grad(lambda q, k, v: jnp.sum(jnp.sin(
      attention.get("linear")(q, k, v, causal=True, chunk_size=4))), (0, 1, 2))(q, k, v)

  def both(q, k, v):            # one program: the scan's trace, then the unrolled one's
    ref = g(q, k, v)
    with monkeypatch.context() as m:
      m.setattr(common, "scan_unroll", lambda n: n)
      assert common.scan_unroll(4) == 4
      return ref, g(q, k, v)

  ref, unrolled = jax.jit(both)(q, k, v)
  for a, b in zip(jax.tree.leaves(unrolled), jax.tree.leaves(ref), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("shape_name, kw", [
    # GQA with the mask and RoPE together (the mask zeroes φ(k) before the rotation
    # sees it: two independent steps; a case compiles ~3 CPU-s)
    ("gqa_dv", {"chunk_size": 3, "positions": "rope", "mask": True}),
    ("tq<tk", {"chunk_size": 4, "mask": True}), ("tq>tk", {"chunk_size": 3, "positions": "rope"})])
def test_the_chunk_parallel_form_is_the_scan_function(shape_name, kw):
  """Causal linear with every chunk at once (the GPU's form, the `chunk_parallel` option)
  equals the chunk scan, output and gradients: GQA and Dv != D, Tq < Tk (an initial
  state) and Tq > Tk (queries with no key), a key-padding mask, RoPE (rotated
  numerator features), chunks that divide T or not; with Tq == Tk, a decode prefill's
  new state, continued by one more token."""
  from attention import linear as lin
  from attention.core.kernelised import chunk_parallel
  q, k, v = (jnp.asarray(x) for x in inputs(SHAPES[shape_name]))
  if kw.pop("mask", False):
    kmask = np.ones((q.shape[0], k.shape[1]), bool)
    kmask[0, -2:] = False
    kw["mask"] = kmask[:, None, None, :]

  def forms(q, k, v, parallel):
    kw1 = dict(kw, chunk_parallel=parallel)
    out, pull = jax.vjp(lambda q, k, v: attention.get("linear")(q, k, v, causal=True, **kw1),
                        q, k, v)
    res = [out, pull(jnp.cos(out))]
    if q.shape[1] == k.shape[1]:    # a prefill of all but the last token, then one step
      st = lin.init_linear_state("linear", batch=q.shape[0], num_kv_heads=k.shape[2],
                                 head_dim=q.shape[3], v_head_dim=v.shape[3], dtype=q.dtype)
      kw2 = {key: val for key, val in kw1.items() if key != "mask"}
      pre, st = lin.linear_step(st, q[:, :-1], k[:, :-1], v[:, :-1], **kw2)
      res += [pre, st.S, st.Z, lin.linear_step(st, q[:, -1:], k[:, -1:], v[:, -1:], **kw2)[0]]
    return res

  assert chunk_parallel() == (jax.default_backend() == "gpu")   # the default: GPUs only
  assert chunk_parallel(True) and not chunk_parallel(False)
  assert "chunk_parallel" in attention.variant("linear").kernel_options
  ref, new = jax.jit(lambda q, k, v: (forms(q, k, v, False), forms(q, k, v, True)))(q, k, v)
  for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(ref), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_scan_unroll_is_one_off_gpus():
  from attention.core import common
  assert jax.default_backend() != "gpu" or common.scan_unroll(100) == common.MAX_GPU_UNROLL
  assert jax.default_backend() == "gpu" or common.scan_unroll(13) == 1


def test_linear_refuses_masks_that_do_not_factor():
  q, k, v = inputs(SHAPES["gqa_dv"], dtype=np.float32)
  with pytest.raises(attention.AttentionError, match="key-padding"):
    attention.get("linear")(q, k, v, mask=np.ones((13, 13), bool))
  with pytest.raises(attention.AttentionError, match="elu"):
    attention.get("linear")(q, k, v, feature_map="softplus")


@pytest.mark.usefixtures("x64")
def test_linear_gradients():
  """Reverse mode against float64 central differences of Σ out·R along a random
  direction in q, in k, in v and in all three (as jax.test_util.check_grads does, but
  in one compiled program: check_grads runs eagerly, a compilation per op)."""
  q, k, v = inputs((1, 6, 6, 2, 1, 3, 2))
  r = np.random.default_rng(7)
  R = r.normal(size=(1, 6, 2, 2))
  full = [r.normal(size=x.shape) for x in (q, k, v)]
  dirs = [[d if i == j else np.zeros_like(d) for j, d in enumerate(full)] for i in range(3)]
  dirs.append(full)
  loss = lambda q, k, v: jnp.sum(attention.get("linear")(q, k, v, causal=True,
                                                         chunk_size=4) * R)
  eps = 1e-5

  @jax.jit
  def run(q, k, v):
    at = lambda s, d: loss(*(x + s * eps * dx for x, dx in zip((q, k, v), d)))
    return (jax.grad(loss, (0, 1, 2))(q, k, v),
            [(at(1, d) - at(-1, d)) / (2 * eps) for d in dirs])

  grads, numeric = run(q, k, v)
  for i, (d, n) in enumerate(zip(dirs, numeric)):
    analytic = sum(np.vdot(g, dx) for g, dx in zip(grads, d))
    assert abs(analytic) > 1e-2, i
    np.testing.assert_allclose(n, analytic, rtol=1e-7, atol=1e-9, err_msg=f"direction {i}")


@pytest.mark.parametrize("parallel, share", [(False, 16), (True, 8)])
def test_causal_chunked_memory_is_linear(parallel, share):
  """No (T, D, Dv) tensor: each token added costs far less than D·Dv floats of
  temporaries. Measured as the growth from T = 4096 to 8192, so that the constant the
  GPU's unrolled chunk scan adds (32 trips' intermediates: 10.6 MB at T = 4096 on an
  H100, 2026-11-26) is not counted as per-token memory. The scan: about 0.8 MB per
  1k tokens on the CPU, rolled or unrolled as the GPU runs it (checked once by hand:
  compiling the unrolled form here costs 6 s of the suite), under 1/16 of a (T, D, Dv)
  float32 tensor (16.8 MB). Every chunk at once (the `chunk_parallel` option, the GPU's
  form): the chunks' entering states, T/64 · D · Dv floats each, 1.0 MB per 1k tokens
  on the CPU (2026-11-27), under 1/8."""
  T, D = 4096, 64
  f = jax.jit(lambda q: attention.get("linear")(q, q, q, causal=True, chunk_parallel=parallel))
  temp = [f.lower(jnp.ones((1, t, 1, D))).compile().memory_analysis().temp_size_in_bytes
          for t in (T, 2 * T)]
  assert temp[1] - temp[0] < T * D * D * 4 / share, temp


@pytest.mark.usefixtures("x64")
def test_performer_is_exact_kernel_attention_with_its_features():
  """Causal and not (one compiled program), against the float64 kernel sum."""
  q, k, v = inputs(SHAPES["gqa_dv"])
  P = np.asarray(perf.orthogonal_features(jax.random.PRNGKey(0), 20, 8, jnp.float64))
  kmask = np.ones((2, 13), bool)
  kmask[1, :3] = False
  outs = jax.jit(lambda q, k, v: [attention.get("performer")(
      q, k, v, causal=causal, projection=P, chunk_size=4, mask=kmask[:, None, None, :])
      for causal in (False, True)])(q, k, v)
  for causal, out in zip((False, True), outs):
    ref = kernel_reference(favor(q, P, True), favor(k, P, False), v, causal, kmask)
    np.testing.assert_allclose(out, ref, atol=1e-10, err_msg=f"causal={causal}")


def test_performer_approximates_softmax_and_is_deterministic():
  q, k, v = (0.5 * x for x in inputs((1, 64, 64, 1, 1, 16, 16), dtype=np.float32))

  @jax.jit
  def run(q, k, v):             # one program (eager, each op would compile on its own)
    feats = lambda seed: perf.orthogonal_features(jax.random.PRNGKey(seed), 4096, 16)
    P1 = feats(0)
    fn = lambda P: attention.get("performer")(q, k, v, projection=P)
    return (attention.get("softmax")(q, k, v), P1, fn(P1), fn(feats(0)), fn(feats(1)))

  exact, P1, out, again, other = (np.asarray(x) for x in run(q, k, v))
  assert float(np.abs(out - exact).max()) < 0.05
  assert np.all(out == again)
  assert not np.all(out == other)
  rows = np.asarray(P1[:16])  # one orthogonal block
  gram = rows @ rows.T
  np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0, atol=1e-3)


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_jit_and_vmap(name):
  q, k, v = inputs(SHAPES["gqa_dv"], dtype=np.float32)
  kw = {"projection": perf.orthogonal_features(jax.random.PRNGKey(0), 16, 8)} \
      if name == "performer" else {}
  f = lambda q, k, v: attention.get(name)(q, k, v, causal=True, **kw)
  # one program: f on two batches, and vmapped over their stack (no eager run: each op
  # would compile on its own; the float64 tests above check f's values)
  out, out2, both = jax.jit(lambda q, k, v: (
      f(q, k, v), f(2 * q, 2 * k, 2 * v),
      jax.vmap(f)(*(jnp.stack([x, 2 * x]) for x in (q, k, v)))))(q, k, v)
  np.testing.assert_allclose(both[0], out, atol=1e-5)
  np.testing.assert_allclose(both[1], out2, atol=1e-5)
  assert not np.allclose(out2, out, atol=1e-2)        # two different batches


# Packed rows (B = 2, T = 13; chunks of 4): starts at a chunk boundary (4) and at 8 (a
# masked key: the reset wins), inside chunks (2, 10, 11), a one-token segment and a
# masked padding segment (id 0) at the end.
SEG = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3],
                [5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 9, 0, 0]])
SEG_KMASK = np.ones(SEG.shape, bool)
SEG_KMASK[0, 8] = SEG_KMASK[1, 5] = False
SEG_KMASK[1, 11:] = False
# No performer case: it reaches the same segment code (kernelised.positioned) with other
# per-token features (test_performer_is_exact_kernel_attention_with_its_features), and
# each case costs ~2 CPU-s of compilation
SEG_CASES = [("linear", True, None), ("linear", False, None), ("linear", True, "alibi"),
             ("linear", False, "alibi")]


@pytest.mark.usefixtures("x64")
def test_segment_ids_equal_each_segment_alone():
  """For every case of SEG_CASES (all in ONE compiled program), a packed batch and each
  of its segments run alone (a row each, key padding past its end) in one call:
  outputs and gradients w.r.t. q, k, v equal at float64 rounding ((S, Z) reset at each
  start: the causal chunked scan, the non-causal forward and backward scans; with
  ALiBi, positions restart per segment); they equal the float64 definition (the
  segment mask on φ(q)·φ(k), numerator and normaliser); and passing the ids as two
  arrays (the segment mask on the implied weights, O(T²)) agrees."""
  from tests.reference import from_alone, segments_alone, to_alone
  B, T, Hq, Hkv, D, Dv = 2, 13, 4, 2, 4, 3
  q, k, v = inputs((B, T, T, Hq, Hkv, D, Dv), seed=3)
  take, real = segments_alone(SEG)
  R = np.random.default_rng(9).normal(size=(B, T, Hq, Dv))
  both = lambda x, a: np.concatenate([x, a])
  args = [both(x, to_alone(x, take, real)) for x in (q, k, v, R)]
  seg = both(SEG, np.where(real, 1, 0))
  kmask = both(SEG_KMASK, to_alone(SEG_KMASK, take, real) & real)
  restart = np.concatenate([np.zeros((B, 1), int), (SEG[:, 1:] != SEG[:, :-1])], 1)
  pos = np.arange(T) - np.maximum.accumulate(np.where(restart, np.arange(T), 0), axis=1)
  pos = both(pos, np.broadcast_to(np.arange(T), real.shape))

  def options(name, causal, positions):
    kw = dict(causal=causal, mask=kmask[:, None, None, :], chunk_size=4)
    if positions:
      kw.update(positions=positions, q_pos=pos, k_pos=pos)
    return kw

  @jax.jit
  def run(q, k, v, R):
    res = []
    for name, causal, positions in SEG_CASES:
      fn, kw = attention.get(name), options(name, causal, positions)

      def loss(q, k, v):
        o = fn(q, k, v, q_seg=seg, **kw)
        return jnp.sum(o * R), o
      grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
      res.append((out, grads, fn(q, k, v, q_seg=seg, k_seg=seg + 0, **kw)))
    return res

  # NumPy from here on: a slice of a jax array would compile a program of its own
  results = jax.tree.map(np.asarray, run(*args))
  split = lambda x: (x[:B], from_alone(x[B:], take, real, B))
  for (name, causal, positions), (out, grads, quadratic) in zip(SEG_CASES, results,
                                                                strict=True):
    msg = f"{name} causal={causal} positions={positions}"
    got, alone = split(out)
    np.testing.assert_allclose(got, alone, atol=1e-12, err_msg=msg)
    np.testing.assert_allclose(quadratic, out, atol=1e-12, err_msg=msg)
    for g in grads:
      np.testing.assert_allclose(*split(g), atol=1e-11, err_msg=msg)
    if not positions:
      allowed = SEG[:, :, None] == SEG[:, None, :]
      np.testing.assert_allclose(got, kernel_reference(PHI["elu"](q), PHI["elu"](k), v,
                                                       causal, SEG_KMASK, allowed=allowed),
                                 atol=1e-12, err_msg=msg)


@pytest.mark.usefixtures("x64")
def test_segment_ids_in_cross_attention_and_refusals():
  """Cross-attention (Tq != Tk) with ids on both sides: the segment mask on the implied
  weights, equal to the float64 definition and to `implied_weights` @ v; ids that a
  reset cannot honour (an id recurring after another) give a NaN row; a decode step
  (one sequence per row) refuses ids."""
  q, k, v = inputs((2, 7, 11, 2, 1, 4, 4), seed=5)
  qs = np.array([[1, 1, 2, 2, 2, 3, 0], [4, 4, 4, 4, 6, 6, 6]])
  ks = np.array([[1, 1, 1, 2, 2, 2, 2, 3, 0, 0, 0], [6, 6, 6, 4, 4, 4, 4, 4, 4, 5, 5]])
  f = jax.jit(lambda q, k, v, qs, ks: (
      attention.get("linear")(q, k, v, q_seg=qs, k_seg=ks),
      attention.implied_weights(q, k, name="linear", q_seg=qs, k_seg=ks)))
  out, w = f(q, k, v, qs, ks)
  allowed = qs[:, :, None] == ks[:, None, :]
  np.testing.assert_allclose(out, kernel_reference(PHI["elu"](q), PHI["elu"](k), v, False,
                                                   allowed=allowed), atol=1e-12)
  np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", w, expand(v, 2)), out, atol=1e-12)
  sq = np.array([[1, 1, 2, 2, 1, 1, 1], [1, 1, 2, 2, 3, 3, 3]])   # row 0: id 1 recurs
  out = jax.jit(lambda q, k, v: attention.get("linear")(q, k, v, causal=True, q_seg=sq))(
      q, k[:, :7], v[:, :7])
  assert np.all(np.isnan(out[0])) and np.all(np.isfinite(out[1]))
  st = attention.init_decode_state("linear", batch=2, max_len=None, num_kv_heads=1,
                                   head_dim=4)
  with pytest.raises(attention.AttentionError, match="segment ids.*one sequence per batch row"):
    attention.decode_step(st, q[:, :1], k[:, :1], v[:, :1], q_seg=qs[:, :1])
