"""The model families: a decoder-only LM (text or pixels), an encoder-decoder, and a
sequence classifier (`Classifier`: an encoder, mean-pooled, for LRA's ListOps).

  model = build(cfg, rngs=nnx.Rngs(0))          # TransformerLM or EncoderDecoder

Both give the same generation interface (used by `models.generate`):
  prefix(...)                     the decoder's first input ids (the start token)
  forward_logp(ids_in_BT, ..., at=None) -> (B, T, V) log-probs of the next token,
                                  parallel; (B, V) at position `at` only
  init_state(batch, max_len, ...) the decode state of every layer (a pytree)
  step_logp(ids_BT, state, pos0)  -> (B, T, V) log-probs, state; incremental

`TransformerLM` reads ids in [0, vocab) and reserves id `vocab_size` as its start
token, so inputs are the targets shifted right by one. With cfg.head="dmol" and
vocab_size=256 it is the pixel model of Katharopoulos et al. (MNIST as 784 raster-
order pixel tokens, a discretised logistic mixture output, bits/dim).

`EncoderDecoder` is Vaswani et al.'s model: padded source and target batches
(cfg.pad_id), shift-right teacher forcing with cfg.bos_id, cross-attention to
the encoder output with its padding mask.

Positions are explicit per token (`layers.token_positions`: pos0 + arange(T), or a
given (B|1, T) array): the embedder adds sinusoidal or learned vectors, the self-
attention layers get them as q_pos, k_pos under rope, rope2d and alibi (models/config.py
documents the schemes). One exception, for `rope2d` in `TransformerLM`: input t carries
token t - 1 (the targets shifted right) and predicts token t, so its query sits at
pixel t and its key at pixel t - 1, the pixel it holds (the start token at -1, the
slot before the image). With one position for both, a key's 2D offset from the
predicted pixel would be off by one pixel, and wrong by a whole row at row ends; with
the 1D schemes a constant shift of i - j changes nothing (ALiBi's bias moves by a
per-row constant, which the softmax ignores), so they keep one position per token.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from models.config import ModelConfig
from models.heads import CategoricalHead, MixtureHead
from models.layers import Block, Embedder, token_positions


def shift_right(y_BT, start_id: int, pos_BT=None):
  """Teacher-forcing inputs: [start, y_0, ..., y_{T-2}]. With pos_BT (B, T) int (the
  positions of a packed row, restarting at 0 per segment) every token at position 0
  gets the start token instead of the previous segment's last one."""
  start = jnp.full(y_BT.shape[:1] + (1,), start_id, y_BT.dtype)
  ids = jnp.concatenate([start, y_BT[:, :-1]], axis=1)
  return ids if pos_BT is None else jnp.where(pos_BT == 0, start_id, ids).astype(ids.dtype)


# What a rematerialised block keeps for the backward pass (cfg.remat): "block" keeps
# its matmul outputs and recomputes the cheap elementwise work (softmax, norms,
# activations); "full" keeps only the block's input and recomputes everything.
REMAT_POLICY = {"block": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                "full": jax.checkpoint_policies.nothing_saveable}


def _run_block(block, x, causal, valid_BT, mem_BSD, mem_valid_BS, q_pos, k_pos,
               seg_BT=None, mem_seg_BS=None):
  return block(x, causal=causal, valid_BT=valid_BT, mem_BSD=mem_BSD,
               mem_valid_BS=mem_valid_BS, q_pos=q_pos, k_pos=k_pos, seg_BT=seg_BT,
               mem_seg_BS=mem_seg_BS)


def _remat_block(policy, block, x, causal, *arrays):
  """_run_block under jax.checkpoint. The block is split into (graph, state) so the
  checkpointed function is pure (the state that changes, e.g. dropout RNG counts,
  flows back out); nnx.remat does the same but refuses models merged inside an
  outer jax transform, which is how the train step runs them."""
  graph, state = nnx.split(block)

  def f(state, x, *arrays):
    b = nnx.merge(graph, state)
    return _run_block(b, x, causal, *arrays), nnx.state(b)

  y, state = jax.checkpoint(f, policy=policy)(state, x, *arrays)
  nnx.update(block, state)
  return y


