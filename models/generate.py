"""Autoregressive generation inside one jitted `lax.scan`: sampling, greedy, beam search.

  generate(model, prompt_BP, steps=N, key=key, temperature=1.0, top_k=0, top_p=1.0,
           mode="cache", cache_dtype=None)        # TransformerLM: text or pixels
  translate(model, src_BS, max_len=N, beam_size=4, alpha=0.6)   # EncoderDecoder

Two decode modes, chosen per call:
  cache      every layer keeps its variant's decode state (`attention.decode_step`):
             a KV cache (fp or int8) for the softmax family, the (S, Z) state for
             linear/performer. The prompt is prefilled in one chunk; each new token
             then costs one step, with no recomputation of the prefix.
  recompute  no state: each new token runs the full parallel forward pass. It is the
             baseline of Katharopoulos et al.'s generation-speed table. It runs over a
             fixed (B, P + N) buffer with causal masking, because a growing buffer
             would compile once per length; positions after t are masked and do not
             change token t, but each step pays for the full length (about twice the
             average cost of a growing prefix).
Variants without a decode state (reformer, linformer) generate only with
mode="recompute"; asking for "cache" fails before anything is traced. `best_mode`
names the mode a model decodes fastest with.

Randomness: token i is drawn with jax.random.fold_in(key, i), so both modes give
the same samples under the same key (up to float rounding of the log-probs).
The model runs in eval mode (no dropout); the caller's model is not modified.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

import attention

MODES = ("cache", "recompute")


class Sampler(NamedTuple):
  """How to pick a token from log-probs: temperature 0 is greedy (argmax)."""
  temperature: float = 1.0
  top_k: int = 0          # keep the k most likely tokens (0: all)
  top_p: float = 1.0      # keep the smallest set with probability >= top_p (nucleus)


def pick(logp_BV, key, s: Sampler):
  """Samples one token per row from log-probs (B, V) -> (B,) int32."""
  if s.temperature == 0:
    return jnp.argmax(logp_BV, axis=-1).astype(jnp.int32)
  z = logp_BV / s.temperature
  if s.top_k:
    kth = jax.lax.top_k(z, s.top_k)[0][..., -1:]
    z = jnp.where(z < kth, -jnp.inf, z)
  if s.top_p < 1.0:
    zs = jnp.sort(z, axis=-1)[..., ::-1]
    p = jax.nn.softmax(zs, axis=-1)
    before = jnp.cumsum(p, axis=-1) - p          # mass of strictly more likely tokens
    thr = jnp.min(jnp.where(before < s.top_p, zs, jnp.inf), axis=-1, keepdims=True)
    z = jnp.where(z < thr, -jnp.inf, z)
  return jax.random.categorical(key, z, axis=-1).astype(jnp.int32)


def check_mode(model, mode: str):
  """Raises ValueError before tracing if `mode` is unknown or a layer cannot decode."""
  if mode not in MODES:
    raise ValueError(f"decode mode must be one of {MODES}, got {mode!r}")
  names = model.cfg.role_variants("decoder_attention")   # the only layers with a state
  name = next((n for n in names if attention.variant(n).decode_impl is None), None)
  if mode == "cache" and name is not None:
    raise ValueError(
        f"attention variant '{name}' has no decode state, so mode='cache' cannot "
        f"generate with it; use mode='recompute' (variants with a decode state: "
        + ", ".join(n for n in attention.names()
                    if attention.variant(n).decode_impl is not None) + ")")


def best_mode(model) -> str:
  """'cache' where every decoder layer's attention has a decode state, else 'recompute'."""
  names = model.cfg.role_variants("decoder_attention")
  return ("cache" if all(attention.variant(n).decode_impl is not None for n in names)
          else "recompute")


class _Decoder(NamedTuple):
  start: callable      # () -> (logp (R, V) for the first new token, dstate)
  advance: callable    # (dstate, tok (R,), i) -> (logp (R, V) for token i + 1, dstate)


