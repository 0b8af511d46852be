"""The contract every registered attention variant passes, in one place.

Adding a variant means passing this module (attention/README.md):

  .venv/bin/python -m pytest tests/attention/test_contract.py -k <name>

Every test is parametrised over `attention.names()` (the ids are the names), and what
each one checks is read from the variant's registry record, never from its name: a
new variant, or a new fact on the record, gets its checks by declaring facts.

  test                               runs for         reads from the record
  test_record_params_and_options     every variant    every field; params (ParamSpec
                                                      shapes, inits); options
  test_shapes_dtypes_heads_and_cross every variant    params; cross (Tq != Tk works or
                                                      is refused); masks
  test_masks_and_empty_rows          masks != "none"  masks ("key padding"; "any" adds
                                                      a per-query mask), content_routed
  test_causality                     causal           cross, content_routed
  test_refusals                      every variant    causal, masks, dropout (each
                                                      False is refused), options,
                                                      refused_options (with why)
  test_dropout                       dropout          dropout
  test_decode_equals_forward         decode_impl      decode_impl, params
  test_gradients_finite              every variant    params (trainable), causal, masks
  test_score_and_family              score or exact   score (fn == softmax(score) @ v),
                                                      family ("exact": fn == softmax)
  test_switched_params               params with a    params (ParamSpec.when: the
                                     switch (sinks)   parameter under its option),
                                                      masks, causal, decode_impl
  test_segments                      every variant    segments (taken: packed == each
                                                      segment alone, fwd and bwd;
                                                      refused: its reason), causal,
                                                      causal_only, masks, cross
  (every check)                      every variant    kv_widths: k and v are built at
                                                      the widths it declares (`kv_dims`;
                                                      D, D unless it says otherwise:
                                                      mla's rope key and latent)

Inputs are tiny (B=2, T=8, Hq=4, Hkv=2, D=8). A variant's parameters and fixed random
buffers (performer's projection, reformer's rotations) come from its own ParamSpecs,
as a model builds them, and its options keep their defaults (`Variant.options`).
Compiling dominates, so a test compiles one or two programs (several calls inside
one `jax.jit`; masks and options closed over), and inputs come from NumPy's
generator. Variant-specific float64 references stay in each variant's own test file.

A new fact on the record comes with its check here: a test parametrised by
`names_where(lambda v: v.<fact>)` whose inputs are built from the record (as
`make_params` builds parameters from ParamSpecs), and, where the fact changes what an
existing check may assume, a branch on the fact in that check (as content_routed
does in `check_influence`). A new argument that callers pass on every call (query
and key positions, segment ids) goes into `registry.CONTRACT_ARGS`, so that
`Variant.options` does not count it as an option.

tests/attention/test_registry.py runs the `check_*` functions on variants it registers for a
while (`attention.registered`).
"""
import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from attention.core import registry
from attention.core.scores import score_attention
from tests import reference

# Every variant whose kernels run compiled here: a variant built for another backend
# (`Variant.device`: flash_mgpu's Hopper kernels) passes this module on that backend
# (make test-gpu) and its own test file in its interpreter here.
NAMES = attention.native_names()
# The checks that compute leave out a variant that, on this one device, computes as
# another (`Variant.runs_as`: ring is flash here): its numbers would be that variant's.
# Its record and refusals are checked here; test_ring checks that it hands every
# argument on (masks, segments, ALiBi, cross lengths, GQA, gradients) and its own
# algorithm over 4 and 8 devices.
COMPUTED = attention.native_names(own_compute=True)
B, T, H, HKV, D = 2, 8, 4, 2, 8


def record(name) -> attention.Variant:
  return attention.variant(name)


def names_where(fact) -> list:
  """The computed names (COMPUTED) whose record satisfies `fact(record)` (for
  parametrize)."""
  return [n for n in COMPUTED if fact(record(n))]


# Variants whose GQA and MQA are, by definition, not MHA with repeated key/value heads (each
# with the reason and where its GQA is tested instead).
GQA_NOT_REPEATED_MHA = {
    "retention": "its default decays are per kv head (1 - 2^(-5-h), h < Hkv): MHA's "
                 "Hq heads get other decays; tests/attention/test_gated.py checks its GQA "
                 "against a float64 recurrence",
}

def inputs_for(name, q, k, opts=None) -> dict:
  """{input: (B, Tq, Hkv|Hq, width)}: fixed random per-token inputs of the variant's
  declared shapes (`Variant.inputs`; a model projects them from the layer input), from
  q's and k's static shapes (NumPy at trace time: no program per shape). Each input is
  one (Tq, width) draw shared by every batch row and head, so that GQA equals MHA with
  repeated heads, a prefix of the sequence gets a prefix of the inputs, and rows of
  another batch size get the same values. A q or k of another rank (the refusal
  tests' bad shapes) gets inputs as if leading axes of 1 completed its rank 4, so that
  a variant whose inputs have no default still gets them and its own refusal of the
  rank is what is checked. Rows of another query sequence than q's leading rows (a
  chunk of the last queries, queries reordered) are the caller's to slice and pass."""
  v = record(name)
  qs, ks = ((1,) * (4 - x.ndim) + tuple(x.shape)[-4:] for x in (q, k))
  opts = {o: x for o, x in (opts or {}).items() if o not in registry.CONTRACT_ARGS}
  shapes = v.input_shapes(qs[0], qs[1], qs[2], ks[2], qs[3], opts)
  out = {}
  for i, n in enumerate(sorted(shapes)):
    x = np.random.default_rng(5 + i).standard_normal(shapes[n][1::2], np.float32)
    out[n] = jnp.broadcast_to(jnp.asarray(x)[None, :, None], shapes[n])
  return out


def call_fn(name):
  """The variant's function as the contract tests call it: a variant with per-token
  inputs gets `inputs_for`'s (unless the call passes its own), and a causal-only
  variant (an RNN over its own sequence) is called causally unless the check asks
  otherwise (its causal=False refusal is checked by name)."""
  v = record(name)
  if not v.inputs and not v.causal_only:
    return v.fn

  def fn(q, k, val, **kw):
    if v.causal_only:
      kw.setdefault("causal", True)
    return v.fn(q, k, val, **{**inputs_for(name, q, k, kw), **kw})
  return fn


# ---- inputs ---------------------------------------------------------------------------

