"""Positions (attention/core/positions.py): RoPE, 2D RoPE and ALiBi in every variant that
takes them, against float64 references of their definitions (tests/reference.py);
decoding equals the forward pass for every decode path under every scheme it takes
(`PAIRS`: rope2d where no float64 check covers the variant's forward pass under it,
one variant per branch of the KV cache's step); refusals
name the variant, the scheme and the reason, at call time and in config validation.

Explicit positions are random (not aranges) wherever a definition allows, so that a
variant that assumed 0, 1, 2, ... would fail.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import linear as lin
from attention import performer as perf
from attention.core import positions as P
from models import ConfigError, ModelConfig
from tests import reference
from tests.attention.test_exact import make_inputs, make_mask, make_params

SCHEMES = ("rope", "rope2d", "alibi")
SIDE = 3                   # rope2d's image width in these tests
SPEC = {"rope": P.make("rope"), "rope2d": P.make("rope2d", side=SIDE),
        "alibi": P.make("alibi")}


def takes(scheme):
  """The variants that take `scheme`, run compiled here and compute as themselves on
  one device (`attention.native_names(own_compute=True)`: ring is flash here; test_ring
  checks that it hands the positions on)."""
  return [n for n in attention.native_names(own_compute=True)
          if attention.variant(n).takes(scheme)]


# ---- the shared math -----------------------------------------------------------------

def test_alibi_slopes_are_the_papers():
  assert P.alibi_slopes(8) == tuple(2.0 ** -h for h in range(1, 9))
  # 6 heads: the 4 slopes of 4 heads, then every other slope of 8 heads
  assert P.alibi_slopes(6) == (2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3)
  for n in (1, 3, 5, 12, 16, 24):          # the authors' code, written independently
    np.testing.assert_allclose(P.alibi_slopes(n), reference.alibi_slopes(n), rtol=1e-14)
  assert P.slopes_for(P.make("alibi", slopes=[0.5, 0.25]), 2).tolist() == [0.5, 0.25]
  with pytest.raises(attention.AttentionError, match="2 slopes for 4 query heads"):
    P.slopes_for(P.make("alibi", slopes=[0.5, 0.25]), 4)


@pytest.mark.usefixtures("x64")
def test_rotation_is_the_complex_definition_half_split_and_partial():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, 3, 8))
  pos = rng.integers(-4, 40, size=(2, 5))
  specs = ((P.make("rope", base=100.0), None), (P.make("rope2d", side=SIDE, base=100.0),
                                                SIDE))
  got, half = jax.jit(lambda x, pos: (   # one program
      [P.rotate(x, pos, spec, 1) for spec, _ in specs],
      P.rotate(x, pos, P.make("rope", fraction=0.5), 1)))(x, pos)
  for g, (spec, side) in zip(got, specs):
    np.testing.assert_allclose(g, reference.rope(x, pos, 100.0, side), atol=1e-13)
  # fraction 1/2: the first 4 dims rotate as a 4-dim head's, the last 4 pass through
  np.testing.assert_allclose(half[..., :4], reference.rope(x[..., :4], pos), atol=1e-13)
  np.testing.assert_array_equal(half[..., 4:], x[..., 4:])


@functools.partial(jax.jit, static_argnums=2)
def _scores(q, k, spec, qp, kp):
  return attention.probabilities(q, k, positions=spec, q_pos=qp, k_pos=kp)


def test_rope_scores_depend_only_on_i_minus_j():
  """Shifting every position by a constant leaves the scores unchanged (to float32
  rounding of the angles); changing one query's position changes them."""
  rng = np.random.default_rng(1)
  q, k = (jnp.asarray(rng.normal(size=(2, 6, 2, 16)), jnp.float32) for _ in range(2))
  pos = jnp.asarray(rng.integers(0, 50, size=(2, 6)))
  spec = SPEC["rope"]
  ref = _scores(q, k, spec, pos, pos)
  np.testing.assert_allclose(_scores(q, k, spec, pos + 37, pos + 37), ref, atol=2e-5)
  assert np.abs(_scores(q, k, spec, pos.at[:, 0].add(3), pos) - ref).max() > 1e-2


