"""The KV-cache frontier: what each decode state holds per token, what a decode step
costs per token at 1k / 4k / 16k positions of context, and what the cache costs in
accuracy against exact float32 softmax attention: `results/kv_cache/` (issue 79).

Rows (`ROWS`), one attention layer, batch 1, Hq query heads of d_h, float32 unless
the cache says otherwise:
  MHA, GQA(4), MQA   softmax with Hq, 4, 1 key/value heads and the float KV cache
  MLA (d_c = 4 d_h)  mla with one latent group: the paper's ratio, d_r = d_h / 2
  MLA (d_c = d_h)    a smaller latent
  int8, fp8 caches   softmax, Hq heads, keys and values stored in 1 byte + a float32
                     scale per (position, head)
  sliding window     local, Hq heads, the rolling cache of the last w positions

Per row and context L (`measure`):
  * bytes: the state of capacity L built by `attention.init_decode_state`, summed
    over its arrays (`attention.state_nbytes`), and the formula's prediction
    (`attention.decode_state_bytes`); bytes per token = (bytes at the largest L -
    bytes at the smallest) / their difference (0 for the window: flat).
  * µs per token: `steps` single-token decode steps in one jitted scan from a state
    holding L positions of random keys and values (written directly: building them
    by a prefill would cost O(L²)), the state donated and made afresh before each
    timed call; every row and context timed once per round, `rounds` interleaved
    rounds (`studies.core.timing.run_times_fresh`), the median per token.
  * error: the first step's output against float64 softmax attention over the same
    L + 1 tokens' keys and values (for MLA, its keys and values materialised from
    the latents as the paper defines them), relative RMS. GQA, MQA and MLA compute
    their own attention exactly (rounding only); int8 and fp8 round the cache; the
    window drops every key older than w (on random keys, whose attention is diffuse,
    that truncation is most of the output).
  * the compiled scan's temporaries (XLA's memory plan).
"""
from __future__ import annotations

import dataclasses
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

import attention
from attention import mla as MLA
from attention.core import kv_cache as KV
from attention.core import positions as P
from studies.core import pages, plots, timing

KiB = 1024


@dataclasses.dataclass(frozen=True)
class Row:
  """One cache on the page: variant, key/value heads, cache dtype and options."""
  label: str
  name: str
  kv_heads: int | None          # None: Hq
  cache_dtype: str | None = None
  options: tuple = ()           # (option, value) pairs; latent_dim as a multiple of d_h
  error: bool = True            # measure the error against float64 softmax (a row of a
                                # variant that is not softmax's approximation: False)


ROWS = (
    Row("MHA", "softmax", None),
    Row("GQA(4)", "softmax", 4),
    Row("MQA", "softmax", 1),
    Row("MLA, d_c = 4 d_h", "mla", 1, options=(("latent_mult", 4),)),
    Row("MLA, d_c = d_h", "mla", 1, options=(("latent_mult", 1),)),
    Row("int8 cache", "softmax", None, "int8"),
    Row("fp8 cache", "softmax", None, "fp8"),
    Row("sliding window", "local", None, options=(("window", 512),)),
)


@dataclasses.dataclass(frozen=True)
class Setup:
  """The sizes of one run: Hq heads of d_h, contexts, steps per timed call, rounds."""
  heads: int = 8
  head_dim: int = 64
  contexts: tuple = (1024, 4096, 16384)
  steps: int = 16
  rounds: int = 5
  batch: int = 1


def row_options(row: Row, s: Setup) -> dict:
  """The variant options of `row` (mla's latent_dim from its multiple of d_h)."""
  opts = dict(row.options)
  if "latent_mult" in opts:
    opts["latent_dim"] = opts.pop("latent_mult") * s.head_dim
  return opts


def dims(row: Row, s: Setup) -> dict:
  """{"Hkv", "Dk", "Dv", "options"}: the k/v heads and widths the row's variant caches
  (`Variant.kv_dims`) and its options."""
  opts = row_options(row, s)
  dk, dv = attention.variant(row.name).kv_dims(s.head_dim, opts)
  return dict(Hkv=row.kv_heads or s.heads, Dk=dk, Dv=dv, options=opts)