def make_params(name, *, max_len=T, seed=1, options=None):
  """The variant's parameters and buffers from its ParamSpecs (shape and init) for
  Hq=H heads of D and sequences up to max_len, float32 (as a model owns them), under
  `options` (a switched parameter, `ParamSpec.when`, only while its option is on)."""
  v = record(name)
  shapes, _ = v.param_shapes(H, D, max_len, options)
  keys = jax.random.split(jax.random.key(seed), max(1, len(shapes)))
  return {p: v.params[p].init(key, shapes[p], jnp.float32)
          for key, p in zip(keys, sorted(shapes))}


def kv_dims(name) -> tuple[int, int]:
  """(Dk, Dv): the widths of the k and v the variant consumes at head dim D (its
  record's `kv_widths` at its default options; (D, D) unless it declares others)."""
  return (D, D) if name is None else record(name).kv_dims(D)


def make_qkv(name=None, *, Tq=T, Tk=T, Hkv=HKV, Dv=None, dtype=jnp.float32, seed=0):
  """q (B, Tq, H, D), k (B, Tk, Hkv, Dk), v (B, Tk, Hkv, Dv), unit normal (NumPy's
  generator: jax.random would compile a program per shape). Dk and the default Dv are
  the variant's (`kv_dims`: D unless its record's kv_widths says otherwise)."""
  dk, dv = kv_dims(name)
  rng = np.random.default_rng(seed)
  return tuple(jnp.asarray(rng.standard_normal(s, np.float32), dtype)
               for s in ((B, Tq, H, D), (B, Tk, Hkv, dk),
                         (B, Tk, Hkv, dv if Dv is None else Dv)))


def key_padding(Tk=T):
  """(B, 1, 1, Tk): sequence 0 padded after 5 keys, sequence 1 all padding (none of
  its queries has an allowed key)."""
  m = np.zeros((B, 1, 1, Tk), bool)
  m[0, ..., :5] = True
  return m


def per_query_mask(Tq=T, Tk=T, seed=3):
  """(B, 1, Tq, Tk) random, with query row 1 fully masked and sequence 0's last key
  masked for every query."""
  m = np.random.default_rng(seed).random((B, 1, Tq, Tk)) < 0.6
  m[:, :, 1, :] = False
  m[0, ..., -1] = False
  return m


def masks_for(v) -> list:
  """(label, mask) for each mask kind the record honours, richest last (None: none)."""
  out = [("no", None)]
  if v.masks in ("any", "key padding"):
    out.append(("key-padding", key_padding()))
  if v.masks == "any":
    out.append(("per-query", per_query_mask()))
  return out


def allowed(Tq, Tk, causal, mask):
  """(B, Tq, Tk) bool: the keys each query may see under the contract."""
  return reference.allowed(B, 1, Tq, Tk, causal, mask)[:, 0]


def f32(x):
  return np.asarray(jnp.asarray(x, jnp.float32))


# ---- running the variant --------------------------------------------------------------

def outputs(name, params, *calls, extra=None):
  """The variant's outputs (jax arrays) for each call (q, k, v) or (q, k, v, opts),
  all computed by ONE jitted program; opts (causal, mask, ...) are closed over.
  extra(q, k, v, p) -> a list of more outputs of the same program (references)."""
  fn = call_fn(name)
  opts = [c[3] if len(c) > 3 else {} for c in calls]

  def run(arrays, p):
    outs = [fn(q, k, v, **p, **o) for (q, k, v), o in zip(arrays, opts)]
    return outs + (extra(*arrays[0], p) if extra else [])

  return jax.jit(run)([c[:3] for c in calls], params)


def influence(name, params, q, k, v, extra=(), **opts):
  """(moved, outs): which output rows change when one input position changes.

  moved: {"q", "k", "v": (B, Tq, B, Tx) bool}, moved[x][b, i, c, j] = output row i of
  batch element b changed (in any bit) when position j of x in batch element c got
  unit noise; outs: the unperturbed output (B, Tq, Hq, Dv), then the outputs of the
  `extra` (q, k, v) inputs. One jitted program: fn vmapped over all the inputs, the
  unperturbed one first, so that every output comes from the same code (a bitwise
  comparison is meaningful)."""
  fn = call_fn(name)
  arrays = dict(zip("qkv", (q, k, v)))
  cases = [(None, 0, 0)] + [(x, c, j) for x, a in arrays.items()
                            for c in range(B) for j in range(a.shape[1])]
  rng = np.random.default_rng(11)
  stacks = []
  for x, a in arrays.items():
    hit = np.zeros((len(cases),) + a.shape[:2] + (1, 1), np.float32)
    for n, (y, c, j) in enumerate(cases):
      hit[n, c, j] = y == x
    stacks.append(f32(a) + hit * rng.standard_normal(a.shape, np.float32))
  stacks = [np.concatenate([s] + [f32(e[i])[None] for e in extra])
            for i, s in enumerate(stacks)]

  def run(q, k, v, p):
    out = jax.vmap(lambda q, k, v: fn(q, k, v, **p, **opts))(q, k, v)
    n = len(cases)
    return jnp.any(out[1:n] != out[:1], axis=(-2, -1)), out[:1], out[n:]

  changed, out, more = jax.jit(run)(*(jnp.asarray(x, q.dtype) for x in stacks), params)
  changed, moved, n = np.asarray(changed), {}, 0
  for x, a in arrays.items():
    size = B * a.shape[1]
    moved[x] = changed[n:n + size].reshape(B, a.shape[1], B, -1).transpose(2, 3, 0, 1)
    n += size
  return moved, list(f32(out)) + list(f32(more))


def dependence(name, params, q, k, v, **opts):
  """{"q", "k": (B, Tq, B, Tx) bool}: d out_i / d x_j != 0, from one jitted
  reverse-mode Jacobian of a random projection of the output rows. How a
  content_routed record's queries and keys are checked: they also move other rows'
  chunks, which no gradient sees."""
  fn = call_fn(name)
  w = np.random.default_rng(9).standard_normal((H, v.shape[-1]), np.float32)

  def rows(q, k):
    return jnp.einsum("bqhd,hd->bq", fn(q, k, v, **params, **opts).astype(jnp.float32), w)

  jac = jax.jit(jax.jacrev(rows, argnums=(0, 1)))(q, k)
  return {x: np.asarray(jnp.abs(j).sum(axis=(-2, -1)) > 0) for x, j in zip("qk", jac)}