def test_rope2d_scores_depend_only_on_the_row_and_column_offsets():
  """Moving every pixel by whole rows, or by columns (without wrapping), leaves the
  scores unchanged; a raster shift that wraps a row end does not (it is not 1D)."""
  rng = np.random.default_rng(2)
  side = 16
  spec = P.make("rope2d", side=side)
  q, k = (jnp.asarray(rng.normal(size=(1, 9, 2, 16)), jnp.float32) for _ in range(2))
  row, col = rng.integers(0, 4, size=9), rng.integers(0, 4, size=9)
  at = lambda dr, dc: jnp.asarray(((row + dr) * side + col + dc)[None])
  ref = _scores(q, k, spec, at(0, 0), at(0, 0))
  np.testing.assert_allclose(_scores(q, k, spec, at(5, 0), at(5, 0)), ref, atol=2e-5)
  np.testing.assert_allclose(_scores(q, k, spec, at(0, 7), at(0, 7)), ref, atol=2e-5)
  wrap = lambda: jnp.asarray((row * side + col + 14)[None])   # some pixels change row
  assert np.abs(_scores(q, k, spec, wrap(), wrap()) - ref).max() > 1e-2


# ---- the exact family against float64 references ------------------------------------

CASES = {  # shape (B, Tq, Tk, Hq, Hkv, D, Dv), causal, mask kind
    "gqa_causal_tq<tk_padding": ((2, 5, 9, 4, 2, 8, 8), True, "padding"),
    "mqa_dense_tq>tk": ((1, 7, 4, 3, 1, 8, 8), False, "padding"),
}
KW = {"flash": dict(block_q=4, block_k=8), "flash_pallas": dict(block_q=16, block_k=16),
      "ring": dict(block_q=4, block_k=4), "fp8": dict(quantize="", block_q=8, block_k=8)}
# float32 only: sdpa (JAX's attention refuses float64), fp8 (float32 by design)
F32 = ("sdpa", "fp8")


def _positions(shape, seed=3):
  """Random explicit positions: (B, Tq) for queries, (1, Tk) for keys."""
  rng = np.random.default_rng(seed)
  B, Tq, Tk = shape[:3]
  return rng.integers(0, 60, size=(B, Tq)), rng.integers(0, 60, size=(1, Tk))


# ---- which reference checks a variant's positions: read from its record ------------

def softmax_of_score(scheme):
  """The variants taking `scheme` whose float64 reference is softmax of a score: the
  "exact" family (softmax's own) and every record that declares `score` (its score,
  from tests/reference.py). Not the family "score" as such: a variant grouped there
  that is not softmax(score) @ v (docs/examples/sigmoid_attention.py) declares no score."""
  return [n for n in takes(scheme)
          if attention.variant(n).family == "exact" or attention.variant(n).score is not None]


def with_implied_weights(scheme):
  """The variants taking `scheme` that are not softmax of a score but give their weights
  in closed form (`implied_weights`): checked as fn == weights @ v under the scheme."""
  return [n for n in takes(scheme) if n not in softmax_of_score(scheme)
          and attention.variant(n).implied_weights is not None]


# Variants with neither a score nor implied weights, and what checks their positions.
CHECKED_ELSEWHERE = {
    "local": "softmax inside its window: decode == forward under every scheme here "
             "(test_decode_equals_the_causal_forward_pass); no float64 reference yet",
    "sparse": "softmax over its pattern: decode == forward under every scheme here "
              "(test_decode_equals_the_causal_forward_pass); no float64 reference yet",
    "reformer": "softmax inside its hashed chunks (rotated q and k are what it hashes); "
                "its refusals only, no float64 reference yet",
}


def reference_name(name) -> str:
  """The tests/reference.py score of a softmax-of-score variant: "softmax" for the
  exact family (its kernels compute softmax attention), else its own name."""
  return "softmax" if attention.variant(name).family == "exact" else name


