"""retention, gla (diagonal and SSD gates), deltanet and gated_deltanet: every form against a float64
naive recurrence written here from the definitions (outputs and gradients, including
the gate inputs' gradients, under GQA and key padding), decoding against the forward
pass, the gate extremes, 32k tokens without NaN, and the refusals.

Tiny shapes; each (variant, form) compiles once."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention import deltanet as dn
from attention import gated_deltanet as gdn
from attention.core import gated as G

B, T, HQ, HKV, D, DV = 2, 13, 4, 2, 4, 3
# The gated family and its forms, from the registry: a new gated variant is tested here
# with no edit but its float64 recurrence (`REFERENCES`, which it must bring).
GATED = [n for n in attention.names() if attention.variant(n).family == "gated"]
CASES = {n: (n, {}) for n in GATED}  # case: (variant, its options); inputs from its record
CASES["ssd"] = ("gla", {"gate": "ssd"})   # an option of gla: the SSD scalar gate
# SSD's scalar gate takes its own path in the chunked form only (the others broadcast
# a gate of width 1, as for retention's constant one)
FORM_CASES = ([(n, f) for n in GATED for f in attention.variant(n).forms]
              + [("ssd", "chunked")])


def make(case, seed=0, T=T, dtype=np.float64):
  """q, k, v, the variant's per-token inputs (from Variant.inputs), a key mask (B, T)."""
  name, opts = CASES[case]
  r = np.random.default_rng(seed)
  q, k = r.normal(size=(B, T, HQ, D)), r.normal(size=(B, T, HKV, D))
  v = r.normal(size=(B, T, HKV, DV))
  ins = {n: 4 * r.normal(size=s)       # logits across sigmoid's range
         for n, s in attention.variant(name).input_shapes(B, T, HQ, HKV, D, opts).items()}
  kmask = np.ones((B, T), bool)
  kmask[1, 2] = kmask[1, -3:] = False  # a hole and a padded tail
  cast = lambda x: jnp.asarray(x, dtype)
  return cast(q), cast(k), cast(v), {n: cast(x) for n, x in ins.items()}, jnp.asarray(kmask)


# ---- the float64 references: the recurrences, one position at a time ----------------------

def _retention(q, k, ins):
  """S_t = γ_h S_{t-1} + k_t v_tᵀ, γ_h = 1 - 2^(-5-h)."""
  gamma = 1 - 2.0 ** (-5 - np.arange(HKV))
  alpha = jnp.broadcast_to(jnp.asarray(gamma)[None, None, :, None], (B, T, HKV, D))
  return q, k, lambda S, t, kt, vt: (alpha[:, t][..., None] * S
                                     + kt[..., :, None] * vt[..., None, :])


def _gla(q, k, ins):
  """S_t = diag(α_t) S_{t-1} + k_t v_tᵀ, α_t = sigmoid(g_t)^(1/16) (SSD: one α)."""
  alpha = jnp.broadcast_to((1 / (1 + jnp.exp(-ins["gate_logits"]))) ** (1 / 16),
                           (B, T, HKV, D))
  return q, k, lambda S, t, kt, vt: (alpha[:, t][..., None] * S
                                     + kt[..., :, None] * vt[..., None, :])


def _deltanet(q, k, ins):
  """S_t = S_{t-1} + β_t k_t (v_t - S_{t-1}ᵀ k_t)ᵀ, β_t = sigmoid(b_t), q and k divided
  by sqrt(|x|² + 1e-6)."""
  norm = lambda x: x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-6)
  beta = 1 / (1 + jnp.exp(-ins["beta_logits"][..., 0]))            # (B, T, Hkv)

  def step(S, t, kt, vt):
    u = beta[:, t, :, None] * (vt - jnp.einsum("bhd,bhde->bhe", kt, S))
    return S + kt[..., :, None] * u[..., None, :]
  return norm(q), norm(k), step