def check_influence(name, params, q, k, v, allow, what, extra=(), **opts):
  """No output row depends on another batch element, on another query, or on a key or
  value it may not see (allow: (B, Tq, Tk) bool), bitwise, one input position
  perturbed at a time (`influence`); a content_routed record's queries and keys by
  their gradients instead (they legitimately move its chunks). Returns the outputs
  of (q, k, v) and of the `extra` inputs."""
  moved, out = influence(name, params, q, k, v, extra=extra, **opts)
  if record(name).content_routed:
    moved.update(dependence(name, params, q, k, v, **opts))
  own = np.einsum("bc,ij->bicj", np.eye(B), np.eye(q.shape[1])).astype(bool)
  seen = np.einsum("bc,bij->bicj", np.eye(B), allow).astype(bool)
  for x, may in (("q", own), ("k", seen), ("v", seen)):
    bad = np.argwhere(moved[x] & ~may)
    assert bad.size == 0, (f"{name}, {what}: output rows move with {x} they may not see "
                           f"(row b, i; input c, j): {bad[:4].tolist()}")
  assert moved["v"][seen].any(), f"{name}, {what}: the output moves with no value"
  return out


def names_an_argument(message, arguments) -> bool:
  """Whether the refusal `message` names one of `arguments` as a word (v, Dv, a
  per-token input, a parameter): what a refusal of a shape owes its reader."""
  return any(re.search(rf"(?<![\w.]){re.escape(a)}(?!\w)", message) for a in arguments)


def refused(name, q, k, v, params, **kw) -> str:
  """The request raises an AttentionError naming the variant (traced, not run);
  returns its message."""
  fn = call_fn(name)
  with pytest.raises(attention.AttentionError) as e:
    jax.eval_shape(lambda q, k, v, p: fn(q, k, v, **p, **kw), q, k, v, params)
  assert name in str(e.value), f"{name}: the refusal does not name the variant: {e.value}"
  return str(e.value)


# ---- the record, its parameters and options --------------------------------------------

def check_record(name):
  """The record's facts are all there, of the right kind, and agree with each other."""
  v = record(name)
  assert v.name == name and callable(v.fn) and callable(v.cost)
  assert v.paper and v.time and v.memory and v.summary
  assert v.masks in ("any", "key padding", "none")
  assert (v.decode is None) == (v.decode_impl is None)
  assert v.family in registry.FAMILIES
  assert v.score is None or callable(v.score)
  assert v.implied_weights is None or callable(v.implied_weights)
  assert isinstance(v.kernel_options, tuple)
  for opt in v.kernel_options:           # a kernel option is an option of fn
    assert opt in inspect.signature(v.fn).parameters, (name, opt)
    assert opt in v.options, (name, opt)
  for field in getattr(v.decode_impl, "needs", ()):
    assert getattr(v, field) is not None
  assert v.cross_attends == (v.cross and not v.positional)
  assert not (v.content_routed and v.cross), f"{name}: content routing needs one sequence"


def check_params_and_options(name):
  """Its ParamSpecs build parameters of the declared shapes (at two model sizes; the
  first drawn, finite), and every option it declares (`Variant.options`, read from
  its signatures) is taken by its function at its default, giving the same shapes; a
  misspelt option is answered with the closest valid names."""
  v = record(name)
  switched = set(v.switches)
  on = {o: True for o in v.switches.values()}
  for (h, dh, L) in ((H, D, T), (2, 16, 32)):
    shapes, rest = v.param_shapes(h, dh, L)
    assert set(shapes) == set(v.params) - switched and rest == {}
    shapes, rest = v.param_shapes(h, dh, L, on)      # every switch on: all of them
    assert set(shapes) == set(v.params), (name, set(shapes))
    assert rest == {o: x for o, x in on.items() if o not in v.params}
    for p, spec in v.params.items():
      assert shapes[p] == tuple(spec.shape(h, dh, L)), (p, shapes[p])
      x = jax.eval_shape(lambda key: spec.init(key, shapes[p], jnp.float32),
                         jax.random.key(0))
      assert x.shape == shapes[p] and x.dtype == jnp.float32, (p, x.shape, x.dtype)
  p = make_params(name)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in p.values())
  opts = v.options
  assert not set(opts) & ((set(v.params) - switched) | set(registry.CONTRACT_ARGS))
  assert all(opts[o] is False for o in on), f"{name}: a switch's default is not False"
  taken = {o for s in v.params.values() for o in s.options}     # they set shapes
  defaults = {o: d for o, d in opts.items() if d is not inspect.Parameter.empty}
  assert set(opts) - set(defaults) <= taken, f"{name}: options without a default"
  assert v.param_shapes(H, D, T, {o: defaults[o] for o in taken}) == v.param_shapes(H, D, T)
  q, k, val = make_qkv(name)
  call = lambda **o: jax.eval_shape(lambda q, k, val, p: call_fn(name)(q, k, val, **p, **o),
                                    q, k, val, p)
  assert call(**{o: d for o, d in defaults.items() if o not in taken}) == call()
  v.check_options(defaults)
  if opts:
    longest = max(opts, key=len)
    typo = longest[:-1] + ("x" if longest[-1] != "x" else "y")
    with pytest.raises(attention.AttentionError, match=f"'{name}'.*did you mean") as e:
      v.check_options({typo: 1})
    assert longest in str(e.value).split("did you mean")[1].split("?")[0], e.value
  for pname in set(v.params) - switched:
    with pytest.raises(attention.AttentionError, match="parameter.*not an option"):
      v.check_options({pname: 1})


@pytest.mark.parametrize("name", NAMES)
def test_record_params_and_options(name):
  check_record(name)
  check_params_and_options(name)


# ---- shapes, dtypes, heads, cross -------------------------------------------------------