def _state_args(row: Row, s: Setup, L: int) -> dict:
  d = dims(row, s)
  opts = {k: v for k, v in d["options"].items() if k != "latent_dim"}
  return dict(batch=s.batch, max_len=L, num_kv_heads=d["Hkv"], head_dim=d["Dk"],
              v_head_dim=d["Dv"], dtype=jnp.float32, cache_dtype=row.cache_dtype, **opts)


def state_bytes(row: Row, s: Setup, L: int) -> dict:
  """{"measured": nbytes of the arrays of an empty state of capacity L,
  "predicted": `attention.decode_state_bytes` of the same arguments} (ints; predicted
  None where the variant's DecodeImpl declares no state_bytes formula)."""
  a = _state_args(row, s, L)
  st = jax.eval_shape(lambda: attention.init_decode_state(row.name, **a))
  try:
    predicted = attention.decode_state_bytes(row.name, **a)
  except attention.AttentionError:        # the variant's decode state gives no formula
    predicted = None
  return dict(measured=attention.state_nbytes(st), predicted=predicted)


def formula(row: Row, s: Setup) -> str:
  """The bytes per cached position of `row`, in symbols and numbers."""
  d = dims(row, s)
  if row.name == "local":
    return f"0 past w = {d['options'].get('window', 'the default window')} (w Hkv (D + Dv) 4 in all)"
  if row.name == "mla":
    return f"Hkv (d_c + d_r) 4 = {d['Hkv']}·({d['Dv']} + {d['Dk']})·4"
  if row.cache_dtype:
    return f"Hkv (D + Dv) 1 + 2 Hkv 4 = {d['Hkv']}·{d['Dk'] + d['Dv']} + 8·{d['Hkv']}"
  return f"Hkv (D + Dv) 4 = {d['Hkv']}·{d['Dk'] + d['Dv']}·4"


# ---- states holding L positions, and the exact reference --------------------------------

def tokens(row: Row, s: Setup, L: int, seed=0) -> dict:
  """Random float32 q (B, T, Hq, d_h), k (B, T, Hkv, Dk), v (B, T, Hkv, Dv) of T = L +
  steps tokens (the first L are in the state, the rest are decoded), and mla's
  parameters and q_rope (another variant's: its record's `params` initialised as the
  models do and its per-token `inputs` drawn at random)."""
  d = dims(row, s)
  rng = np.random.default_rng(seed)
  T = L + s.steps
  n = lambda *sh: jnp.asarray(rng.standard_normal(sh, np.float32))
  x = dict(q=n(s.batch, T, s.heads, s.head_dim), k=n(s.batch, T, d["Hkv"], d["Dk"]),
           v=n(s.batch, T, d["Hkv"], d["Dv"]), params={}, per_token={})
  if row.name == "mla":
    dc = d["Dv"]
    x["params"] = {p: n(s.heads, dc, s.head_dim) / math.sqrt(dc) for p in ("w_uk", "w_uv")}
    x["per_token"] = {"q_rope": n(s.batch, T, s.heads, d["Dk"])}
    return x
  var = attention.variant(row.name)     # any other variant: its record's params and inputs
  x["params"] = {p: ps.init(jax.random.key(3), ps.shape(s.heads, s.head_dim, T),
                            jnp.float32) for p, ps in var.params.items()
                 if ps.when is None}
  x["per_token"] = {i: n(*shape) for i, shape in
                    var.input_shapes(s.batch, T, s.heads, d["Hkv"], s.head_dim).items()}
  return x