def position_reference(name) -> str:
  """How this module checks the position schemes `name` takes, from its record; fails
  the test with one line saying how to give a reference where there is none."""
  v = attention.variant(name)
  schemes = [s for s in SCHEMES if v.takes(s)]
  if v.family == "exact" or v.score is not None:
    if not reference.has_score(reference_name(name)):
      pytest.fail(reference.no_score(reference_name(name)), pytrace=False)
    return f"softmax of the float64 score {reference_name(name)!r}"
  if v.implied_weights is not None:
    return "its implied weights applied to v (test_implied_weights_under_every_scheme)"
  if name in CHECKED_ELSEWHERE:
    return CHECKED_ELSEWHERE[name]
  pytest.fail(
      f"{name!r} takes {', '.join(schemes)} but tests/attention/test_positions.py has no reference "
      "for it: declare score= if it is softmax(score) @ v (and give tests/reference.py its "
      "float64 score), or implied_weights= (its (Tq, Tk) weights, checked as "
      "fn == weights @ v under each scheme), or name what checks it in CHECKED_ELSEWHERE",
      pytrace=False)


@pytest.mark.parametrize("name", [n for n in attention.names()
                                  if any(attention.variant(n).takes(s) for s in SCHEMES)])
def test_every_variant_that_takes_a_scheme_has_a_reference(name):
  assert position_reference(name)


def test_a_variant_without_a_reference_is_told_how_to_give_one():
  """A registered variant the references do not know: a softmax-of-score one is told to
  add its float64 score to tests/reference.py, one with neither a score nor implied
  weights what to declare; each in one line (not a KeyError from reference.py)."""
  import dataclasses
  from tests.attention.test_registry import NEW
  with attention.registered(NEW["sig2"]()):
    with pytest.raises(reference.NoReference, match="no float64 score for 'sig2'"):
      reference.scores("sig2", np.ones((1, 2, 1, 4)), np.ones((1, 2, 1, 4)), {}, None)
    with pytest.raises(pytest.fail.Exception, match="tests/reference.py has no float64"):
      position_reference("sig2")
  plain = dataclasses.replace(NEW["sig2"](), name="plain", score=None, decode_impl=None,
                              decode=None, positions=P.takes_qk())
  with attention.registered(plain):
    with pytest.raises(pytest.fail.Exception) as e:
      position_reference("plain")
  msg = str(e.value)
  assert "'plain' takes rope, rope2d, alibi" in msg and "implied_weights=" in msg
  assert "\n" not in msg


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", softmax_of_score("alibi"))
def test_alibi_in_every_exact_kernel_is_softmax_with_the_float64_bias(name, case):
  """Masks, causal, GQA/MQA, Tq != Tk and random positions; flash and flash_pallas
  compute the bias tile by tile, sdpa passes it to JAX, ring (one device) is flash."""
  shape, causal, mask_kind = CASES[case]
  dt = np.float32 if name in F32 else np.float64
  q, k, v = make_inputs(shape, dtype=dt)
  mask = make_mask(mask_kind, shape)
  if mask is not None and not causal:
    mask = mask[:, :, :1]          # mqa case: a key-padding mask (Tq axis 1)
  qp, kp = _positions(shape)
  params = make_params(name, shape, dtype=dt)
  out = jax.jit(lambda q, k, v, params: attention.get(name)(
      q, k, v, causal=causal, mask=mask, positions="alibi", q_pos=qp, k_pos=kp, **params,
      **KW.get(name, {})))(q, k, v, params)
  position_reference(name)                        # a clear line if it has none
  ref = reference.attention(reference_name(name), q, k, v, causal=causal, mask=mask, params=params,
                            bias=reference.alibi_bias(shape[3], qp, kp))
  np.testing.assert_allclose(out, ref, atol=2e-6 if dt == np.float32 else 1e-10)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name, scheme", [(n, s) for s in ("rope", "rope2d")
                                          for n in softmax_of_score(s)])