def _gated_deltanet(q, k, ins):
  """Yang, Kautz & Hatamizadeh 2025, eq. (10): S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} +
  β_t k_t v_tᵀ, α_t = exp(-softplus(a_t)), β_t = sigmoid(b_t); q and k divided by
  sqrt(|x|² + 1e-6)."""
  norm = lambda x: x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-6)
  beta = 1 / (1 + jnp.exp(-ins["beta_logits"][..., 0]))            # (B, T, Hkv)
  alpha = jnp.exp(-jnp.logaddexp(0.0, ins["decay_logits"][..., 0]))
  eye = jnp.eye(D)

  def step(S, t, kt, vt):
    b = beta[:, t, :, None, None]
    transition = alpha[:, t, :, None, None] * (eye - b * kt[..., :, None] * kt[..., None, :])
    return (jnp.einsum("bhij,bhje->bhie", transition, S)
            + b * kt[..., :, None] * vt[..., None, :])
  return norm(q), norm(k), step


# {gated variant: (q, k, its inputs) -> (q, k, step(S, t, k_t, v_t) -> S_t)}: its
# recurrence, one position at a time, from its definition
REFERENCES = {"retention": _retention, "gla": _gla, "deltanet": _deltanet,
              "gated_deltanet": _gated_deltanet}


def test_every_gated_variant_brings_its_float64_reference():
  missing = [n for n in GATED if n not in REFERENCES]
  assert not missing, (
      f"gated variant(s) {missing} have no float64 reference recurrence in "
      "tests/attention/test_gated.py: add one to REFERENCES (what every form is checked against)")
  no_forms = [n for n in GATED if not attention.variant(n).forms]
  assert not no_forms, f"gated variant(s) {no_forms} declare no forms (Variant.forms)"


def reference(case, q, k, v, ins, kmask, starts=None):
  """o_t = S_tᵀ q_t / sqrt(D) per query head, S per kv head (the variant's recurrence,
  `REFERENCES`); a padded t leaves S as it was; where starts (B, T) (a segment starts),
  S is first reset to 0."""
  name = CASES[case][0]
  if name not in REFERENCES:
    raise AssertionError(f"gated variant {name!r} has no float64 reference in "
                         "tests/attention/test_gated.py REFERENCES")
  G_ = HQ // HKV
  q, k, step = REFERENCES[name](q, k, ins)
  S = jnp.zeros((B, HKV, D, DV), q.dtype)
  outs = []
  for t in range(q.shape[1]):
    kt, vt = k[:, t], v[:, t]
    if starts is not None:
      S = jnp.where(starts[:, t][:, None, None, None], 0.0, S)
    new = step(S, t, kt, vt)
    S = jnp.where(kmask[:, t][:, None, None, None], new, S)
    qt = q[:, t].reshape(B, HKV, G_, D) / np.sqrt(D)
    outs.append(jnp.einsum("bhgd,bhde->bhge", qt, S).reshape(B, HQ, DV))
  return jnp.stack(outs, 1)


def with_grads(f, q, k, v, ins):
  """(out, d<Σ out·R>/d(q, k, v, inputs)) of out = f(q, k, v, ins), R a fixed cotangent."""
  R = jnp.asarray(np.random.default_rng(9).normal(size=q.shape[:3] + (DV,)), q.dtype)
  loss = lambda *a: (jnp.sum(f(*a) * R), f(*a))
  (_, out), g = jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(q, k, v, ins)
  return out, g


@functools.lru_cache(maxsize=None)
def reference_fn(case):
  return jax.jit(functools.partial(with_grads, lambda q, k, v, ins: reference(
      case, q, k, v, ins, make(case)[4])))


@pytest.fixture
def small_blocks(monkeypatch):
  """Blocks of 8 positions (two chunks of 4): the chunked form's outer scan then runs
  over several blocks at T = 13, as it does over a long sequence. Inside a chunk of 4,
  base blocks of 2 (gla's exact decays, deltanet's row-by-row inverse), so that one
  halving level runs above them (`test_the_default_base_blocks_...`: the defaults)."""
  monkeypatch.setattr(G, "BLOCK", 8)
  monkeypatch.setattr(G, "INTRA_BASE", 2)
  monkeypatch.setattr(dn, "BASE", 2)
  monkeypatch.setattr(gdn, "BASE", 2)