def filled_state(row: Row, s: Setup, L: int, x: dict):
  """The row's decode state of capacity L + steps holding positions 0 .. L-1 of x's
  keys and values, written directly (a KV cache quantises them as its step would; the
  window keeps the last w in its rolling slots, p % w; mla stores latents and
  RoPE-rotated keys); a recurrent state (linear, performer, the gated family) is
  prefilled by one chunked `decode_step` over the L positions, which is O(L)."""
  a = _state_args(row, s, L + s.steps)
  st = attention.init_decode_state(row.name, **a)
  k, v = x["k"][:, :L], x["v"][:, :L]
  if not isinstance(st, (MLA.LatentCache, KV.KVCache)):     # a recurrent state: O(L)
    head = jax.tree.map(lambda t: t[:, :L], x["per_token"])
    return _prefill(st, x["q"][:, :L], k, v, x["params"], head)
  if isinstance(st, MLA.LatentCache):
    kr = P.rotate(k, jnp.arange(L)[None], P.make("rope", base=MLA.DEFAULT_BASE), 1)
    put = lambda buf, t: buf.at[:, :, :L].set(jnp.swapaxes(t, 1, 2))
    return dataclasses.replace(st, latent=put(st.latent, v), k_rope=put(st.k_rope, kr),
                               pos=jnp.int32(L))
  W = st.capacity
  if W >= L:
    return KV.append(st, k, v)
  keep = np.arange(L - W, L)                          # the last W positions, slot p % W
  order = keep[np.argsort(keep % W)]
  st = KV.append(st, k[:, order], v[:, order])
  return dataclasses.replace(st, pos=jnp.int32(L))


@jax.jit
def _prefill(st, q, k, v, params, per_token):
  return attention.decode_step(st, q, k, v, **params, **per_token)[1]


def exact(row: Row, s: Setup, L: int, x: dict) -> np.ndarray:
  """float64 softmax attention of the query at position L over keys 0 .. L (B, Hq,
  d_h): the same tokens' keys and values, unrounded and unwindowed; for mla the keys
  [c W_UK; RoPE(k^R)] and values c W_UV materialised per head."""
  f = lambda a: np.asarray(a, np.float64)
  q, k, v = f(x["q"][:, L]), f(x["k"][:, :L + 1]), f(x["v"][:, :L + 1])
  G = s.heads // k.shape[2]
  k, v = np.repeat(k, G, axis=2), np.repeat(v, G, axis=2)      # (B, L+1, Hq, ·)
  scale = 1 / math.sqrt(q.shape[-1])
  if row.name == "mla":
    spec = P.make("rope", base=MLA.DEFAULT_BASE)
    pos = jnp.arange(L + 1)[None]
    kr = f(P.rotate(jnp.asarray(x["k"][:, :L + 1]), pos, spec, 1))
    qr = f(P.rotate(jnp.asarray(x["per_token"]["q_rope"][:, L:L + 1]), pos[:, L:], spec,
                    1))[:, 0]
    wk, wv = f(x["params"]["w_uk"]), f(x["params"]["w_uv"])
    kc, vc = np.einsum("bjhc,hcd->bjhd", v, wk), np.einsum("bjhc,hcd->bjhd", v, wv)
    q = np.concatenate([q, qr], -1)
    k, v = np.concatenate([kc, np.repeat(kr, G, axis=2)], -1), vc
    scale = 1 / math.sqrt(q.shape[-1])
  logits = np.einsum("bhd,bjhd->bhj", q, k) * scale
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  return np.einsum("bhj,bjhd->bhd", p, v)


def steps_fn(row: Row, s: Setup):
  """jit(state, x) -> (state, outputs (steps, B, Hq, d_h)): `steps` single-token decode
  steps in one scan, the state donated (updated in place, as generation runs)."""
  opts = {k: v for k, v in row_options(row, s).items() if k != "latent_dim"}

  def run(st, q, k, v, params, per_token):
    def body(st, xs):
      q1, k1, v1, i1 = jax.tree.map(lambda a: a[:, None], xs)
      out, st = attention.decode_step(st, q1, k1, v1, **params, **opts, **i1)
      return st, out[:, 0]
    xs = jax.tree.map(lambda a: jnp.moveaxis(a, 1, 0), (q, k, v, per_token))
    return jax.lax.scan(body, st, xs)
  return jax.jit(run, donate_argnums=0)