def test_rope_in_the_exact_family_is_attention_of_the_rotated_q_and_k(name, scheme):
  shape, causal, mask_kind = CASES["gqa_causal_tq<tk_padding"]
  dt = np.float32 if name in F32 else np.float64
  q, k, v = make_inputs(shape, dtype=dt)
  qp, kp = _positions(shape)
  params = make_params(name, shape, dtype=dt)
  out = jax.jit(lambda q, k, v, params: attention.get(name)(
      q, k, v, causal=causal, positions=SPEC[scheme], q_pos=qp, k_pos=kp, **params,
      **KW.get(name, {})))(q, k, v, params)
  side = SIDE if scheme == "rope2d" else None
  position_reference(name)                        # a clear line if it has none
  ref = reference.attention(reference_name(name), reference.rope(q, qp, side=side),
                            reference.rope(k, kp, side=side), v, causal=causal, params=params)
  np.testing.assert_allclose(out, ref, atol=2e-6 if dt == np.float32 else 1e-10)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name, scheme", [(n, s) for s in SCHEMES
                                          for n in with_implied_weights(s)])
def test_implied_weights_under_every_scheme(name, scheme):
  """A variant that is not softmax of a score but declares its weights in closed form
  (`implied_weights`) applies, under each scheme it takes, exactly those weights to v
  (float64; causal, positions in sequence order with gaps, as ALiBi's decay needs)."""
  shape = (2, 7, 7, 4, 2, 8, 5)
  q, k, v = make_inputs(shape, seed=9)
  qp, kp = _ordered_positions(shape[0], shape[1], shape[2])
  params = make_params(name, shape)
  if name == "performer":
    params["projection"] = np.asarray(perf.orthogonal_features(jax.random.PRNGKey(0), 12,
                                                               shape[5], jnp.float64))
  kw = dict(causal=True, positions=SPEC[scheme], q_pos=qp, k_pos=kp)
  w, out = jax.jit(lambda q, k, v, params: (   # one program
      attention.implied_weights(q, k, name=name, **kw, **params),
      attention.get(name)(q, k, v, **kw, **params)))(q, k, v, params)
  np.testing.assert_allclose(np.einsum("bhqk,bkhd->bqhd", w, reference.expand(v, shape[3])),
                             out, atol=1e-10)


# not ring: on one device it is flash's very program (jaxpr and constants, ALiBi with
# gradients among its cases: tests/attention/test_ring.py::test_ring_without_a_mesh_is_flash)
@pytest.mark.parametrize("name", ["flash", "flash_pallas", "fp8"])
def test_alibi_gradients_of_the_tiled_kernels_equal_softmax(name):
  """The backward passes (flash's and the Pallas kernels' recomputed tiles, fp8's
  exact backward) add the same bias."""
  shape = (1, 6, 11, 4, 2, 8, 8)
  q, k, v = (jnp.asarray(x) for x in make_inputs(shape, seed=4, dtype=np.float32))
  qp, kp = _positions(shape)
  w = jnp.asarray(np.random.default_rng(5).normal(size=(1, 6, 4, 8)), jnp.float32)

  def grads(n, **kw):
    f = lambda q, k, v: jnp.sum(attention.get(n)(q, k, v, causal=True, positions="alibi",
                                                 q_pos=qp, k_pos=kp, **kw) * w)
    return jax.grad(f, argnums=(0, 1, 2))

  got, want = jax.jit(lambda q, k, v: (grads(name, **KW[name])(q, k, v),
                                         grads("softmax")(q, k, v)))(
      q, k, v)                                                   # one program
  for g, s in zip(got, want):
    np.testing.assert_allclose(g, s, atol=2e-5)


# ---- linear attention and performer: RoFormer's form, ALiBi's decay ---------------------

def _kernel_reference(fq, fk, v, *, causal, qp, kp, scheme, eps=1e-6):
  """float64: Σ_j w_ij (R_i fq_i)·(R_j fk_j) v_j / (Σ_j w_ij fq_i·fk_j + eps), w the
  causal mask times ALiBi's decay e^(-m |p_i - p_j|) (or 1)."""
  Hq = fq.shape[2]
  fk, v = reference.expand(fk, Hq), reference.expand(v, Hq)
  rq, rk = fq, fk
  if scheme in ("rope", "rope2d"):
    side = SIDE if scheme == "rope2d" else None
    rq, rk = reference.rope(fq, qp, side=side), reference.rope(fk, kp, side=side)
  num = np.einsum("bihf,bjhf->bhij", rq, rk)
  den = np.einsum("bihf,bjhf->bhij", fq, fk)
  Tq, Tk = num.shape[-2:]
  w = np.ones_like(num)
  if causal:
    w = w * (np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq)
  if scheme == "alibi":
    w = w * np.exp(reference.alibi_bias(Hq, qp, kp))
  return (np.einsum("bhij,bjhd->bihd", num * w, v)
          / ((den * w).sum(-1).transpose(0, 2, 1)[..., None] + eps))