def _decoder(model, prefix_RP, fed, mode, cache_dtype, ctx):
  """The incremental (cache) or recompute view of `model` after a prefix of P ids,
  sized for `fed` more ids fed back by `advance` (positions P .. P + fed - 1)."""
  R, P = prefix_RP.shape
  if mode == "cache":
    def start():
      state = model.init_state(R, P + fed, *ctx, cache_dtype=cache_dtype)
      logp, state = model.step_logp(prefix_RP, state, 0)
      return logp[:, -1], state

    def advance(state, tok, i):
      logp, state = model.step_logp(tok[:, None], state, P + i)
      return logp[:, 0], state
  else:
    def start():
      buf = jnp.zeros((R, P + fed), jnp.int32).at[:, :P].set(prefix_RP)
      return model.forward_logp(buf, *ctx, at=P - 1), buf

    def advance(buf, tok, i):
      buf = jax.lax.dynamic_update_slice_in_dim(buf, tok[:, None], P + i, axis=1)
      # the head (a 256-way mixture for pixels) only at the position sampled: over
      # the whole buffer it cost 80% of a step of the small MNIST model.
      return model.forward_logp(buf, *ctx, at=P + i), buf
  return _Decoder(start, advance)


# `unroll` of generate / translate: token steps per trip of the decode scans
# (`lax.scan(unroll=...)`; 1: none). On a GPU each trip of a loop is decided on the host
# (jax-ml/jax#2491), so unrolling may speed generation there, at the price of compiling
# the model's decode step that many times; `scripts/gpu_probe.py gen` measures it.
# Unmeasured so far, so the default stays 1. It changes the compiled loop, never the
# tokens drawn.


def _sample_loop(dec: _Decoder, key, steps, sampler, eos_id, pad_id, unroll=1):
  """Draws `steps` tokens; after eos_id a row emits pad_id. Returns (R, steps) int32.

  The decoder must be sized for steps - 1 fed ids: the last token is drawn and not
  fed back, so no position beyond prefix + steps - 1 is ever computed (a model never
  runs past the positions it was trained on, e.g. `location`'s per-position weights)."""
  logp, state = dec.start()
  done = jnp.zeros(logp.shape[:1], bool)
  if steps == 0:
    return jnp.zeros((logp.shape[0], 0), jnp.int32)

  def draw(logp, done, i):
    tok = jnp.where(done, pad_id, pick(logp, jax.random.fold_in(key, i), sampler))
    return tok, (done | (tok == eos_id)) if eos_id is not None else done

  def body(carry, i):
    logp, state, done = carry
    tok, done = draw(logp, done, i)
    logp, state = dec.advance(state, tok, i)
    return (logp, state, done), tok

  (logp, _, done), toks = jax.lax.scan(body, (logp, state, done), jnp.arange(steps - 1),
                                       unroll=max(1, min(unroll, steps - 1)))
  last, _ = draw(logp, done, steps - 1)
  return jnp.concatenate([toks.T, last[:, None]], axis=1)


_EVAL_GRAPHDEFS: dict = {}   # graphdef -> its eval-mode graphdef (None: state differs)


def _eval_split(model):
  """(graphdef, state) of an eval-mode copy sharing the arrays of `model`.

  Eval mode changes only static attributes (dropout's `deterministic`), so the eval
  graphdef of a graphdef is computed once (merge, eval, split) and cached: each
  generate call then walks the model's graph once, not three times. That walk is host
  time in front of every call, which a GPU waits through."""
  g, s = nnx.split(model)
  if g not in _EVAL_GRAPHDEFS:
    if len(_EVAL_GRAPHDEFS) >= 64:
      _EVAL_GRAPHDEFS.pop(next(iter(_EVAL_GRAPHDEFS)))
    m = nnx.merge(g, s)
    m.eval()
    ge, se = nnx.split(m)
    same = jax.tree.structure(se) == jax.tree.structure(s)
    _EVAL_GRAPHDEFS[g] = ge if same else None
  ge = _EVAL_GRAPHDEFS[g]
  if ge is None:   # eval mode changed the state's structure: the copy's own split
    m = nnx.merge(g, s)
    m.eval()
    return nnx.split(m)
  return ge, s


@functools.partial(jax.jit, static_argnames=("graphdef", "steps", "mode", "cache_dtype",
                                             "sampler", "unroll"))