def check_shapes(name):
  """out (B, Tq, Hq, Dv) in q's dtype, finite, for float32 and bfloat16 inputs (the
  parameters stay float32, as a model keeps them); GQA (Hkv = Hq/2) and MQA (Hkv = 1)
  equal MHA with each key/value head repeated over its group, and Hq % Hkv != 0 is
  refused; Tq != Tk (another sequence) works where the record says `cross`, with a
  key-padding mask if it honours one (a fully padded source gives zeros), else is
  refused naming Tq != Tk; a value head dim Dv != D works or is refused naming the
  argument at fault (`names_an_argument`: v, Dv, an input or a parameter)."""
  v = record(name)
  p = make_params(name)
  fn = call_fn(name)
  q, k, val = make_qkv(name)
  q1, k1, v1 = make_qkv(name, Hkv=1, seed=1)
  calls = [(q, k, val), make_qkv(name, dtype=jnp.bfloat16), (q1, k1, v1)]
  # MHA with repeated heads, for GQA and MQA, as one batch of 2 B
  mha = [jnp.concatenate([a.repeat(H // HKV, 2), b.repeat(H, 2)])
         for a, b in ((k, k1), (val, v1))]
  calls.append((jnp.concatenate([q, q1]), *mha))
  qc, kc, vc = make_qkv(name, Tk=6)                 # a target longer than its source
  if v.cross:
    calls.append((qc, kc, vc, dict(mask=key_padding(6)) if v.masks != "none" else {}))
  else:
    assert "Tq != Tk" in refused(name, qc, kc, vc, p)
  outs = outputs(name, p, *calls)
  for (q_, *_), out in zip(calls, outs):
    assert out.shape == q_.shape[:3] + (D,) and out.dtype == q_.dtype, (out.shape, out.dtype)
    assert np.all(np.isfinite(f32(out)))
  gqa, _, mqa, both = (f32(o) for o in outs[:4])
  if name not in GQA_NOT_REPEATED_MHA:
    np.testing.assert_allclose(gqa, both[:B], atol=2e-5, rtol=0, err_msg="GQA is not MHA")
    np.testing.assert_allclose(mqa, both[B:], atol=2e-5, rtol=0, err_msg="MQA is not MHA")
  if v.cross and v.masks != "none":
    assert all(np.all(f32(o)[1] == 0.0) for o in outs[4:]), "a padded source is not zeros"
  assert "multiple of key/value heads" in refused(name, *make_qkv(name, Hkv=3), p)
  qd, kd, vd = make_qkv(name, Dv=6)
  try:
    out = jax.eval_shape(lambda q, k, v, p: fn(q, k, v, **p), qd, kd, vd, p)
  except attention.AttentionError as e:
    assert name in str(e) and names_an_argument(str(e), ("v", "Dv", "value", *v.inputs,
                                                          *v.params)), e
  else:
    assert out.shape == (B, T, H, 6) and out.dtype == qd.dtype


@pytest.mark.parametrize("name", COMPUTED)
def test_shapes_dtypes_heads_and_cross(name):
  check_shapes(name)


# ---- masks, empty rows, causality --------------------------------------------------------

@pytest.mark.parametrize("name", names_where(lambda v: v.masks != "none"))
def test_masks_and_empty_rows(name):
  """For each mask kind the record honours (`masks`: a key-padding mask (B, 1, 1, Tk);
  with "any", also a per-query mask (B, 1, Tq, Tk)): no output row depends on a key or
  value it may not see, nor on another query or batch element, bitwise, one input
  position changed at a time (`check_influence`); a query row with no allowed key is
  exactly zero, never NaN. A mask kind beyond `masks` is refused (test_refusals)."""
  q, k, val = make_qkv(name)
  p = make_params(name)
  for label, mask in masks_for(record(name))[1:]:
    allow = allowed(T, T, False, mask)
    out, = check_influence(name, p, q, k, val, allow, f"{label} mask", mask=mask)
    empty = ~allow.any(-1)                                       # (B, Tq)
    assert empty.any() and np.all(np.isfinite(out)), label
    assert np.all(out[empty] == 0.0), f"{label} mask: rows with no allowed key are not zeros"


def perturb(x, where, seed):
  """x with unit noise added at the (B, T) positions `where`."""
  noise = np.random.default_rng(seed).standard_normal(x.shape, np.float32)
  return x + jnp.asarray(noise * np.asarray(where)[:, :, None, None], x.dtype)


def check_causality(name):
  """causal=True: no output row depends on a later query, key or value, nor on another
  batch element (one position changed at a time, `check_influence`), and changing all
  positions after t at once changes no output bit up to t (values; queries and keys
  too unless the record is content_routed, whose chunks they may move). With Tq != Tk
  (where the record says cross) causal is bottom-right aligned: Tq < Tk queries equal
  the last Tq rows of the full causal output, and with Tq > Tk the first Tq - Tk rows,
  which see no key, are zeros."""
  v = record(name)
  q, k, val = make_qkv(name)
  p = make_params(name)
  t = 3
  later = np.broadcast_to(np.arange(T) > t, (B, T))
  q2, k2, v2 = (perturb(x, later, i) for i, x in enumerate((q, k, val)))
  changes = {"values": (q, k, v2)}
  if not v.content_routed:
    changes["queries, keys and values"] = (q2, k2, v2)
  out, *outs = check_influence(name, p, q, k, val, allowed(T, T, True, None), "causal",
                               extra=list(changes.values()), causal=True)
  for what, out2 in zip(changes, outs):
    np.testing.assert_array_equal(out2[:, :t + 1], out[:, :t + 1],
                                  err_msg=f"later {what} changed earlier outputs")
    assert not np.allclose(out2[:, t + 1:], out[:, t + 1:]), "the probe changed nothing"
  if v.cross:
    # Tq = 3 < Tk = 8: the last 3 queries (a decode chunk). Tq = 8 > Tk = s = 5: 3
    # queries before the first key, then q's first s queries, which see what they see
    # in the full causal output.
    # Per-token inputs are rows of their queries: sliced and reordered with them.
    s, ins = 5, inputs_for(name, q, k)
    last = lambda x: x[:, -3:]
    rolled = lambda x: jnp.concatenate([x[:, s:], x[:, :s]], axis=1)
    rows = lambda f: dict(causal=True, **{n: f(x) for n, x in ins.items()})
    chunk, wide = map(f32, outputs(name, p, (last(q), k, val, rows(last)),
                                   (rolled(q), k[:, :s], val[:, :s], rows(rolled))))
    np.testing.assert_allclose(chunk, out[:, -3:], atol=1e-5, rtol=0,
                               err_msg="Tq < Tk: not bottom-right aligned")
    assert np.all(wide[:, :T - s] == 0.0), "Tq > Tk: queries before the first key not zero"
    np.testing.assert_allclose(wide[:, T - s:], out[:, :s], atol=1e-5, rtol=0,
                               err_msg="Tq > Tk: not bottom-right aligned")


@pytest.mark.parametrize("name", names_where(lambda v: v.causal))
def test_causality(name):
  check_causality(name)


# ---- refusals and dropout ---------------------------------------------------------------

def bad_shapes(name):
  """[(q, k, v shapes, what the message says)] at the variant's k and v widths
  (`kv_dims`): a k of half its width, k and v of other lengths, other batch sizes,
  a q of rank 3."""
  dk, dv = kv_dims(name)
  return [((1, 4, 2, 8), (1, 4, 2, dk // 2), (1, 4, 2, dv), "head dim"),
          ((1, 4, 2, 8), (1, 5, 2, dk), (1, 4, 2, dv), "positions"),
          ((2, 4, 2, 8), (1, 4, 2, dk), (1, 4, 2, dv), "batch"),
          ((4, 2, 8), (1, 4, 2, dk), (1, 4, 2, dv), "rank 4")]


@pytest.mark.parametrize("name", NAMES)
def test_refusals(name):
  """Every request the record says the variant cannot honour raises an AttentionError
  naming it: causal=True where causal is False, a mask kind beyond `masks`, attention
  dropout where dropout is False, an option it does not take; and bad shapes and bad
  masks are refused naming the axis or the dtype."""
  v = record(name)
  q, k, val = make_qkv(name)
  p = make_params(name)
  if not v.causal:
    assert "causal" in refused(name, q, k, val, p, causal=True)
  if v.masks == "key padding":
    assert "mask" in refused(name, q, k, val, p, mask=per_query_mask())
  if v.masks == "none":
    assert "mask" in refused(name, q, k, val, p, mask=key_padding())
  if not v.dropout:
    assert "dropout" in refused(name, q, k, val, p, dropout_rate=0.1,
                                dropout_rng=jax.random.key(0))
  assert "unexpected arguments: ['no_such_option']" in refused(name, q, k, val, p,
                                                               no_such_option=1)
  for qs, ks, vs, msg in bad_shapes(name):
    assert msg in refused(name, jnp.ones(qs), jnp.ones(ks), jnp.ones(vs), p)
  for o, why in v.refused_options.items():    # an option its kernel cannot take
    with pytest.raises(attention.AttentionError, match=f"'{name}'.*{o!r}") as e:
      v.check_options({o: True})
    assert why in str(e.value)
  if v.masks != "none":
    assert "bool" in refused(name, q, k, val, p, mask=np.ones((B, 1, 1, T)))
    assert "axis Tk" in refused(name, q, k, val, p, mask=np.ones((B, 1, 1, T + 1), bool))


@pytest.mark.parametrize("name", names_where(lambda v: v.dropout))
def test_dropout(name):
  """dropout_rate with a key drops probabilities (the output changes, stays finite);
  without a key, or at rate 0, it is off. (tests/attention/test_registry.py checks that it is
  unbiased.)"""
  q, k, val = make_qkv(name)
  key = jax.random.key(1)
  ref, no_key, zero, out = map(f32, outputs(
      name, make_params(name), (q, k, val), (q, k, val, dict(dropout_rate=0.5)),
      (q, k, val, dict(dropout_rate=0.0, dropout_rng=key)),
      (q, k, val, dict(dropout_rate=0.5, dropout_rng=key))))
  np.testing.assert_array_equal(no_key, ref)
  np.testing.assert_array_equal(zero, ref)
  assert np.all(np.isfinite(out)) and not np.allclose(out, ref)


# ---- decoding ---------------------------------------------------------------------------

PREFILL = 5    # the chunked run: a prefill of 5 positions, then one at a time


def check_decode(name, atol=1e-5, cache_dtype=None, params=None, after_prefill=True,
                 **opts):
  """Decoding through attention.decode_step equals the causal forward pass, token by
  token from an empty state and after a chunked prefill of PREFILL positions (the
  token steps in lax.scan, as generation runs them), all in one jitted program.
  params: the parameters (default `make_params`'s). after_prefill=False: the prefill's
  outputs are checked and its state has the empty state's structure, shapes and
  dtypes, but no token steps follow it (they are the token-by-token run's step code on
  a state like its own: one scan less to compile). Returns the final state."""
  p = make_params(name) if params is None else params

  def steps(state, q, k, v, ins):
    def body(state, x):
      x, i = x[:3], dict(zip(sorted(ins), x[3:]))
      o, state = attention.decode_step(state, *(a[:, None] for a in x), **p, **opts,
                                       **{n: a[:, None] for n, a in i.items()})
      return state, o[:, 0]
    xs = (q, k, v) + tuple(ins[n] for n in sorted(ins))
    state, outs = jax.lax.scan(body, state, tuple(jnp.moveaxis(a, 1, 0) for a in xs))
    return jnp.moveaxis(outs, 0, 1), state

  def run(q, k, v, p):
    init = lambda: attention.init_decode_state(
        name, batch=B, max_len=T, num_kv_heads=k.shape[2], head_dim=k.shape[-1],
        v_head_dim=v.shape[-1], dtype=q.dtype, cache_dtype=cache_dtype, **p, **opts)
    ins = inputs_for(name, q, k, opts)             # per-token inputs, sliced with q
    tokens, end = steps(init(), q, k, v, ins)
    first, state = attention.decode_step(init(), q[:, :PREFILL], k[:, :PREFILL],
                                         v[:, :PREFILL], **p, **opts,
                                         **{n: a[:, :PREFILL] for n, a in ins.items()})
    if after_prefill:
      rest, _ = steps(state, q[:, PREFILL:], k[:, PREFILL:], v[:, PREFILL:],
                      {n: a[:, PREFILL:] for n, a in ins.items()})
      first = jnp.concatenate([first, rest], axis=1)
    else:
      same = jax.tree.map(lambda a, b: (a.shape, a.dtype) == (b.shape, b.dtype),
                          state, init())
      assert jax.tree.structure(state) == jax.tree.structure(init()) and all(
          jax.tree.leaves(same)), f"{name}: the state after a prefill is not an empty one's"
    ref = call_fn(name)(q, k, v, causal=True, **p, **opts)
    return ref, tokens, first, end

  ref, tokens, chunked, state = jax.jit(run)(*make_qkv(name), p)
  np.testing.assert_allclose(tokens, ref, atol=atol, rtol=0, err_msg="token by token")
  np.testing.assert_allclose(chunked, ref[:, :chunked.shape[1]], atol=atol, rtol=0,
                             err_msg="prefill + tokens")
  assert state.name == name
  return state


# Every decoding variant but the exact kernels that decode through softmax's own path
# (`reference.decodes_as_softmax`: flash, flash_pallas, sdpa), whose decode is
# softmax's code, checked on softmax's row.
@pytest.mark.parametrize("name", names_where(
    lambda v: v.decode_impl is not None and not reference.decodes_as_softmax(v.name)))
def test_decode_equals_forward(name):
  check_decode(name, atol=EXACT_ATOL.get(name, 1e-5))


# ---- gradients --------------------------------------------------------------------------

@pytest.mark.parametrize("name", COMPUTED)
def test_gradients_finite(name):
  """Gradients w.r.t. q, k, v and the trainable parameters are finite and not all zero
  (the keys' may be: location's scores read positions, not keys), causal where
  supported and under the richest mask honoured, whose empty rows they cross."""
  v = record(name)
  p = make_params(name)
  mask = masks_for(v)[-1][1]
  train = {n: x for n, x in p.items() if v.params[n].trainable}
  fixed = {n: x for n, x in p.items() if n not in train}
  w = np.random.default_rng(7).standard_normal((H, D), np.float32)

  def loss(q, k, val, train):
    return jnp.sum(call_fn(name)(q, k, val, causal=v.causal, mask=mask, **train, **fixed) * w)

  grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*make_qkv(name), train)
  for n, g in {**dict(zip("qkv", grads[:3])), **grads[3]}.items():
    assert bool(jnp.all(jnp.isfinite(g))), f"{name}: d/d{n} is not finite"
    assert n == "k" or float(jnp.abs(g).max()) > 0, f"{name}: d/d{n} is zero everywhere"


# ---- parameters an option switches on ----------------------------------------------------

def switched_params(name):
  """(options with every switch on, the parameters under them): each switched one
  (`ParamSpec.when`: the learned `sinks`) moved off its initial value by unit noise,
  per head, so that the heads differ and a head mixed up with another shows."""
  v = record(name)
  on = {o: True for o in v.switches.values()}
  p = make_params(name, options=on)
  rng = np.random.default_rng(13)
  for n in v.switches:
    p[n] = p[n] + jnp.asarray(rng.standard_normal(p[n].shape, np.float32))
  return on, p


@pytest.mark.parametrize("name", names_where(lambda v: v.switches))
def test_switched_params(name):
  """A parameter that an option switches on (`ParamSpec.when`: softmax's, flash's and
  local's `sinks`): under the option it exists and the function takes it and moves
  with it; no output row moves with a key or value it may not see, causal and under
  the richest mask honoured (`check_influence`); decoding equals the forward pass with
  it; gradients w.r.t. it are finite and not all zero. Its values against a float64
  reference are its own test file's (tests/attention/test_sinks.py)."""
  v = record(name)
  on, p = switched_params(name)
  assert set(p) == set(v.params) and set(v.param_shapes(H, D, T)[0]) == set(p) - set(on)
  q, k, val = make_qkv(name)
  mask = masks_for(v)[-1][1]
  base = {n: x for n, x in p.items() if n not in v.switches}
  out, = check_influence(name, p, q, k, val, allowed(T, T, v.causal, mask), "switched on",
                         causal=v.causal, mask=mask)
  if v.decode_impl is not None:
    check_decode(name, atol=EXACT_ATOL.get(name, 1e-5), params=p)
  w = np.random.default_rng(7).standard_normal((H, D), np.float32)

  def loss(sw, q, k, val):
    return jnp.sum(call_fn(name)(q, k, val, causal=v.causal, mask=mask, **base, **sw) * w)

  sw = {n: p[n] for n in v.switches}
  grads, plain = jax.jit(lambda sw, q, k, val: (
      jax.grad(loss)(sw, q, k, val),
      call_fn(name)(q, k, val, causal=v.causal, mask=mask, **base)))(sw, q, k, val)
  assert not np.allclose(out, f32(plain)), f"{name}: switching {sorted(on)} on changes nothing"
  for n, g in grads.items():
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).min()) > 0, (name, n, g)


# ---- what the record claims about the function -------------------------------------------

# The exact family's claim holds up to each kernel's precision: float32 unless named
# here. fp8 rounds Q, K, V and P to e4m3 (relative rounding 2^-4; about 0.1 on these
# outputs). flash_mgpu computes float32 inputs in bfloat16 (Hopper's wgmma: Q, K, V
# and P rounded by 2^-8; about 1e-2 on these outputs). A new reduced-precision kernel
# names its tolerance here.
EXACT_ATOL = {"fp8": 0.15, "flash_mgpu": 0.03}


def check_score_and_family(name):
  """A declared score is what the variant computes: fn == softmax(score(q, k)) @ v (so
  the KV cache and the maps, which compute from the score, agree with it); and the
  "exact" family (results pages group by it) computes softmax attention. Causal where
  supported, with the richest mask honoured, GQA and the variant's parameters."""
  v = record(name)
  mask = masks_for(v)[-1][1]
  opts = dict(causal=v.causal, mask=mask)

  def refs(q, k, val, p):
    out = []
    if v.score is not None:
      out.append(score_attention(v.score, q, k, val, name=name, **opts, **p))
    if v.family == "exact":
      out.append(attention.get("softmax")(q, k, val, **opts))
    return out

  out, *ref = outputs(name, make_params(name), make_qkv(name) + (opts,), extra=refs)
  if v.score is not None:
    np.testing.assert_allclose(out, ref.pop(0), atol=EXACT_ATOL.get(name, 2e-5), rtol=0,
                               err_msg="fn is not softmax(score) @ v")
  if v.family == "exact":
    np.testing.assert_allclose(out, ref.pop(0), atol=EXACT_ATOL.get(name, 1e-5), rtol=0,
                               err_msg="an exact variant is not softmax attention")


@pytest.mark.parametrize("name", names_where(lambda v: v.score is not None
                                             or v.family == "exact"))
def test_score_and_family(name):
  check_score_and_family(name)


# ---- segment ids (packed rows) -----------------------------------------------------------

# Two packed rows of TS positions: (segment id, length) laid end to end; id 0 is the
# trailing padding, a segment of its own. The cross case packs TQS queries against
# them, query segment s attending key segment s.
TS, TQS = 12, 8
SEG_KEYS = (((1, 5), (2, 4), (3, 3)), ((1, 4), (2, 5), (0, 3)))
SEG_QUERIES = (((1, 3), (2, 3), (3, 2)), ((1, 2), (2, 4), (0, 2)))
# Options under which a variant's pattern is the same for a segment packed or alone:
# local's default window (128) would cover these rows whole, so a narrow one; sparse's
# default stride is ceil(sqrt(T)) of the row, which a shorter segment run alone would
# not share (its record says so).
# The options `check_segments` passes on its 12-token rows, where a default window or
# stride would cover the whole row (local's window of 128) and so test nothing: they
# make the pattern matter there. A variant's DEFAULT options are checked as well, on
# rows long enough for them to matter (`test_segments_with_default_options`).
SEGMENT_OPTIONS = {"local": dict(window=3), "sparse": dict(stride=3)}


def seg_ids(layout):
  """(B, T) int32 ids of a packed layout (rows of (id, length))."""
  return np.stack([np.repeat([s for s, _ in row], [n for _, n in row]) for row in layout]
                  ).astype(np.int32)


def seg_spans(layout):
  """{(row, id): (start, length)} of every segment of a packed layout."""
  out = {}
  for b, row in enumerate(layout):
    start = 0
    for s, n in row:
      out[b, s] = (start, n)
      start += n
  return out


def seg_padding_mask():
  """(B, 1, 1, TS) key padding inside segments: row 0 masks keys 2 and 7; row 1 masks
  its whole first segment (positions 0..3), whose queries then see no key (zeros)."""
  m = np.ones((B, 1, 1, TS), bool)
  m[0, ..., [2, 7]] = False
  m[1, ..., :4] = False
  return m


def seg_runs(v):
  """(label, causal, key-padding mask or None, cross) of the packed runs checked for the
  record `v`: non-causal with a key-padding mask inside the segments, causal (with the
  mask if causal-only), and cross (Tq != Tk, both sides' ids) where it cross-attends."""
  kp = seg_padding_mask()
  runs = []
  if not v.causal_only:
    runs.append(("non-causal, key padding", False, kp, False))
  if v.causal:
    runs.append(("causal" + (", key padding" if v.causal_only else ""), True,
                 kp if v.causal_only else None, False))
  if v.cross_attends and not v.causal_only:
    runs.append(("cross", False, None, True))
  return runs


def pack_with_alone(x, spans, T, width=None):
  """x (B, T_x, ...) packed rows -> (B + S, T, ...): the packed rows, then each of the S
  segments `spans` [(row, start, length)] alone, at the start of a row of its own,
  zero-padded at the end (np.float32; T_x == T)."""
  x = np.asarray(x)
  alone = np.zeros((len(spans),) + x.shape[1:], x.dtype)
  for r, (b, start, n) in enumerate(spans):
    alone[r, :n] = x[b, start:start + n]
  return np.concatenate([x, alone])


def segment_inputs(name, run, q, k, val, qc, w):
  """One batch for a packed run: rows 0..B-1 the packed rows (with their segment ids),
  then every segment alone in a row of its own (one segment id: the whole row), padded
  at the end, its padding keys masked (a causal run needs no mask: trailing padding is
  never seen) and its padding queries given a zero cotangent. Returns (q, k, v, w,
  kwargs, [(row, q start, q len, k start, k len, alone row)])."""
  _, causal, kp, cross = run
  qq = qc if cross else q
  Tq = qq.shape[1]
  kspans = seg_spans(SEG_KEYS)
  qspans = seg_spans(SEG_QUERIES) if cross else kspans
  members = [(b, *qspans[b, s], *kspans[b, s]) for (b, s) in sorted(qspans)]
  qsp = [(b, qs, ql) for b, qs, ql, _, _ in members]
  ksp = [(b, ks, kl) for b, _, _, ks, kl in members]
  ins = {n: pack_with_alone(a, qsp, Tq) for n, a in inputs_for(name, qq, k).items()}
  rows = (pack_with_alone(qq, qsp, Tq), pack_with_alone(k, ksp, TS),
          pack_with_alone(val, ksp, TS), pack_with_alone(w[:, :Tq], qsp, Tq))
  n = len(members)
  ones = lambda T: np.ones((n, T), np.int32)
  q_ids = np.concatenate([seg_ids(SEG_QUERIES if cross else SEG_KEYS), ones(Tq)])
  k_ids = np.concatenate([seg_ids(SEG_KEYS), ones(TS)])
  kw = dict(causal=causal, **ins)
  kw.update(dict(q_seg=q_ids, k_seg=k_ids) if cross else dict(q_seg=k_ids))
  if not causal or kp is not None:
    inside = np.ones((B, 1, 1, TS), bool) if kp is None else kp
    valid = np.arange(TS)[None, :] < np.array([kl for *_, kl in members])[:, None]
    alone = pack_with_alone(inside[:, 0, 0], ksp, TS)[B:] & valid
    kw["mask"] = np.concatenate([inside, alone[:, None, None]])
  return (*rows, kw, [(*m, B + r) for r, m in enumerate(members)])


def check_segments(name):
  """A packed row equals each of its segments run alone: the output rows and the
  gradients w.r.t. q, k and v (of a random projection of the output) at each segment's
  positions, at float32 rounding, for every run of `seg_runs` (GQA: Hkv < Hq; per-token
  inputs sliced with their segment). Each run is ONE call (`segment_inputs`: the
  packed rows and the segments alone in one batch), all runs one jitted program."""
  v = record(name)
  opts = SEGMENT_OPTIONS.get(name, {})
  p = make_params(name, max_len=TS)
  fn = call_fn(name)
  rng = np.random.default_rng(21)
  q, k, val = (f32(x) for x in make_qkv(name, Tq=TS, Tk=TS))
  qc = rng.standard_normal((B, TQS, H, D), np.float32)
  w = rng.standard_normal((B, TS, H, D), np.float32)
  runs = seg_runs(v)
  batches = [segment_inputs(name, run, q, k, val, qc, w) for run in runs]

  def run(arrays, p):
    res = []
    for (qb, kb, vb, wb, kw), batch in zip(arrays, batches):
      causal = batch[4]["causal"]
      out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, causal=causal, **kw, **p, **opts),
                         qb, kb, vb)
      res.append((out, vjp(wb.astype(out.dtype))))
    return res

  arrays = [(*b[:4], {a: x for a, x in b[4].items() if a != "causal"}) for b in batches]
  results = jax.jit(run)(arrays, p)
  for (label, *_), batch, (out, (dq, dk, dv)) in zip(runs, batches, results):
    for b, qs, ql, ks, kl, r in batch[5]:
      at = f"{name}, {label}: row {b}, segment at q {qs} (len {ql}), k {ks} (len {kl})"
      for what, x, y, tol in (("output", out[b, qs:qs + ql], out[r, :ql], 1e-5),
                              ("dq", dq[b, qs:qs + ql], dq[r, :ql], 2e-5),
                              ("dk", dk[b, ks:ks + kl], dk[r, :kl], 2e-5),
                              ("dv", dv[b, ks:ks + kl], dv[r, :kl], 2e-5)):
        np.testing.assert_allclose(f32(x), f32(y), atol=tol, rtol=1e-5,
                                   err_msg=f"{at}: {what} differs from the segment alone")
    assert np.abs(f32(dv[:B])).max() > 0, (name, label)