def _ordered_positions(B, Tq, Tk, seed=6):
  """Positions in sequence order with gaps (a packed or decoded sequence's): keys
  non-decreasing, each query at the position of the last key it sees (bottom-right)."""
  rng = np.random.default_rng(seed)
  kp = np.cumsum(rng.integers(0, 3, size=(B, Tk)), axis=1) + 5
  idx = np.clip(np.arange(Tq) + Tk - Tq, 0, Tk - 1)    # (queries before any key: kp[0])
  return kp[:, idx], kp


def _phi(name, x, projection, query):
  if name == "linear":
    return np.where(x > 0, x + 1, np.exp(x))
  return reference.favor(x, projection, query)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("name, shape", [
    ("linear", (2, 9, 9, 4, 2, 8, 5)), ("linear", (1, 5, 8, 2, 1, 4, 4)),
    ("linear", (1, 7, 4, 2, 2, 4, 4)), ("performer", (2, 9, 9, 4, 2, 8, 5))])
def test_kernel_variants_take_positions_in_roformer_form_and_as_a_decay(name, shape):
  """Every scheme, causal and not, chunked (chunk 4 < T) and parallel, against the
  float64 definition; Tq < Tk (an initial state) and Tq > Tk (unseen queries)."""
  q, k, v = make_inputs(shape)
  B, Tq, Tk = shape[:3]
  qp, kp = _ordered_positions(B, Tq, Tk)
  proj = np.asarray(perf.orthogonal_features(jax.random.PRNGKey(0), 12, shape[5],
                                             jnp.float64))
  kw = {"projection": proj} if name == "performer" else {}
  fq, fk = _phi(name, q, proj, True), _phi(name, k, proj, False)
  combos = []
  for scheme in SCHEMES:
    for causal in (True, False):
      if scheme == "alibi" and not causal and Tq != Tk:
        with pytest.raises(attention.AttentionError, match="common order"):
          jax.eval_shape(lambda q, k, v: attention.get(name)(
              q, k, v, positions="alibi", q_pos=qp, k_pos=kp, **kw), q, k, v)
        continue
      qpc = kp if scheme == "alibi" and not causal else qp   # self-attention: the same
      combos.append((scheme, causal, qpc))
  outs = jax.jit(lambda q, k, v: [attention.get(name)(   # every combination, one program
      q, k, v, causal=causal, chunk_size=4, q_pos=qpc, k_pos=kp, positions=SPEC[scheme],
      **kw) for scheme, causal, qpc in combos])(q, k, v)
  for (scheme, causal, qpc), out in zip(combos, outs, strict=True):
    ref = _kernel_reference(fq, fk, v, causal=causal, qp=qpc, kp=kp, scheme=scheme)
    np.testing.assert_allclose(out, ref, atol=1e-10, err_msg=f"{scheme} {causal}")


def test_kernel_alibi_out_of_order_positions_give_nan_not_a_wrong_answer():
  """The decay needs positions in sequence order; rows that break it are poisoned."""
  q, k, v = (jnp.asarray(x) for x in make_inputs((2, 6, 6, 2, 1, 4, 4), dtype=np.float32))
  pos = np.tile(np.arange(6), (2, 1))
  pos[1, 3] = 0                                  # row 1 goes back in time
  out = jax.jit(lambda q, k, v: attention.get("linear")(
      q, k, v, causal=True, positions="alibi", q_pos=pos, k_pos=pos))(q, k, v)
  assert np.isfinite(out[0]).all() and np.isnan(out[1]).all()


# ---- decoding: every decodable variant under every scheme it takes ------------------------

DECODE_SHAPE = (2, 9, 9, 4, 2, 8, 8)
DECODE_OPTS = {"local": dict(window=3), "sparse": dict(stride=3),
               "flash": dict(block_q=4, block_k=4), "flash_pallas": dict(block_q=16),
               "ring": dict(block_q=4), "fp8": dict(quantize="")}