@pytest.mark.usefixtures("x64", "small_blocks")
@pytest.mark.parametrize("case", ["gla", "deltanet", "gated_deltanet"])
def test_the_gpu_unrolled_block_scan_equals_the_float64_recurrence(case, monkeypatch):
  """On a GPU the chunked form's block scan is unrolled (attention.core.common.scan_unroll);
  forced here, over the two blocks of small_blocks, it is the same function."""
  from attention.core import common
  monkeypatch.setattr(common, "scan_unroll", lambda n: n)
  name, opts = CASES[case]
  q, k, v, ins, kmask = make(case)
  fn = attention.get(name)
  out, grads = jax.jit(functools.partial(with_grads, lambda q, k, v, ins: fn(
      q, k, v, causal=True, mask=kmask[:, None, None, :], form="chunked", chunk_size=4,
      **opts, **ins)))(q, k, v, ins)
  ref, ref_grads = reference_fn(case)(q, k, v, ins)
  np.testing.assert_allclose(out, ref, atol=1e-12, rtol=1e-10)
  for g, rg in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
    np.testing.assert_allclose(g, rg, atol=1e-11, rtol=1e-9)


@pytest.mark.usefixtures("x64", "small_blocks")
@pytest.mark.parametrize("case, form", FORM_CASES)
def test_every_form_equals_the_float64_recurrence_with_gradients(case, form):
  name, opts = CASES[case]
  q, k, v, ins, kmask = make(case)
  fn = attention.get(name)
  f = jax.jit(functools.partial(with_grads, lambda q, k, v, ins: fn(
      q, k, v, causal=True, mask=kmask[:, None, None, :], form=form, chunk_size=4,
      **opts, **ins)))
  out, grads = f(q, k, v, ins)
  ref, ref_grads = reference_fn(case)(q, k, v, ins)
  assert out.dtype == jnp.float64
  np.testing.assert_allclose(out, ref, atol=1e-12, rtol=1e-10)
  for g, rg in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
    np.testing.assert_allclose(g, rg, atol=1e-11, rtol=1e-9)
  if ins:                                  # the gates are learned through their inputs
    assert float(jnp.abs(jax.tree.leaves(grads[3])[0]).max()) > 1e-3


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("case", ["gla", "deltanet", "gated_deltanet"])
def test_the_default_base_blocks_and_halving_above_them_equal_the_recurrence(case):
  """One chunk of 16 at the default base blocks (gla 4: two halving levels above;
  deltanet and gated_deltanet 8: one), outputs and gradients, against the float64
  recurrence."""
  assert 2 <= min(G.INTRA_BASE, dn.BASE, gdn.BASE)
  assert max(G.INTRA_BASE, dn.BASE, gdn.BASE) < 16
  name, opts = CASES[case]
  q, k, v, ins, kmask = make(case)
  fn = attention.get(name)
  out, grads = jax.jit(functools.partial(with_grads, lambda q, k, v, ins: fn(
      q, k, v, causal=True, mask=kmask[:, None, None, :], chunk_size=16, **opts,
      **ins)))(q, k, v, ins)
  ref, ref_grads = reference_fn(case)(q, k, v, ins)
  np.testing.assert_allclose(out, ref, atol=1e-12, rtol=1e-10)
  for g, rg in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
    np.testing.assert_allclose(g, rg, atol=1e-11, rtol=1e-9)


# Packed rows (B, T): a start exactly at a chunk boundary (4) and at a chunk and block
# boundary (8, a masked position: the reset wins over padding), starts inside chunks (2,
# 10, 11), a one-token segment (10), a segment across a block boundary (2..9, with a hole
# at 5) and a padding segment (id 0, masked) at the end.
SEG = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3],
                [5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 9, 0, 0]])
SEG_KMASK = np.ones((B, T), bool)
SEG_KMASK[0, 8] = SEG_KMASK[1, 5] = False
SEG_KMASK[1, 11:] = False