@pytest.mark.parametrize("name", COMPUTED)
def test_segments(name):
  """Segment ids (packed rows): a variant whose record takes them gives each segment
  of a packed row exactly what that segment gives alone, forward and backward
  (`check_segments`); a refusing record's function raises an AttentionError with its
  reason. Either way the record says which (`Variant.segments`)."""
  v = record(name)
  assert isinstance(v.segments, str) and str(v.segments), name
  if v.takes_segments:
    check_segments(name)
  else:
    q, k, val = make_qkv(name)
    msg = refused(name, q, k, val, make_params(name), q_seg=np.ones((B, T), np.int32))
    assert str(v.segments) in msg, (name, msg)


# One packed row for the default-options check: segments longer than local's default
# window (128) and than flash's default tiles, starting off the tiles' boundaries. Two
# segments do it (each adds a program's worth of calls run alone): the first (150)
# outgrows the window and a 128-row tile (fp8's, flash_pallas's), the second starts at
# 150, off every boundary, and crosses flash's causal query tile of 256 (the row, 280,
# is longer than one tile of each kernel).
LONG_SEGMENTS = (150, 130)


@pytest.mark.parametrize("name", names_where(lambda v: v.takes_segments))
def test_segments_with_default_options(name):
  """With the variant's DEFAULT options, each segment of a packed row gets what it gets
  run alone as a sequence of its own length, not padded to the row's (a default
  derived from the length, such as sparse's stride ceil(sqrt(T)), would differ there),
  forward, causal where the variant is; or the variant refuses segment ids under those
  defaults with an AttentionError that says why (never a silently different result).
  The narrow options of `check_segments` (SEGMENT_OPTIONS) must then be what makes it
  take them."""
  v = record(name)
  TL = sum(LONG_SEGMENTS)
  starts = np.cumsum((0,) + LONG_SEGMENTS[:-1])
  ids = np.repeat(np.arange(1, len(LONG_SEGMENTS) + 1), LONG_SEGMENTS)[None]
  p = make_params(name, max_len=TL)
  fn = call_fn(name)
  q, k, val = (x[:1] for x in make_qkv(name, Tq=TL, Tk=TL))
  causal = bool(v.causal)

  ins = inputs_for(name, q, k)                    # per-token inputs, sliced with q

  def run(q, k, val, p):
    packed = fn(q, k, val, causal=causal, q_seg=ids.astype(np.int32), **ins, **p)
    return packed, [fn(q[:, s:s + n], k[:, s:s + n], val[:, s:s + n], causal=causal,
                       **{a: x[:, s:s + n] for a, x in ins.items()}, **p)
                    for s, n in zip(starts, LONG_SEGMENTS)]

  try:
    packed, alone = jax.jit(run)(q, k, val, p)
  except attention.AttentionError as e:
    assert "segment ids" in str(e), (name, str(e))
    assert name in SEGMENT_OPTIONS, (
        f"{name} refuses segment ids under its default options ({e}) but the contract "
        "names no options under which it takes them (SEGMENT_OPTIONS)")
    return
  # a reduced-precision kernel rounds P at the running maximum of its tiles, which a
  # segment packed off the tile boundaries meets at other points: its own tolerance
  tol = EXACT_ATOL.get(name, 2e-5)
  for s, n, a in zip(starts, LONG_SEGMENTS, alone):
    np.testing.assert_allclose(
        f32(packed[:, s:s + n]), f32(a), atol=tol, rtol=1e-5,
        err_msg=f"{name}, default options: the segment at {s} (len {n}) of a packed row "
                "differs from the segment run alone")


