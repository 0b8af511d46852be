"""retention, gla (diagonal and SSD gates), deltanet and gated_deltanet: every form against a float64
naive recurrence written here from the definitions (outputs and gradients, including
the gate inputs' gradients, under GQA and key padding), decoding against the forward
pass, the gate extremes, 32k tokens without NaN, and the refusals.

Tiny shapes; each test compiles one program (every form of a case, its segments and its
float64 recurrence together), never eager op by op."""

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
FORMS = {n: attention.variant(n).forms for n in GATED}
FORMS["ssd"] = ("chunked",)


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
  alpha = jnp.broadcast_to(jnp.asarray(gamma)[None, None, :, None], k.shape)
  return q, k, lambda S, t, kt, vt: (alpha[:, t][..., None] * S
                                     + kt[..., :, None] * vt[..., None, :])


def _gla(q, k, ins):
  """S_t = diag(α_t) S_{t-1} + k_t v_tᵀ, α_t = sigmoid(g_t)^(1/16) (SSD: one α)."""
  # exp(log σ(g) / 16): its gradient is finite at g = -1e4 (σ(g)^(1/16)'s is 0 · inf)
  alpha = jnp.broadcast_to(jnp.exp(jax.nn.log_sigmoid(ins["gate_logits"]) / 16), k.shape)
  return q, k, lambda S, t, kt, vt: (alpha[:, t][..., None] * S
                                     + kt[..., :, None] * vt[..., None, :])


def _deltanet(q, k, ins):
  """S_t = S_{t-1} + β_t k_t (v_t - S_{t-1}ᵀ k_t)ᵀ, β_t = sigmoid(b_t), q and k divided
  by sqrt(|x|² + 1e-6)."""
  norm = lambda x: x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-6)
  beta = jax.nn.sigmoid(ins["beta_logits"][..., 0])                 # (B, T, Hkv)

  def step(S, t, kt, vt):
    u = beta[:, t, :, None] * (vt - jnp.einsum("bhd,bhde->bhe", kt, S))
    return S + kt[..., :, None] * u[..., None, :]
  return norm(q), norm(k), step