@pytest.mark.usefixtures("x64", "small_blocks")
@pytest.mark.parametrize("case, form", FORM_CASES)
def test_every_form_with_segment_ids_equals_each_segment_alone(case, form):
  """A packed batch and each of its segments run alone (a row each, key padding past its
  end), in ONE call (one compilation): outputs and gradients w.r.t. q, k, v and the gate
  or β logits equal, at float64 rounding; outputs equal the float64 recurrence reset at
  each start; gate logits at 30 and -1e4 (α ≈ 1, α ≈ 0; β ≈ 1, β ≈ 0) around the starts
  leave values and gradients finite."""
  from tests.reference import from_alone, segments_alone, to_alone
  name, opts = CASES[case]
  q, k, v, ins, _ = make(case, seed=4)
  ins = {a: x.at[:, (3, 7)].set(30.0).at[:, (4, 9)].set(-1e4) for a, x in ins.items()}
  take, real = segments_alone(SEG)
  R = np.random.default_rng(9).normal(size=(B, T, HQ, DV))
  both = lambda x, a: jnp.concatenate([jnp.asarray(x), jnp.asarray(a)])
  packed = (q, k, v, ins, R)
  args = jax.tree.map(lambda x: both(x, to_alone(x, take, real)), packed)
  seg = both(SEG, np.where(real, 1, 0))
  kmask = both(SEG_KMASK, to_alone(SEG_KMASK, take, real) & real)
  fn = attention.get(name)

  @jax.jit
  def run(q, k, v, ins, R):
    out = lambda q, k, v, ins: fn(q, k, v, causal=True, mask=kmask[:, None, None, :],
                                  q_seg=seg, form=form, chunk_size=4, **opts, **ins)
    def loss(*a):
      o = out(*a)
      return jnp.sum(o * R), o
    return jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(q, k, v, ins)

  grads, out = run(*args)
  for x in jax.tree.leaves((grads, out)):
    assert bool(jnp.all(jnp.isfinite(x)))
  split = lambda x: (np.asarray(x[:B]), from_alone(x[B:], take, real, B))
  got, alone = split(out)
  np.testing.assert_allclose(got, alone, atol=1e-12)
  starts = np.concatenate([np.zeros((B, 1), bool), SEG[:, 1:] != SEG[:, :-1]], 1)
  np.testing.assert_allclose(got, reference(case, q, k, v, ins, SEG_KMASK, starts),
                             atol=1e-12)
  for g in jax.tree.leaves(grads):
    got_g, alone_g = split(g)
    np.testing.assert_allclose(got_g, alone_g, atol=1e-11, rtol=1e-9)
  if ins:                                  # gates are learned through their inputs
    assert float(jnp.abs(jax.tree.leaves(grads[3])[0][:B]).max()) > 1e-3


@pytest.mark.usefixtures("x64")
def test_segment_ids_a_reset_cannot_honour_give_nan_rows_and_decode_refuses_them():
  """The state resets where the id changes: a row whose id recurs after another (not
  contiguous runs) or whose q_seg and k_seg differ is NaN (not silently another
  attention than the segment mask); the other rows are untouched. A decode step (one
  sequence per row) refuses ids."""
  q, k, v, ins, _ = make("gla")
  good = SEG[0]
  bad = np.array([[1] * 6 + [2] * 4 + [1] * 3, good])      # id 1 recurs
  f = jax.jit(lambda q_seg, k_seg: attention.get("gla")(
      q, k, v, causal=True, q_seg=q_seg, k_seg=k_seg, chunk_size=4, **ins))
  out = f(bad, bad)
  assert bool(jnp.all(jnp.isnan(out[0]))) and bool(jnp.all(jnp.isfinite(out[1])))
  other = np.stack([good, good + 1])                        # row 1: same runs, other ids
  out = f(np.stack([good, good]), other)
  assert bool(jnp.all(jnp.isfinite(out[0]))) and bool(jnp.all(jnp.isnan(out[1])))
  st = attention.init_decode_state("gla", batch=B, max_len=None, num_kv_heads=HKV,
                                   head_dim=D, v_head_dim=DV)
  with pytest.raises(attention.AttentionError, match="'gla' does not support segment ids.*"
                     "one sequence per batch row"):
    attention.decode_step(st, q[:, :1], k[:, :1], v[:, :1], q_seg=SEG[:, :1],
                          gate_logits=ins["gate_logits"][:, :1])