def test_packing_with_options_that_refuse_segments_is_a_config_error():
  """A variant that takes segment ids only under some options (sparse: a given stride)
  is refused by the model config before training when packing meets the others, with
  the variant's reason; with the option given it is taken."""
  from models import ConfigError, ModelConfig
  cfg = ModelConfig(kind="lm", vocab_size=11, attention="sparse", d_model=16,
                    num_heads=2, d_ff=32, num_layers=1, max_len=64)
  with pytest.raises(ConfigError, match="config 'packing': .*'sparse' .*stride=None"):
    cfg.check_segments("packing")
  import dataclasses
  dataclasses.replace(cfg, attention_options={"sparse": {"stride": 8}}).check_segments()


def decode_paths() -> list:
  """One variant (the first by name) per distinct decode code path: its decode_impl's
  init and step functions, and for a KV cache the kind of score it computes from (a
  score function of its own, or a score class such as DotScore): the variants that
  share all three run the same decode code under x64."""
  def fn_key(f):
    f = getattr(f, "__func__", f)
    return (getattr(f, "__module__", None), getattr(f, "__qualname__", type(f).__name__))

  seen, out = set(), []
  for n in names_where(lambda v: v.decode_impl is not None
                       and not reference.decodes_as_softmax(v.name)):
    v = record(n)
    score = None if v.score is None else (
        fn_key(v.score) if inspect.isfunction(v.score) else type(v.score).__qualname__)
    key = (fn_key(v.decode_impl.init), fn_key(v.decode_impl.step), score)
    if key not in seen:
      seen.add(key)
      out.append(n)
  return out


# One variant per decode code path (`decode_paths`), not every decoding variant: the
# x64 check finds index dtypes in the decode code, which the variants of one path share
# (test_decode_equals_forward runs every one of them without x64).
@pytest.mark.parametrize("name", decode_paths())
def test_decode_equals_forward_under_x64(name):
  """The same with jax_enable_x64 on (researchers turn it on for float64 checks), the
  inputs still float32: Python ints become int64 there, so an index built from one
  must not meet the state's int32 position (dynamic_update_slice refuses mixed index
  types). Token by token and the prefill, without token steps after it
  (`after_prefill=False`: they would be the token run's step code on a state of the
  same dtypes; test_decode_equals_forward runs them without x64). x64 is process-wide: a
  context (`jax.enable_x64(True)`, jax's config state as a context manager), so other
  tests in the process keep it off."""
  with jax.enable_x64(True):
    check_decode(name, after_prefill=False)