def measure(s: Setup, command: str, rows=ROWS, log=print) -> dict:
  """The page's record: {"run", "setup", "peak", "rows": {label: {...}}} (see the
  module docstring for each figure; a row of `error=False` gets no error figures).

  s: the sizes (Setup); command: the command line the record names; rows: the Rows
  to measure (any variant with a decode state); log: where progress lines go."""
  peak = timing.matmul_peak(1024)
  log(f"matmul gauge {timing.peak_text(peak)}")
  res, cases = {}, []
  for row in rows:
    d = dims(row, s)
    r = res[row.label] = dict(name=row.name, cache_dtype=row.cache_dtype, Hkv=d["Hkv"],
                              Dk=d["Dk"], Dv=d["Dv"], options=d["options"],
                              formula=formula(row, s), bytes={}, us={}, error={},
                              temp_bytes={})
    for L in s.contexts:
      r["bytes"][L] = state_bytes(row, s, L)
    for L in s.contexts:
      x = tokens(row, s, L)
      run = steps_fn(row, s)
      tail = lambda a: a[:, L:]
      args = (tail(x["q"]), tail(x["k"]), tail(x["v"]), x["params"],
              jax.tree.map(tail, x["per_token"]))
      st = filled_state(row, s, L, x)
      r["temp_bytes"][L] = timing.memory_plan(run.lower(st, *args).compile())["temp_bytes"]
      _, outs = run(st, *args)                       # compiles; the first step's output
      if row.error:
        ref = exact(row, s, L, x)
        got = np.asarray(outs[0], np.float64)
        r["error"][L] = float(np.sqrt(np.mean((got - ref) ** 2) / np.mean(ref ** 2)))
      cases.append((row.label, L, run, (lambda row=row, L=L, x=x: filled_state(row, s, L, x)),
                    args))
      log(f"{row.label:18s} L={L:6d}: {r['bytes'][L]['measured']:>10d} B state"
          + (f", error {r['error'][L]:.2e}" if L in r["error"] else ""))
  ts = {(lab, L): [] for lab, L, *_ in cases}
  for i in range(s.rounds):                           # interleaved rounds
    for lab, L, run, make, args in cases:
      ts[lab, L] += timing.run_times_fresh(lambda: (jax.block_until_ready(make()), *args),
                                           lambda st, *a: run(st, *a), 1)
  for lab, L, *_ in cases:
    res[lab]["us"][L] = float(np.median(ts[lab, L])) / s.steps * 1e6
    log(f"{lab:18s} L={L:6d}: {res[lab]['us'][L]:8.1f} us/token")
  peak_end = timing.matmul_peak(1024)
  return dict(run=pages.run_record(command), setup=dataclasses.asdict(s),
              peak=[peak, peak_end], rows=res)


def per_token(r: dict, contexts) -> float:
  """Bytes per cached position: the growth of the measured state from the smallest to
  the largest context over their difference."""
  lo, hi = min(contexts), max(contexts)
  b = pages.keyed(r["bytes"])
  return (b[hi]["measured"] - b[lo]["measured"]) / (hi - lo)


def predicted_per_token(r: dict, contexts) -> float:
  lo, hi = min(contexts), max(contexts)
  b = pages.keyed(r["bytes"])
  return (b[hi]["predicted"] - b[lo]["predicted"]) / (hi - lo)


# ---- whole stacks, hybrids beside pure ones: computed, not timed ---------------------------