@pytest.mark.parametrize("case", GATED)
def test_decode_token_by_token_and_chunked_prefill_equal_the_forward_pass(case):
  """decode_step in lax.scan (T = 1 each) and in chunks [4, 1, 4, 4] (T > 1: prefills)
  equal the chunked forward pass; the state is O(D Dv), float32, whatever T."""
  name, opts = CASES[case]
  q, k, v, ins, _ = make(case, seed=1, dtype=np.float32)
  ref = attention.get(name)(q, k, v, causal=True, **opts, **ins)
  st0 = attention.init_decode_state(name, batch=B, max_len=None, num_kv_heads=HKV,
                                    head_dim=D, v_head_dim=DV, **opts)
  step = jax.jit(functools.partial(attention.decode_step, **opts))

  from attention.core.decode import decode_tokens
  out, st = jax.jit(lambda *a: decode_tokens(*a, **opts))(st0, q, k, v, ins)
  np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
  assert int(st.pos) == T and st.S.dtype == jnp.float32 and st.nbytes == st0.nbytes
  outs, st, t = [], st0, 0
  for n in (4, 1, 4, 4):
    o, st = step(st, *(x[:, t:t + n] for x in (q, k, v)),
                 **{a: x[:, t:t + n] for a, x in ins.items()})
    outs.append(o)
    t += n
  np.testing.assert_allclose(jnp.concatenate(outs, 1), ref, atol=2e-5, rtol=2e-5)
  bf16 = attention.init_decode_state(name, batch=1, max_len=None, num_kv_heads=1,
                                     head_dim=D, dtype=jnp.bfloat16)
  assert bf16.S.dtype == jnp.float32                # the state stays float32 under bf16
  with pytest.raises(attention.AttentionError, match="not a KV cache"):
    attention.init_decode_state(name, batch=1, max_len=4, num_kv_heads=1, head_dim=D,
                                cache_dtype="int8")