def _generate_lm(graphdef, state, prompt_BP, key, *, steps, mode, cache_dtype, sampler,
                 unroll=1):
  model = nnx.merge(graphdef, state)
  prefix = jnp.concatenate([model.prefix(prompt_BP.shape[0]), prompt_BP], axis=1)
  dec = _decoder(model, prefix, max(steps - 1, 0), mode, cache_dtype, ())
  return _sample_loop(dec, key, steps, sampler, None, 0, unroll)


def generate(model, prompt_BP, *, steps: int, key, temperature=1.0, top_k=0, top_p=1.0,
             mode="cache", cache_dtype=None, unroll: int = 1):
  """Continues each prompt of a TransformerLM by `steps` tokens.

  prompt_BP: (B, P) int token ids (P may be 0): text, or the first P pixels of an
    image for occluded completion. Returns (B, P + steps) int32: prompt then samples.
  temperature 0 is greedy; top_k / top_p truncate the distribution before sampling.
  cache_dtype: None, "int8" or "fp8" (the softmax family's quantised KV cache).
  unroll: token steps per trip of the decode loop (1: none; for GPUs, see the note
    above `_sample_loop`): the same tokens, another compiled program.
  """
  check_mode(model, mode)
  prompt_BP = jnp.asarray(prompt_BP, jnp.int32)
  total = prompt_BP.shape[1] + steps
  if total > model.cfg.max_len:
    raise ValueError(f"prompt ({prompt_BP.shape[1]}) + steps ({steps}) = {total} exceeds "
                     f"the model's max_len {model.cfg.max_len}")
  g, s = _eval_split(model)
  new = _generate_lm(g, s, prompt_BP, key, steps=steps, mode=mode, cache_dtype=cache_dtype,
                     sampler=Sampler(float(temperature), int(top_k), float(top_p)),
                     unroll=_unroll(unroll))
  return jnp.concatenate([prompt_BP, new], axis=1)


def _unroll(unroll) -> int:
  if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
    raise ValueError(f"unroll must be a positive int (token steps per loop trip), "
                     f"got {unroll!r}")
  return unroll


# ---- encoder-decoder: greedy / sampling and beam search ----------------------------

def _gather_rows(tree, rows, R):
  """Selects rows of every leaf with a leading axis of size R (decode states, caches)."""
  return jax.tree.map(lambda x: x[rows] if x.ndim and x.shape[0] == R else x, tree)


def _beam_loop(dec: _Decoder, B, K, steps, alpha, eos_id, pad_id, unroll=1):
  """Beam search with the GNMT length penalty ((5 + len) / 6) ** alpha.

  Rows of the decoder are (batch, beam) flattened to B * K. A hypothesis that emits
  eos_id is finished: it leaves the beam with score log P / penalty(len), and the K
  best finished ones are kept. Returns (B, steps) tokens of the best hypothesis (pad
  after its eos) and its score (B,).
  """
  logp, state = dec.start()
  V = logp.shape[-1]
  neg = jnp.float32(-1e9)
  alive_seq = jnp.full((B, K, steps), pad_id, jnp.int32)
  # float32 throughout (explicit dtypes: under jax_enable_x64 jnp.zeros and a float
  # built from the int64 step are float64, and the scan's carry must keep its type)
  alive_lp = jnp.tile(jnp.concatenate([jnp.zeros(1, neg.dtype), jnp.full(K - 1, neg)]),
                      (B, 1))
  fin_seq = jnp.full((B, K, steps), pad_id, jnp.int32)
  fin_score = jnp.full((B, K), neg)
  base = (jnp.arange(B) * K)[:, None]

  def penalty(n):
    return ((5.0 + jnp.asarray(n, neg.dtype)) / 6.0) ** alpha

  def body(carry, i):
    logp, state, alive_seq, alive_lp, fin_seq, fin_score = carry
    cand = (alive_lp[:, :, None] + logp.reshape(B, K, V)).reshape(B, K * V)
    lp2, idx = jax.lax.top_k(cand, 2 * K)                       # (B, 2K)
    parent, tok = idx // V, (idx % V).astype(jnp.int32)
    seq2 = jnp.take_along_axis(alive_seq, parent[:, :, None], axis=1)
    seq2 = jax.lax.dynamic_update_slice_in_dim(seq2, tok[:, :, None], i, axis=2)
    eos = tok == eos_id
    # finished: merge the new eos hypotheses into the K best finished ones
    f_score = jnp.concatenate([fin_score, jnp.where(eos, lp2 / penalty(i + 1.0), neg)], 1)
    f_seq = jnp.concatenate([fin_seq, seq2], axis=1)
    fin_score, fi = jax.lax.top_k(f_score, K)
    fin_seq = jnp.take_along_axis(f_seq, fi[:, :, None], axis=1)
    # alive: the K best that did not end
    alive_lp, ai = jax.lax.top_k(jnp.where(eos, neg, lp2), K)
    alive_seq = jnp.take_along_axis(seq2, ai[:, :, None], axis=1)
    rows = (base + jnp.take_along_axis(parent, ai, axis=1)).reshape(-1)
    state = _gather_rows(state, rows, B * K)
    new_tok = jnp.take_along_axis(tok, ai, axis=1).reshape(-1)
    logp, state = dec.advance(state, new_tok, i)
    return (logp, state, alive_seq, alive_lp, fin_seq, fin_score), None

  carry = (logp, state, alive_seq, alive_lp, fin_seq, fin_score)
  carry, _ = jax.lax.scan(body, carry, jnp.arange(steps),
                          unroll=max(1, min(unroll, steps)))
  _, _, alive_seq, alive_lp, fin_seq, fin_score = carry
  # A batch row with no finished hypothesis falls back to its best alive one.
  alive_score = alive_lp / penalty(float(steps))
  use_alive = fin_score[:, 0] <= neg / 2
  best = jnp.where(use_alive[:, None], alive_seq[:, 0], fin_seq[:, 0])
  return best, jnp.where(use_alive, alive_score[:, 0], fin_score[:, 0])