# Each decoding variant under each scheme it takes, except the exact kernels that
# decode through softmax's own path (`reference.decodes_as_softmax`): their forward pass
# equals softmax's under every scheme (test_alibi_in_every_exact_kernel..., test_rope_
# in_the_exact_family...), and softmax's row here checks that path's decode against it.
# rope2d only for the variants whose forward pass under rope2d nothing else checks
# (CHECKED_ELSEWHERE: local, sparse): it is rope's rotation at other angles, and
# `P.rotate` is the only code that tells the two apart (every variant and decode state
# branches on rotary vs alibi alone), so rope's row of a variant runs the same decode
# code; rope2d's angles are test_rotation_is_the_complex_definition_half_split_and_
# partial's, and rope2d in the others' forward pass is checked against float64 by
# test_rope_in_the_exact_family..., test_implied_weights_... and test_kernel_variants_....
def _decodes_under(name, scheme) -> bool:
  return scheme != "rope2d" or (name not in softmax_of_score(scheme)
                                and name not in with_implied_weights(scheme))


# The variants that decode with the KV cache's step (softmax's decode_impl,
# attention/core/kv_cache.py) run one of its two branches under a scheme: a DotScore
# (softmax, dot: `dot_attend`) or any other score function (`scores.attend`), the
# rotation and ALiBi's kept positions and bias shared by both. One row per (scheme,
# branch): softmax's, and the first other score's (cosine's, additive's); the others'
# scores under each scheme are checked against float64 in their forward pass
# (test_alibi_in_every_exact_kernel..., test_rope_in_the_exact_family...) and their
# decode without positions by the contract (tests/attention/test_contract.py).
def _kv_cache_branch(name):
  from attention.core.scores import DotScore
  v = attention.variant(name)
  if v.decode_impl is not attention.variant("softmax").decode_impl:
    return None
  return "dot" if isinstance(v.score, DotScore) else "score"


def _represents_its_branch(name, scheme) -> bool:
  branch = _kv_cache_branch(name)
  if branch is None:
    return True
  if branch == "dot":
    return name == "softmax"
  return name == next(n for n in takes(scheme) if _kv_cache_branch(n) == branch)


PAIRS = [(n, s) for s in SCHEMES for n in takes(s)
         if attention.variant(n).decode_impl is not None and _decodes_under(n, s)
         and not reference.decodes_as_softmax(n) and _represents_its_branch(n, s)]


@pytest.mark.parametrize("name, scheme", PAIRS)
def test_decode_equals_the_causal_forward_pass(name, scheme):
  """A prefill of 4 then single tokens at absolute positions (starting at 3, not 0):
  the KV cache stores rotated keys and ALiBi's key positions, the rolling and pattern
  caches likewise, the (S, Z) state rotates φ(k) at write time or decays."""
  q, k, v = (jnp.asarray(x) for x in make_inputs(DECODE_SHAPE, seed=8, dtype=np.float32))
  B, T, _, Hq, Hkv, D, Dv = DECODE_SHAPE
  params = {p: jnp.asarray(x) for p, x in make_params(name, DECODE_SHAPE,
                                                      dtype=np.float32).items()}
  if name == "performer":
    params["projection"] = perf.orthogonal_features(jax.random.PRNGKey(1), 16, D)
  opts = DECODE_OPTS.get(name, {})
  pos = jnp.arange(T)[None] + 3
  state = attention.init_decode_state(name, batch=B, max_len=T, num_kv_heads=Hkv,
                                      head_dim=D, v_head_dim=Dv, positions=SPEC[scheme],
                                      num_heads=Hq, **params, **opts)

  @jax.jit
  def run(state, q, k, v, params):   # one program: the forward pass, a prefill, the steps
    ref = attention.get(name)(q, k, v, causal=True, positions=SPEC[scheme], q_pos=pos,
                              k_pos=pos, **opts, **params)
    def step(st, t, n):
      qt, kt, vt, pt = (jax.lax.dynamic_slice_in_dim(x, t, n, 1) for x in (q, k, v, pos))
      return attention.decode_step(st, qt, kt, vt, q_pos=pt, k_pos=pt,
                                   positions=SPEC[scheme], **opts, **params)
    first, state = step(state, 0, 4)
    state, rest = jax.lax.scan(lambda st, t: step(st, t, 1)[::-1], state, jnp.arange(4, T))
    return ref, jnp.concatenate([first, jnp.moveaxis(rest[:, :, 0], 0, 1)], 1)

  ref, out = run(state, q, k, v, params)
  np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-5)