# (label, the decoder's layer_attention, Hq per key/value head: 1 MHA, 4 GQA(4)); each a
# decoder of HYBRID_LAYERS layers at the page's sizes, local's window HYBRID_WINDOW
# (gpt-oss's band); configs/shakespeare.py's gpt_oss and qwen3_next presets at scale
HYBRID_LAYERS = 4
HYBRID_WINDOW = 128
HYBRIDS = (
    ("softmax", "softmax", 1),
    ("local (w = 128)", "local", 1),
    ("gated_deltanet", "gated_deltanet", 1),
    ("gpt-oss style", "local,softmax", 1),
    ("Qwen3-Next style", "gated_deltanet*3,softmax+attn_gate", 1),
    ("gpt-oss style, GQA(4)", "local,softmax", 4),
    ("Qwen3-Next style, GQA(4)", "gated_deltanet*3,softmax+attn_gate", 4),
)


def hybrid_config(pattern: str, s: dict, group: int = 1):
  """The ModelConfig of a HYBRID_LAYERS-layer decoder of `pattern` at the sizes of the
  setup `s` (Hq heads of d_h, d_model = Hq d_h, Hq / group key/value heads)."""
  from models.config import ModelConfig
  return ModelConfig(d_model=s["heads"] * s["head_dim"], num_heads=s["heads"],
                     num_kv_heads=max(1, s["heads"] // group), num_layers=HYBRID_LAYERS,
                     max_len=max(s["contexts"]), layer_attention=pattern,
                     attention_options={"local": {"window": HYBRID_WINDOW}}).validate()


def hybrid_stacks(s: dict) -> dict:
  """{label: {"layer_attention", "Hkv", "layers": each layer's variant, "bytes":
  {L: the whole decoder's decode state at L positions, batch s["batch"]}}} for
  HYBRIDS, by the model-level count (`models.count.decode_state_bytes`)."""
  from models.count import decode_state_bytes
  out = {}
  for label, pattern, group in HYBRIDS:
    cfg = hybrid_config(pattern, s, group)
    out[label] = dict(layer_attention=pattern, Hkv=cfg.kv_heads,
                      layers=[x.name for x in cfg.layer_specs("decoder_attention")],
                      bytes={L: decode_state_bytes(cfg, L, batch=s["batch"])
                             for L in s["contexts"]})
  return out


def _hybrid_lines(stacks: dict, ctx, kl) -> list[str]:
  lo, hi = min(ctx), max(ctx)
  grow = lambda r: (pages.keyed(r["bytes"])[hi] - pages.keyed(r["bytes"])[lo]) / (hi - lo)
  base = stacks.get("softmax")
  lines = [
      "",
      "## Whole stacks: hybrids beside pure ones",
      "",
      f"A decoder of {HYBRID_LAYERS} layers at the sizes above (d_model = Hq d_h), each "
      "layer's decode state by its own variant (`model.layer_attention`, the pattern "
      "repeated over the layers), summed by the model-level count "
      "`models.count.decode_state_bytes`: the variant's formula, a recurrent state by "
      "its shapes, and the q/k/v convolutions' last 3 inputs where the layer has them "
      "(gated_deltanet's published layer). Computed, not timed: `--page_only` writes "
      "them, and `tests/studies/test_kv_cache.py` checks each against the arrays of "
      f"the model's `init_state`. local's window is {HYBRID_WINDOW} (gpt-oss's band); "
      "sinks and gates hold no decode state. The two styles are "
      "`configs/shakespeare.py`'s `gpt_oss` and `qwen3_next` presets at this width. "
      f"Per token: the growth from L = {lo} to {hi} over {hi - lo} positions.",
      ""]
  lines += pages.table(
      ["stack", "layers", "Hkv", "bytes per token", "vs softmax"]
      + [f"state at {kl(L)} (KiB)" for L in ctx] + [f"vs softmax at {kl(hi)}"],
      [[k, ", ".join(r["layers"]), r["Hkv"], f"{grow(r):g}",
        f"{grow(r) / grow(base):.3f}" if base else ""]
       + [f"{pages.keyed(r['bytes'])[L] / KiB:,.1f}" for L in ctx]
       + [f"{pages.keyed(r['bytes'])[hi] / pages.keyed(base['bytes'])[hi]:.3f}"
          if base else ""]
       for k, r in stacks.items()])
  return lines


# ---- the page -----------------------------------------------------------------------------