class Stack(nnx.Module):
  """The Blocks of `role` ("decoder_attention" or "encoder_attention"), one per
  `cfg.layer_specs(role)` (its variant, layer pieces and positions: a
  `layer_attention` pattern gives each layer its own; each keeps its own decode
  state), plus the final LayerNorm that pre-LN needs (identity for post-LN).

  With cfg.remat != "none" each block is an `nnx.remat` (jax.checkpoint) of the
  forward pass: training memory per block drops to what REMAT_POLICY keeps, for
  one more forward pass of compute.
  """

  def __init__(self, cfg: ModelConfig, role: str, rngs: nnx.Rngs,
               cross_attn: str | None = None):
    self.blocks = nnx.List([Block(cfg, spec.name, rngs, cross_attn, spec)
                            for spec in cfg.layer_specs(role)])
    self.ln = nnx.LayerNorm(cfg.d_model, rngs=rngs) if cfg.pre_ln else None
    self.remat = cfg.remat

  def _final(self, x):
    return self.ln(x) if self.ln is not None else x

  def __call__(self, x, *, causal, valid_BT=None, mem_BSD=None, mem_valid_BS=None,
               q_pos=None, k_pos=None, seg_BT=None, mem_seg_BS=None):
    """x (B, T, D) through every block (`Block.__call__` names the arguments)."""
    run = _run_block
    if self.remat != "none":
      run = functools.partial(_remat_block, REMAT_POLICY[self.remat])
    for b in self.blocks:
      x = run(b, x, causal, valid_BT, mem_BSD, mem_valid_BS, q_pos, k_pos, seg_BT,
              mem_seg_BS)
    return self._final(x)

  def init_state(self, batch, max_len, cache_dtype=None, dtype=jnp.float32):
    return [b.init_state(batch, max_len, cache_dtype, dtype) for b in self.blocks]

  def step(self, x, states, cross_kv=None, mem_valid_BS=None, q_pos=None, k_pos=None):
    new = []
    for i, b in enumerate(self.blocks):
      x, s = b.step(x, states[i], None if cross_kv is None else cross_kv[i], mem_valid_BS,
                    q_pos, k_pos)
      new.append(s)
    return self._final(x), new


def _head(cfg: ModelConfig, rngs: nnx.Rngs, tied):
  if cfg.head == "dmol":
    return MixtureHead(cfg, rngs)
  return CategoricalHead(cfg, cfg.vocab_size, rngs, tied if cfg.tie_output else None)


def _at(h_BTD, at):
  """h_BTD, or only position `at` (an int or traced int32) as (B, D)."""
  if at is None:
    return h_BTD
  return jax.lax.dynamic_index_in_dim(h_BTD, at, axis=1, keepdims=False)