def test_an_alibi_step_needs_a_cache_that_keeps_positions():
  st = attention.init_decode_state("softmax", batch=1, max_len=4, num_kv_heads=1,
                                   head_dim=4)
  x = jnp.ones((1, 1, 1, 4))
  with pytest.raises(attention.AttentionError, match="keeps key positions"):
    attention.decode_step(st, x, x, x, positions="alibi")
  st = attention.init_decode_state("softmax", batch=1, max_len=4, num_kv_heads=1,
                                   head_dim=4, positions="alibi")
  with pytest.raises(attention.AttentionError, match="pass the same positions="):
    attention.decode_step(st, x, x, x)
  with pytest.raises(attention.AttentionError, match="num_heads"):
    attention.init_decode_state("linear", batch=1, max_len=4, num_kv_heads=1, head_dim=4,
                                positions="alibi")


# ---- refusals -----------------------------------------------------------------------------

REFUSED = [(n, s) for n in attention.names() for s in SCHEMES
           if not attention.variant(n).takes(s)]


@pytest.mark.parametrize("name, scheme", REFUSED)
def test_refusals_name_the_variant_the_scheme_and_the_reason(name, scheme):
  v = attention.variant(name)
  shape = (1, 4, 4, 2, 2, 8, 8)
  q = jax.ShapeDtypeStruct((1, 4, 2, 8), jnp.float32)
  params = {p: jnp.asarray(x, jnp.float32) for p, x in make_params(name, shape).items()}
  with pytest.raises(attention.AttentionError) as e:
    jax.eval_shape(lambda q: v.fn(q, q, q, positions=SPEC[scheme], **params), q)
  why = v.position_refusal(scheme)
  assert f"'{name}'" in str(e.value) and f"'{scheme}'" in str(e.value) and why in str(e.value)
  with pytest.raises(ConfigError) as e:            # before anything is built
    ModelConfig(kind="encdec", vocab_size=8, d_model=16, num_heads=2, d_ff=16,
                encoder_attention=name, decoder_attention="softmax", positions=scheme,
                image_side=SIDE, gated_layer="bare").validate()   # the operator alone
  assert ("'positions'" in str(e.value) and f"'{name}'" in str(e.value)
          and why in str(e.value))


def test_positions_contract_errors():
  q = jnp.ones((1, 4, 2, 8))
  f = attention.get("softmax")
  with pytest.raises(attention.AttentionError, match="without positions="):
    f(q, q, q, q_pos=jnp.arange(4))
  with pytest.raises(attention.AttentionError, match=r"\(B\|1, T\) = \(1\|1, 4\)"):
    f(q, q, q, positions="rope", q_pos=jnp.arange(5))
  with pytest.raises(attention.AttentionError, match="integer positions"):
    f(q, q, q, positions="alibi", k_pos=jnp.ones(4))
  with pytest.raises(attention.AttentionError, match="one of"):
    f(q, q, q, positions="rope3d")
  with pytest.raises(attention.AttentionError, match="side"):
    f(q, q, q, positions="rope2d")
  with pytest.raises(ValueError, match="unknown schemes"):
    attention.register(attention.Variant(
        name="x", fn=f, paper="-", time="-", memory="-", causal=True, masks="any",
        decode=None, cost=None, family="exact", positions={"rope3d": "no"}))


def test_every_variant_declares_every_scheme_and_records_read_the_same():
  for name in attention.names():
    v = attention.variant(name)
    assert set(v.positions) == set(SCHEMES), name
    for s in SCHEMES:
      assert (v.position_refusal(s) is None) == v.takes(s)
      assert str(v.positions[s]) and "declares no support" not in str(v.positions[s]), (
          name, s)