@pytest.mark.usefixtures("x64")
def test_gate_extremes():
  """gate ≡ 1 (gla) and γ = 1 (retention): linear attention with identity features and
  NO normaliser, o_i = Σ_{j≤i} (q_i·k_j / sqrt(D)) v_j (our `linear` has φ = elu + 1 and
  a normaliser: another function); gates ≡ 0: each query reads its own key only;
  β = 0: the delta rule leaves its state (here a nonzero initial one) unchanged."""
  q, k, v, _, _ = make("gla")
  big = jnp.full((B, T, HKV, D), 1e4)               # log_sigmoid(1e4) = 0: α = 1 exactly
  kv = lambda x: jnp.repeat(x, HQ // HKV, axis=2)
  s = jnp.einsum("bihd,bjhd->bhij", q, kv(k)) / np.sqrt(D)
  plain = jnp.einsum("bhij,bjhe->bihe", jnp.tril(s), kv(v))
  diag = jnp.einsum("bhii,bihe->bihe", s, kv(v))
  run = jax.jit(lambda q, k, v, g: (
      attention.get("gla")(q, k, v, causal=True, gate_logits=g, chunk_size=4),
      attention.get("gla")(q, k, v, causal=True, gate_logits=-g, chunk_size=4),
      attention.get("retention")(q, k, v, causal=True, gamma=1.0, chunk_size=4)))
  ones, zeros, ret = run(q, k, v, big)
  np.testing.assert_allclose(ones, plain, atol=1e-12)
  np.testing.assert_allclose(ret, plain, atol=1e-12)
  np.testing.assert_allclose(zeros, diag, atol=1e-12)
  assert not np.allclose(attention.get("linear")(q, k, v, causal=True, feature_map="identity"),
                         plain, atol=1e-3)
  S0 = jnp.asarray(np.random.default_rng(3).normal(size=(B, HKV, D, DV)))
  out, S = jax.jit(lambda q, k, v, b: dn.deltanet_with_state(
      q, k, v, causal=True, beta_logits=b, state=S0, chunk_size=4))(q, k, v, -big[..., :1])
  np.testing.assert_allclose(S, S0, atol=1e-12)     # β = 0: nothing written
  qn = q / jnp.sqrt(jnp.sum(q * q, -1, keepdims=True) + 1e-6) / np.sqrt(D)
  np.testing.assert_allclose(   # each query reads S0 of its kv head
      out, jnp.einsum("bthd,bhde->bthe", qn, jnp.repeat(S0, HQ // HKV, axis=1)), atol=1e-12)


@pytest.mark.parametrize("case, packed, dtype", [
    ("gla", False, "bfloat16"), ("ssd", False, "bfloat16"), ("deltanet", False, "bfloat16"),
    ("ssd", True, "bfloat16"), ("gated_deltanet", True, "bfloat16"),
    ("gated_deltanet", False, "float32")])
def test_32k_tokens_with_gates_near_0_and_1_stay_finite(case, packed, dtype):
  """bf16 (and for gated_deltanet float32) inputs, B = H = 1, D = 4, 32768 positions,
  chunked: gates alternate between runs near 1 (logit 30: α = 1 - 6e-15) and near 0
  (logit -1e4: α = e^-625; gated_deltanet's decay logits the other way round: α = e^-30
  and 1), and the forward pass and its gradients stay finite (state and products in
  float32). packed:
  also ~100 segments of random lengths (resets: log gates of -1e30 summed through the
  scalar gate's 0/1 matmuls, across chunk and block boundaries and the gate runs)."""
  name, opts = CASES[case]
  n = 32768
  r = np.random.default_rng(5)
  q, k, v = (jnp.asarray(r.normal(size=(1, n, 1, D)), dtype) for _ in range(3))
  run = np.repeat(r.random(n // 512) < 0.5, 512)          # runs of 512 positions
  logit = np.where(run, 30.0, -1e4)[None, :, None, None]
  ins = {a: jnp.asarray(np.broadcast_to(logit, s), dtype) for a, s in
         attention.variant(name).input_shapes(1, n, 1, 1, D, opts).items()}
  fn = attention.get(name)
  seg = {"q_seg": np.cumsum(r.random((1, n)) < 0.003, axis=1)} if packed else {}
  loss = lambda q, k, v, ins: jnp.sum(fn(q, k, v, causal=True, **opts, **ins, **seg)
                                      .astype(jnp.float32) ** 2)
  val, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, ins)
  assert np.isfinite(float(val)) and float(val) > 0
  for g in jax.tree.leaves(grads):
    assert bool(jnp.all(jnp.isfinite(g.astype(jnp.float32))))


def test_bf16_inputs_keep_a_float32_state():
  """bf16 q, k, v and gates: the state and the arithmetic are float32 (the final state
  comes back float32), only the output is rounded to bf16."""
  from attention import gla
  q, k, v, ins, kmask = make("gla", dtype=np.float32)
  f = jax.jit(lambda q, k, v, g: gla.gla_with_state(q, k, v, causal=True, gate_logits=g))
  out32, S32 = f(q, k, v, ins["gate_logits"])
  bf = lambda x: x.astype(jnp.bfloat16)
  out16, S16 = f(bf(q), bf(k), bf(v), bf(ins["gate_logits"]))
  assert out16.dtype == jnp.bfloat16 and S16.dtype == S32.dtype == jnp.float32
  np.testing.assert_allclose(S16, S32, atol=0.05, rtol=0.05)
  np.testing.assert_allclose(out16.astype(jnp.float32), out32, atol=0.05, rtol=0.05)


def test_implied_weights_reproduce_the_output():
  """weights @ v == out for the closed forms under GQA and key padding, and with segment
  ids (no weight across two segments) (gla's are
  retention's formula with other gates: tests/attention/test_attention_maps.py checks them);
  nothing above the diagonal, nothing from a padded key; retention's are
  γ^(i-j) q_i·k_j / sqrt(D), i - j counting unpadded positions only."""
  from attention.core.weights import implied_weights
  q, k, v, ins, kmask = make("deltanet", seed=2, dtype=np.float32)
  m = kmask[:, None, None, :]

  @jax.jit
  def run(q, k, v, ins):
    return {(name, seg is not None): (
        implied_weights(q, k, name=name, causal=True, mask=m, q_seg=seg, **kw),
        attention.get(name)(q, k, v, causal=True, mask=m, q_seg=seg, **kw))
            for name, kw in (("retention", {}), ("deltanet", ins)) for seg in (None, SEG)}

  vr = jnp.repeat(v, HQ // HKV, axis=2)
  across = SEG[:, None, :, None] != SEG[:, None, None, :]    # pairs of two segments
  for (name, packed), (w, out) in run(q, k, v, ins).items():
    np.testing.assert_allclose(jnp.einsum("bhqk,bkhd->bqhd", w, vr), out, atol=2e-5)
    assert w.shape == (B, HQ, T, T) and w.dtype == jnp.float32
    assert float(jnp.abs(jnp.triu(w, 1)).max()) == 0.0
    assert float(jnp.abs(w[1, :, :, 2]).max()) == 0.0    # the padded key
    if packed:                                           # nothing across segments
      assert float(jnp.abs(jnp.where(across, w, 0)).max()) == 0.0
  # γ^(number of unpadded positions in (j, i]): a padded position does not decay
  i, j = np.indices((T, T))
  c = np.cumsum(np.asarray(kmask), axis=1)                  # (B, T)
  steps = np.maximum(c[:, None, :, None] - c[:, None, None, :], 0)
  gamma = np.repeat(1 - 2.0 ** (-5 - np.arange(HKV)), 2)[None, :, None, None]
  s = np.einsum("bihd,bjhd->bhij", q, jnp.repeat(k, 2, axis=2)) / np.sqrt(D)
  want = np.where(j <= i, s * gamma ** steps, 0) * np.asarray(kmask)[:, None, None, :]
  w = run(q, k, v, ins)[("retention", False)][0]
  np.testing.assert_allclose(w, want, atol=1e-5)


REFUSALS = [
    (dict(causal=False), "retention", "causal=False"),
    (dict(mask=np.ones((T, T), bool)), "gla", "key-padding"),
    (dict(form="assoc"), "deltanet", "dense"),
    (dict(form="fast"), "gla", "unknown form"),
    (dict(chunk_size=6), "gla", "power of two"),
    (dict(gamma=(0.5, 1.5)), "retention", r"\(0, 1\]"),
    (dict(gamma=(0.5, 0.5, 0.5)), "retention", "one per key/value head"),
    (dict(gate="scalar"), "gla", "gate must be one of"),
    (dict(gate="ssd"), "gla", r"gate_logits has shape .*expected \(2, 13, 2, 1\)"),
    (dict(tau=0.0), "gla", "tau must be > 0"),
]


@pytest.mark.parametrize("kw, name, words", REFUSALS)
def test_refusals_name_the_variant_and_the_reason(kw, name, words):
  q, k, v, ins, _ = make(name, dtype=np.float32)
  kw = {"causal": True, **ins, **kw}
  with pytest.raises(attention.AttentionError, match=words) as e:
    attention.get(name)(q, k, v, **kw)
  assert name in str(e.value)


def test_a_missing_input_and_cross_attention_are_refused():
  q, k, v, _, _ = make("gla", dtype=np.float32)
  with pytest.raises(attention.AttentionError, match="gla needs gate_logits=.*Variant.inputs"):
    attention.get("gla")(q, k, v, causal=True)
  with pytest.raises(attention.AttentionError, match="deltanet.*Tq != Tk.*one sequence"):
    attention.get("deltanet")(q[:, :5], k, v, causal=True)


def test_cost_of_the_chunked_form_against_xla():
  """attention.cost counts the chunked form's FLOPs and transcendentals as XLA does for
  the compiled function, run from a nonzero state and returning it (so that nothing is
  dead code), with T = 64 in one chunk (XLA counts a scan's body once, however many
  times it runs); a decode step's cost does not grow with the context."""
  import dataclasses
  from tests.reference import cpu_cost_analysis
  Bc, Tc, Hc, Kc, Dc = 1, 64, 4, 2, 32
  for case in CASES:
    name, opts = CASES[case]
    v = attention.variant(name)
    q, k = jnp.ones((Bc, Tc, Hc, Dc)), jnp.ones((Bc, Tc, Kc, Dc))
    ins = {n: jnp.zeros(s) for n, s in v.input_shapes(Bc, Tc, Hc, Kc, Dc, opts).items()}
    st = attention.init_decode_state(name, batch=Bc, max_len=None, num_kv_heads=Kc,
                                     head_dim=Dc)
    st = dataclasses.replace(st, S=jnp.ones_like(st.S))
    xla = cpu_cost_analysis(lambda st, q, k, ins: attention.decode_step(
        st, q, k, k, chunk_size=Tc, **opts, **ins), st, q, k, ins)
    c = attention.cost(name, batch=Bc, q_len=Tc, num_heads=Hc, num_kv_heads=Kc,
                       head_dim=Dc, causal=True, chunk_size=Tc, **opts)
    assert c.flops == pytest.approx(xla["flops"], rel=0.15), case
    assert c.transcendentals == pytest.approx(xla.get("transcendentals", 0), rel=0.3), case
    dec = [attention.cost(name, batch=1, q_len=1, kv_len=n, num_heads=Hc, head_dim=Dc,
                          mode="decode", **opts) for n in (256, 16384)]
    assert dec[0] == dec[1]