class TransformerLM(nnx.Module):
  """Decoder-only causal Transformer over vocab_size classes (text or pixels).

  __call__(ids_in_BT, pos0=0, pos_BT=None) -> hidden (B, T, D); ids_in are
    shifted-right targets, at positions pos_BT (B|1, T) (default pos0 + arange(T)).
  nll(y_BT) -> (B, T) nats per position of targets y (the loss; bits = nll / ln 2).
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    cfg.validate()
    if cfg.kind != "lm":
      raise ValueError(f"TransformerLM needs kind='lm', got {cfg.kind!r}")
    self.cfg = cfg
    self.embed = Embedder(cfg.input_vocab, cfg, rngs)
    self.decoder = Stack(cfg, "decoder_attention", rngs)
    self.head = _head(cfg, rngs, self.embed)
    # rope2d: a key sits at the pixel its input holds, t - 1 (module docstring)
    self.key_shift = 1 if cfg.positions == "rope2d" else 0

  def __call__(self, ids_in_BT, pos0=0, pos_BT=None):
    pos = token_positions(ids_in_BT.shape[1], pos0, pos_BT)
    return self.decoder(self.embed(ids_in_BT, pos0, pos_BT), causal=True, q_pos=pos,
                        k_pos=pos - self.key_shift)

  def nll(self, y_BT):
    return self.head.nll(self(shift_right(y_BT, self.cfg.start_id)), y_BT)

  # ---- generation interface ------------------------------------------------
  def prefix(self, batch: int):
    return jnp.full((batch, 1), self.cfg.start_id, jnp.int32)

  def forward_logp(self, ids_in_BT, at=None):
    return self.head.log_probs(_at(self(ids_in_BT), at))

  def init_state(self, batch, max_len, cache_dtype=None):
    return self.decoder.init_state(batch, max_len, cache_dtype, jnp.dtype(self.cfg.dtype))

  def step_logp(self, ids_BT, state, pos0):
    pos = token_positions(ids_BT.shape[1], pos0)
    h, state = self.decoder.step(self.embed(ids_BT, pos0), state, q_pos=pos,
                                 k_pos=pos - self.key_shift)
    return self.head.log_probs(h), state


class EncoderDecoder(nnx.Module):
  """Vaswani et al.'s encoder-decoder over padded token batches.

  encode(src_BS, pos_BS=None, seg_BS=None) -> memory (B, S, D), src_valid (B, S)
  decode(ids_in_BT, memory, src_valid, pos0=0, pos_BT=None, seg_BT=None,
         src_seg_BS=None) -> hidden (B, T, D)
  nll(src_BS, tgt_BT, *, src_seg=None, src_pos=None, y_seg=None, y_pos=None)
    -> (B, T) nats per target position (0 at padding).
  Packed rows (data.pipeline: several pairs per row): segment ids src_seg (B, S),
  y_seg (B, T) int (a pair's source and target share one id; 0 = padding) and
  positions src_pos, y_pos restarting at 0 per pair. Encoder and decoder
  self-attention stay within a segment, the cross-attention matches y_seg to src_seg,
  and each target segment starts from bos_id: every pair computes as it would alone.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    cfg.validate()
    if cfg.kind != "encdec":
      raise ValueError(f"EncoderDecoder needs kind='encdec', got {cfg.kind!r}")
    self.cfg = cfg
    src_vocab = cfg.src_vocab_size or cfg.vocab_size
    self.tgt_embed = Embedder(cfg.vocab_size, cfg, rngs)
    shared = cfg.share_embeddings and src_vocab == cfg.vocab_size
    self.src_embed = self.tgt_embed if shared else Embedder(src_vocab, cfg, rngs)
    self.encoder = Stack(cfg, "encoder_attention", rngs)
    self.decoder = Stack(cfg, "decoder_attention", rngs,
                         cross_attn=cfg.attention_for("cross_attention"))
    self.head = _head(cfg, rngs, self.tgt_embed)

  def encode(self, src_BS, pos_BS=None, seg_BS=None):
    valid = src_BS != self.cfg.pad_id
    pos = token_positions(src_BS.shape[1], 0, pos_BS)
    return self.encoder(self.src_embed(src_BS, 0, pos_BS), causal=False, valid_BT=valid,
                        q_pos=pos, k_pos=pos, seg_BT=seg_BS), valid

  def decode(self, ids_in_BT, memory, src_valid, pos0=0, pos_BT=None, seg_BT=None,
             src_seg_BS=None):
    valid = ids_in_BT != self.cfg.pad_id
    pos = token_positions(ids_in_BT.shape[1], pos0, pos_BT)
    return self.decoder(self.tgt_embed(ids_in_BT, pos0, pos_BT), causal=True,
                        valid_BT=valid, mem_BSD=memory, mem_valid_BS=src_valid, q_pos=pos,
                        k_pos=pos, seg_BT=seg_BT, mem_seg_BS=src_seg_BS)

  def __call__(self, src_BS, ids_in_BT):
    return self.decode(ids_in_BT, *self.encode(src_BS))

  def nll(self, src_BS, tgt_BT, *, src_seg=None, src_pos=None, y_seg=None, y_pos=None):
    memory, src_valid = self.encode(src_BS, src_pos, src_seg)
    ids_in = shift_right(tgt_BT, self.cfg.bos_id, y_pos)
    if y_seg is not None:               # a packed row's padding stays padding
      ids_in = jnp.where(y_seg == 0, self.cfg.pad_id, ids_in).astype(ids_in.dtype)
    h = self.decode(ids_in, memory, src_valid, 0, y_pos, y_seg, src_seg)
    return jnp.where(tgt_BT != self.cfg.pad_id, self.head.nll(h, tgt_BT), 0.0)

  # ---- generation interface ------------------------------------------------
  def prefix(self, batch: int):
    return jnp.full((batch, 1), self.cfg.bos_id, jnp.int32)

  def forward_logp(self, ids_in_BT, memory, src_valid, at=None):
    return self.head.log_probs(_at(self.decode(ids_in_BT, memory, src_valid), at))

  def init_state(self, batch, max_len, memory, src_valid, cache_dtype=None):
    """Self-attention decode states plus each layer's cross-attention K/V, computed once."""
    dt = jnp.dtype(self.cfg.dtype)
    return dict(self=self.decoder.init_state(batch, max_len, cache_dtype, dt),
                cross=[b.cross.project_kv(memory) for b in self.decoder.blocks],
                src_valid=src_valid)

  def step_logp(self, ids_BT, state, pos0):
    pos = token_positions(ids_BT.shape[1], pos0)
    h, s = self.decoder.step(self.tgt_embed(ids_BT, pos0), state["self"],
                             state["cross"], state["src_valid"], q_pos=pos, k_pos=pos)
    return self.head.log_probs(h), dict(state, self=s)


class Classifier(nnx.Module):
  """A sequence classifier: encoder, mean over the non-padding positions, softmax.

  The LRA setting (Tay et al. 2021; they pool a CLS token instead of the mean).
  __call__(src_BS, src_seg=None, src_pos=None, num_segments=1) -> pooled hidden
    (B, M, D); src_BS int ids padded with cfg.pad_id. Unpacked (src_seg None): M = 1,
    the mean over the row's non-padding tokens. Packed (src_seg (B, S) int, segment
    ids 1..M per row, 0 = padding; src_pos (B, S) positions restarting per segment):
    the encoder attends within segments, and column m is the mean over segment m + 1
    (zeros for a segment the row does not have), M = num_segments.
  nll(src_BS, y_BM, src_seg=None, src_pos=None) -> (B, M) nats of the class labels y
    (int, 0..vocab_size-1), one per segment (M = 1 unpacked).
  forward_logp(src_BS) -> (B, vocab_size) class log-probabilities.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    cfg.validate()
    if cfg.kind != "classifier":
      raise ValueError(f"Classifier needs kind='classifier', got {cfg.kind!r}")
    self.cfg = cfg
    self.embed = Embedder(cfg.src_vocab_size or cfg.vocab_size, cfg, rngs)
    self.encoder = Stack(cfg, "encoder_attention", rngs)
    self.head = CategoricalHead(cfg, cfg.vocab_size, rngs)

  def __call__(self, src_BS, src_seg=None, src_pos=None, num_segments: int = 1):
    valid_BS = src_BS != self.cfg.pad_id
    pos = token_positions(src_BS.shape[1], 0, src_pos)
    h_BSD = self.encoder(self.embed(src_BS, 0, src_pos), causal=False, valid_BT=valid_BS,
                         q_pos=pos, k_pos=pos, seg_BT=src_seg)
    if src_seg is None:
      in_BMS = valid_BS[:, None, :]
    else:
      ids_M = jnp.arange(1, num_segments + 1, dtype=jnp.int32)
      in_BMS = (src_seg[:, None, :] == ids_M[None, :, None]) & valid_BS[:, None, :]
    w_BMS1 = in_BMS[..., None].astype(h_BSD.dtype)
    return (jnp.sum(h_BSD[:, None] * w_BMS1, axis=2)
            / jnp.maximum(jnp.sum(w_BMS1, axis=2), 1.0))

  def nll(self, src_BS, y_BM, src_seg=None, src_pos=None):
    return self.head.nll(self(src_BS, src_seg, src_pos, y_BM.shape[1]), y_BM)

  def forward_logp(self, src_BS):
    return self.head.log_probs(self(src_BS))[:, 0]


def build(cfg: ModelConfig, *, rngs: nnx.Rngs):
  """The model family that cfg.kind names ('lm', 'encdec' or 'classifier')."""
  return {"lm": TransformerLM, "encdec": EncoderDecoder,
          "classifier": Classifier}[cfg.kind](cfg, rngs=rngs)