def _gated_deltanet(q, k, ins):
  """Yang, Kautz & Hatamizadeh 2025, eq. (10): S_t = α_t (I - β_t k_t k_tᵀ) S_{t-1} +
  β_t k_t v_tᵀ, α_t = exp(-softplus(a_t)), β_t = sigmoid(b_t); q and k divided by
  sqrt(|x|² + 1e-6)."""
  norm = lambda x: x / jnp.sqrt(jnp.sum(x * x, -1, keepdims=True) + 1e-6)
  beta = jax.nn.sigmoid(ins["beta_logits"][..., 0])                 # (B, T, Hkv)
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
  S is first reset to 0. Any batch size (rows are independent)."""
  name = CASES[case][0]
  if name not in REFERENCES:
    raise AssertionError(f"gated variant {name!r} has no float64 reference in "
                         "tests/attention/test_gated.py REFERENCES")
  G_ = HQ // HKV
  B_, T_ = q.shape[:2]
  q, k, step = REFERENCES[name](q, k, ins)
  if starts is None:
    starts = jnp.zeros((B_, T_), bool)
  starts, kmask = jnp.asarray(starts), jnp.asarray(kmask)    # indexed by a traced t

  def position(S, t):          # lax.scan over t: one compiled step, not T copies
    kt, vt = k[:, t], v[:, t]
    S = jnp.where(starts[:, t][:, None, None, None], 0.0, S)
    new = step(S, t, kt, vt)
    S = jnp.where(kmask[:, t][:, None, None, None], new, S)
    qt = q[:, t].reshape(B_, HKV, G_, D) / np.sqrt(D)
    return S, jnp.einsum("bhgd,bhde->bhge", qt, S).reshape(B_, HQ, DV)

  _, outs = jax.lax.scan(position, jnp.zeros((B_, HKV, D, DV), q.dtype), jnp.arange(T_))
  return jnp.moveaxis(outs, 0, 1)


def with_grads(f, q, k, v, ins, R):
  """(out, d<Σ out·R>/d(q, k, v, inputs)) of out = f(q, k, v, ins), R a fixed cotangent."""
  def loss(*a):                 # f traced once: its output is both the loss and the aux
    o = f(*a)
    return jnp.sum(o * R), o
  (_, out), g = jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(q, k, v, ins)
  return out, g


# Small blocks: blocks of 8 positions (two chunks of 4), so that the chunked form's outer
# scan runs over several blocks at T = 13, as it does over a long sequence; inside a
# chunk of 4, base blocks of 2 (gla's exact decays, deltanet's row-by-row inverse), so
# that one halving level runs above them (three in the parallel form's one chunk of 16).
# The defaults are checked by one chunk of 16 (`DEFAULT_BLOCKS_FORM`).
SMALL_BLOCKS = {(G, "BLOCK"): 8, (G, "INTRA_BASE"): 2, (dn, "BASE"): 2, (gdn, "BASE"): 2}
DEFAULT_BLOCKS = {(m, a): getattr(m, a) for m, a in SMALL_BLOCKS}
# The cases whose chunked form has an unrolled (GPU) block scan and default base blocks
# of their own (retention's chunked form is gla's; ssd is gla's option)
BLOCK_CASES = ("gla", "deltanet", "gated_deltanet")
# How BLOCK_CASES reach one chunk of 16 at the default base blocks: deltanet's and
# gated_deltanet's parallel form is one chunk of T = 13 padded to 16, inverted by the
# same code as a chunk of the chunked form (base blocks of 8, one halving level above);
# gla's parallel form has no chunks, so its chunked form runs with chunk_size=16 (base
# blocks of 4, two halving levels above)
DEFAULT_BLOCKS_FORM = {"gla": ("chunked", 16), "deltanet": ("parallel", 4),
                       "gated_deltanet": ("parallel", 4)}


def _set(monkeypatch, blocks):
  for (m, a), x in blocks.items():
    monkeypatch.setattr(m, a, x)


# Packed rows (B, T): a start exactly at a chunk boundary (4) and at a chunk and block
# boundary (8, a masked position: the reset wins over padding), starts inside chunks (2,
# 10, 11), a one-token segment (10), a segment across a block boundary (2..9, with a hole
# at 5) and a padding segment (id 0, masked) at the end.
SEG = np.array([[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3],
                [5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 9, 0, 0]])
SEG_KMASK = np.ones((B, T), bool)
SEG_KMASK[0, 8] = SEG_KMASK[1, 5] = False
SEG_KMASK[1, 11:] = False
STARTS = np.concatenate([np.zeros((B, 1), bool), SEG[:, 1:] != SEG[:, :-1]], 1)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("case", list(CASES))
def test_every_form_equals_the_float64_recurrence_with_gradients_and_segment_resets(
    case, monkeypatch):
  """Every form of the case (`FORMS`), in ONE compiled program with the float64
  recurrence (one compilation per case; the program is traced under SMALL_BLOCKS):

  - packed rows with segment ids (SEG) and each segment run alone (a row each, key
    padding past its end), in one call: outputs and gradients w.r.t. q, k, v and the
    gate or β logits equal the recurrence reset at each start (GQA, key padding with a
    hole) and equal each other at float64 rounding, and the gate inputs' gradients are
    not 0; gate logits at 30 and -1e4 (α ≈ 1, α ≈ 0; β ≈ 1, β ≈ 0) around the starts
    leave values and gradients finite;
  - the rows without segment ids (q_seg=None; key padding with a hole and a padded
    tail): outputs equal the recurrence (forward only: the forms see the same log gates
    either way, only those at a start differ, and their backward is the one checked
    above);
  - BLOCK_CASES: the packed call of the chunked form runs its block scan unrolled as on
    a GPU (attention.core.common.scan_unroll; the plain rows' call runs it rolled), and
    one chunk of 16 at the default base blocks (`DEFAULT_BLOCKS_FORM`) equals the
    recurrence."""
  from attention.core import common
  from tests.reference import from_alone, segments_alone, to_alone
  bases = [DEFAULT_BLOCKS[m, a] for m, a in ((G, "INTRA_BASE"), (dn, "BASE"), (gdn, "BASE"))]
  assert 2 <= min(bases) and max(bases) < 16
  name, opts = CASES[case]
  fn = attention.get(name)
  # the inputs in NumPy until the one jit: each eager jnp op (a scatter, a gather, a
  # concatenation) would compile a program of its own
  q, k, v, ins, kmask = jax.tree.map(np.asarray, make(case))
  R = np.random.default_rng(9).normal(size=(B, T, HQ, DV))
  # the packed batch (seed 4, gates at the extremes around the starts) and its segments
  sq, sk, sv, sins, _ = jax.tree.map(np.array, make(case, seed=4))
  for x in sins.values():
    x[:, (3, 7)], x[:, (4, 9)] = 30.0, -1e4
  take, real = segments_alone(SEG)
  both = lambda x, a: np.concatenate([np.asarray(x), np.asarray(a)])
  packed = jax.tree.map(lambda x: both(x, to_alone(x, take, real)), (sq, sk, sv, sins, R))
  seg = both(SEG, np.where(real, 1, 0))
  seg_kmask = both(SEG_KMASK, to_alone(SEG_KMASK, take, real) & real)
  # the recurrence on the plain rows and the packed rows together (rows are independent)
  ref_args = jax.tree.map(both, (q, k, v, ins, R), (sq, sk, sv, sins, R))
  ref_kmask, ref_starts = both(kmask, SEG_KMASK), both(np.zeros((B, T), bool), STARTS)
  forms = FORMS[case]

  def form(f, **kw):
    return lambda q, k, v, ins: f(q, k, v, causal=True, **opts, **ins, **kw)

  @jax.jit
  def run(plain, packed, ref_args):
    got = {}
    got["reference"] = with_grads(lambda q, k, v, ins: reference(
        case, q, k, v, ins, ref_kmask, ref_starts), *ref_args)
    _set(monkeypatch, SMALL_BLOCKS)
    for f in forms:
      got[f] = form(fn, mask=kmask[:, None, None, :], form=f, chunk_size=4)(*plain[:4])
      with monkeypatch.context() as m:
        if f == "chunked" and case in BLOCK_CASES:
          m.setattr(common, "scan_unroll", lambda n: n)
        got[f + " segments"] = with_grads(form(fn, mask=seg_kmask[:, None, None, :],
                                             q_seg=seg, form=f, chunk_size=4), *packed)
    if case in BLOCK_CASES:
      _set(monkeypatch, DEFAULT_BLOCKS)
      f, chunk = DEFAULT_BLOCKS_FORM[case]
      got["default blocks"] = form(fn, mask=kmask[:, None, None, :], form=f,
                                   chunk_size=chunk)(*plain[:4])
    return got

  # NumPy from here on: a slice of a jax array would compile a program of its own
  got = jax.tree.map(np.asarray, run((q, k, v, ins, R), packed, ref_args))
  _set(monkeypatch, DEFAULT_BLOCKS)
  ref_out, ref_grads = got.pop("reference")
  ref_grads = jax.tree.leaves(ref_grads)
  for key, out in got.items():
    if key.endswith(" segments"):
      continue
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, ref_out[:B], atol=1e-12, rtol=1e-10, err_msg=key)
  split = lambda x: (x[:B], from_alone(x[B:], take, real, B))
  for f in forms:
    out, grads = got[f + " segments"]
    for x in jax.tree.leaves((grads, out)):
      assert bool(np.all(np.isfinite(x))), f
    got_o, alone = split(out)
    np.testing.assert_allclose(got_o, alone, atol=1e-12, err_msg=f)
    np.testing.assert_allclose(got_o, ref_out[B:], atol=1e-12, rtol=1e-10, err_msg=f)
    for g, rg in zip(jax.tree.leaves(grads), ref_grads, strict=True):
      got_g, alone_g = split(g)
      np.testing.assert_allclose(got_g, alone_g, atol=1e-11, rtol=1e-9, err_msg=f)
      np.testing.assert_allclose(got_g, rg[B:], atol=1e-11, rtol=1e-9, err_msg=f)
    if ins:                                  # gates are learned through their inputs
      assert float(np.abs(jax.tree.leaves(grads[3])[0][:B]).max()) > 1e-3, f
  assert set(got) == set(forms) | {f + " segments" for f in forms} | (
      {"default blocks"} if case in BLOCK_CASES else set())


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
  equal the chunked forward pass (all three in one compiled program); the state is
  O(D Dv), float32, whatever T."""
  from attention.core.decode import decode_tokens
  name, opts = CASES[case]
  q, k, v, ins, _ = make(case, seed=1, dtype=np.float32)
  st0 = attention.init_decode_state(name, batch=B, max_len=None, num_kv_heads=HKV,
                                    head_dim=D, v_head_dim=DV, **opts)

  @jax.jit
  def run(st0, q, k, v, ins):
    ref = attention.get(name)(q, k, v, causal=True, **opts, **ins)
    out, st = decode_tokens(st0, q, k, v, ins, **opts)
    outs, s, t = [], st0, 0
    for n in (4, 1, 4, 4):
      o, s = attention.decode_step(s, *(x[:, t:t + n] for x in (q, k, v)), **opts,
                                   **{a: x[:, t:t + n] for a, x in ins.items()})
      outs.append(o)
      t += n
    return ref, out, st, jnp.concatenate(outs, 1), s

  ref, out, st, chunks, st_chunks = run(st0, q, k, v, ins)
  np.testing.assert_allclose(out, ref, atol=2e-5, rtol=2e-5)
  assert int(st.pos) == T and st.S.dtype == jnp.float32 and st.nbytes == st0.nbytes
  np.testing.assert_allclose(chunks, ref, atol=2e-5, rtol=2e-5)
  assert int(st_chunks.pos) == T
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
  β = 0: the delta rule leaves its state (here a nonzero initial one) unchanged.
  One compiled program; the references in NumPy."""
  q, k, v, _, _ = (np.asarray(x) for x in make("gla"))
  big = np.full((B, T, HKV, D), 1e4)                # log_sigmoid(1e4) = 0: α = 1 exactly
  kv = lambda x: np.repeat(x, HQ // HKV, axis=2)
  s = np.einsum("bihd,bjhd->bhij", q, kv(k)) / np.sqrt(D)
  plain = np.einsum("bhij,bjhe->bihe", np.tril(s), kv(v))
  diag = np.einsum("bhii,bihe->bihe", s, kv(v))
  S0 = np.random.default_rng(3).normal(size=(B, HKV, D, DV))
  run = jax.jit(lambda q, k, v, g: (
      attention.get("gla")(q, k, v, causal=True, gate_logits=g, chunk_size=4),
      attention.get("gla")(q, k, v, causal=True, gate_logits=-g, chunk_size=4),
      attention.get("retention")(q, k, v, causal=True, gamma=1.0, chunk_size=4),
      attention.get("linear")(q, k, v, causal=True, feature_map="identity"),
      dn.deltanet_with_state(q, k, v, causal=True, beta_logits=-g[..., :1], state=S0,
                             chunk_size=4)))
  ones, zeros, ret, lin, (out, S) = run(q, k, v, big)
  np.testing.assert_allclose(ones, plain, atol=1e-12)
  np.testing.assert_allclose(ret, plain, atol=1e-12)
  np.testing.assert_allclose(zeros, diag, atol=1e-12)
  assert not np.allclose(lin, plain, atol=1e-3)
  np.testing.assert_allclose(S, S0, atol=1e-12)     # β = 0: nothing written
  qn = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + 1e-6) / np.sqrt(D)
  np.testing.assert_allclose(   # each query reads S0 of its kv head
      out, np.einsum("bthd,bhde->bthe", qn, np.repeat(S0, HQ // HKV, axis=1)), atol=1e-12)


# (case, packed, dtype); each case costs ~3.5 CPU-s of compilation, whatever the length.
# No unpacked ssd: the packed one runs the same chunked scalar-gate code (`_intra_scalar`)
# on the same gate runs, packing only adds the resets' log gates (the forms see nothing
# else of the ids). No float32 gated_deltanet: bf16 inputs are cast to float32 before
# any arithmetic (`common.compute_dtype`), so float32 inputs run the same float32
# arithmetic on unrounded values (the gate logits stay as extreme rounded to bf16)
LONG = [("gla", False, "bfloat16"), ("deltanet", False, "bfloat16"),
        ("ssd", True, "bfloat16"), ("gated_deltanet", True, "bfloat16")]


def test_32k_tokens_with_gates_near_0_and_1_stay_finite():
  """bf16 inputs, B = H = 1, D = 4, 32768 positions,
  chunked, every case of LONG in ONE compiled program: gates alternate between runs near
  1 (logit 30: α = 1 - 6e-15) and near 0 (logit -1e4: α = e^-625; gated_deltanet's
  decay logits the other way round: α = e^-30 and 1), and the forward pass and its
  gradients stay finite (state and products in float32). packed: also ~100 segments of
  random lengths (resets: log gates of -1e30 summed through the scalar gate's 0/1
  matmuls, across chunk and block boundaries and the gate runs)."""
  n = 32768
  r = np.random.default_rng(5)
  x = r.normal(size=(3, 1, n, 1, D))
  run = np.repeat(r.random(n // 512) < 0.5, 512)          # runs of 512 positions
  logit = np.where(run, 30.0, -1e4)[None, :, None, None]
  seg = np.cumsum(r.random((1, n)) < 0.003, axis=1)
  assert 50 < seg.max() < 200

  def case_loss(case, packed, dtype):
    name, opts = CASES[case]
    fn = attention.get(name)
    ins = {a: jnp.asarray(np.broadcast_to(logit, s), dtype) for a, s in
           attention.variant(name).input_shapes(1, n, 1, 1, D, opts).items()}
    loss = lambda q, k, v, ins, seg: jnp.sum(fn(
        q, k, v, causal=True, **opts, **ins, **({"q_seg": seg} if packed else {}))
        .astype(jnp.float32) ** 2)
    return jax.value_and_grad(loss, argnums=(0, 1, 2, 3)), (*(jnp.asarray(
        a, dtype) for a in x), ins)

  fns, args = zip(*(case_loss(*c) for c in LONG))
  # the ids an argument, not a constant: XLA would constant-fold their sort (~1 s)
  results = jax.jit(lambda args, seg: [f(*a, seg) for f, a in zip(fns, args)])(
      list(args), jnp.asarray(seg))
  for c, (val, grads) in zip(LONG, results, strict=True):
    assert np.isfinite(float(val)) and float(val) > 0, c
    for g in jax.tree.leaves(grads):
      assert bool(np.all(np.isfinite(np.asarray(g, np.float32)))), c


def test_bf16_inputs_keep_a_float32_state():
  """bf16 q, k, v and gates: the state and the arithmetic are float32 (the final state
  comes back float32), only the output is rounded to bf16."""
  from attention import gla
  q, k, v, ins, kmask = make("gla", dtype=np.float32)
  f = lambda q, k, v, g: gla.gla_with_state(q, k, v, causal=True, gate_logits=g)
  bf = lambda x: x.astype(jnp.bfloat16)
  (out32, S32), (out16, S16) = jax.jit(lambda q, k, v, g: (
      f(q, k, v, g), f(bf(q), bf(k), bf(v), bf(g))))(q, k, v, ins["gate_logits"])
  assert out16.dtype == jnp.bfloat16 and S16.dtype == S32.dtype == jnp.float32
  np.testing.assert_allclose(S16, S32, atol=0.05, rtol=0.05)
  np.testing.assert_allclose(np.asarray(out16, np.float32), out32, atol=0.05, rtol=0.05)


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