@functools.partial(jax.jit, static_argnames=("graphdef", "steps", "mode", "cache_dtype",
                                             "sampler", "beam_size", "alpha", "unroll"))
def _translate(graphdef, state, src_BS, key, *, steps, mode, cache_dtype, sampler,
               beam_size, alpha, unroll=1):
  model = nnx.merge(graphdef, state)
  cfg = model.cfg
  B = src_BS.shape[0]
  K = beam_size or 1
  src = jnp.repeat(src_BS, K, axis=0) if beam_size else src_BS
  memory, valid = model.encode(src)
  fed = steps if beam_size else max(steps - 1, 0)     # the beam loop feeds every step
  dec = _decoder(model, model.prefix(src.shape[0]), fed, mode, cache_dtype,
                 (memory, valid))
  if beam_size:
    return _beam_loop(dec, B, K, steps, alpha, cfg.eos_id, cfg.pad_id, unroll)
  toks = _sample_loop(dec, key, steps, sampler, cfg.eos_id, cfg.pad_id, unroll)
  return toks, jnp.zeros((B,))


def translate(model, src_BS, *, max_len: int, beam_size: int = 0, alpha: float = 0.6,
              key=None, temperature=0.0, top_k=0, top_p=1.0, mode="cache",
              cache_dtype=None, unroll: int = 1):
  """Decodes targets for padded sources with an EncoderDecoder.

  src_BS: (B, S) int ids, padded with cfg.pad_id.
  beam_size 0: greedy (temperature 0) or sampling; beam_size >= 1: beam search with
    length penalty ((5 + len) / 6) ** alpha (Wu et al. 2016).
  unroll: token steps per trip of the decode loop, as `generate`'s (beam search too).
  Returns (tokens (B, max_len) int32: eos_id then pad_id after it, scores (B,)).
  """
  check_mode(model, mode)
  if max_len + 1 > model.cfg.max_len:
    raise ValueError(f"max_len {max_len} + the start token exceeds the model's "
                     f"max_len {model.cfg.max_len}")
  g, s = _eval_split(model)
  key = jax.random.PRNGKey(0) if key is None else key
  return _translate(g, s, jnp.asarray(src_BS, jnp.int32), key, steps=max_len, mode=mode,
                    cache_dtype=cache_dtype, beam_size=int(beam_size), alpha=float(alpha),
                    sampler=Sampler(float(temperature), int(top_k), float(top_p)),
                    unroll=_unroll(unroll))
