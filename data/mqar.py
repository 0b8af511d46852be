"""Multi-query associative recall (MQAR), Arora et al. 2023, "Zoology: Measuring and
Improving Recall in Efficient Language Models" (arXiv:2312.04927), §3 (the task's
definition) and the generator of their reference code (HazyResearch/zoology,
zoology/data/multiquery_ar.py, which their Figure 2 trains on).

A sequence of T tokens holds P key-value pairs, then queries of the keys:

  k1 v1 k2 v2 .. kP vP | 0 0 k2 v2 0 0 0 0 k1 v1 0 0 kP vP 0 0 ..
  \\_ context, 2P ____/ \\_ query region, T - 2P tokens: every key once ________/

As in Zoology's construction:
  * keys are drawn from the lower half of the vocabulary, 1 .. V//2 - 1, values from
    the upper half, V//2 .. V - 1, each without replacement within a sequence (every
    key and every value at most once per context), so a key names one value;
  * the query region is cut into (T - 2P) / 2 slots of two tokens; each key is asked
    in one slot, the slots chosen without replacement with probability proportional
    to a * g^(a-1) for slot g = 1, 2, .. (a = power_a = 0.01, their default: a
    power law, most queries soon after the context, some far from it); the i-th
    key of the context is asked in the i-th slot drawn, so earlier keys tend to be
    asked earlier (theirs too: a shortcut that answers part of the queries by order,
    without recall);
  * the slots no query uses hold the filler 0 (their Figure 2 config,
    random_non_queries=False);
  * only the value after each queried key is scored.

What differs (simplified): Zoology's model input holds the queried key and the
position after it is a filler, with the value only as the label; here the sequence is
one next-token stream (as every LM task of attnlab): the value follows its queried
key in the sequence, so a model trained with teacher forcing sees the answers of
earlier queries (each key is queried once, so they tell it nothing about the later
ones). The slots are drawn by the Gumbel-top-k trick (Kool et al. 2019: the same
distribution as numpy's sequential choice without replacement, vectorised over the
batch), so the random stream is not Zoology's.

Loss-weight convention (as data/copy_task.py): `loss_weights[b, i]` marks TARGET
positions: 1 exactly where `tokens[b, i]` is the value of a queried key (predicted
from `tokens[b, :i]`, whose last token is that key), else 0. Every sequence has
exactly P such positions.
"""
from __future__ import annotations

import numpy as np

FILLER = 0
POWER_A = 0.01      # Zoology's train_power_a = test_power_a


def check(vocab_size: int, num_pairs: int, seq_len: int) -> None:
  """Raises ValueError naming the field unless (V, P, T) make an MQAR sequence: T even,
  P >= 1, P distinct keys in 1..V//2-1 and values in V//2..V-1, and the query region's
  (T - 2P) / 2 slots hold P queries (T >= 4P)."""
  if num_pairs < 1:
    raise ValueError(f"'mqar.num_pairs': must be >= 1, got {num_pairs}")
  if seq_len % 2:
    raise ValueError(f"'mqar.seq_len': must be even (pairs and query slots are 2 tokens), "
                     f"got {seq_len}")
  if seq_len < 4 * num_pairs:
    raise ValueError(f"'mqar.seq_len': {seq_len} tokens cannot hold {num_pairs} pairs and their "
                     f"queries: it needs >= 4 * num_pairs = {4 * num_pairs} tokens")
  if vocab_size // 2 - 1 < num_pairs:
    raise ValueError(f"'mqar.vocab_size': {vocab_size} has {vocab_size // 2 - 1} keys "
                     f"(1..V//2-1), fewer than num_pairs={num_pairs}")


def mqar_batch(rng: np.random.Generator, batch: int, *, vocab_size: int,
               num_pairs: int, seq_len: int, power_a: float = POWER_A):
  """A batch of MQAR sequences; deterministic given `rng`'s state.

  Args:
    rng: numpy Generator (consumed).
    batch: B, number of sequences.
    vocab_size: V (token 0 is the filler; keys 1..V//2-1, values V//2..V-1).
    num_pairs: P key-value pairs per sequence, each key queried once.
    seq_len: T tokens per sequence (even, >= 4P).
    power_a: the power law of the query slots (1.0: uniform).
  Returns:
    tokens int32 (B, T): the pairs, then the query region (module docstring).
    loss_weights float32 (B, T): 1.0 at the P answers (the value after each queried
      key, as targets), else 0.0.
  """
  check(vocab_size, num_pairs, seq_len)
  B, P, T, half = batch, num_pairs, seq_len, vocab_size // 2
  # P distinct keys and values per row: the first P of a random permutation (argsort
  # of uniforms), vectorised over the batch
  keys = 1 + np.argsort(rng.random((B, half - 1)), axis=1)[:, :P]
  vals = half + np.argsort(rng.random((B, vocab_size - half)), axis=1)[:, :P]
  # query slots without replacement, P(slot g) ∝ a * (g+1)^(a-1) (Gumbel-top-k)
  slots = (T - 2 * P) // 2
  logp = np.log(power_a) + (power_a - 1) * np.log(np.arange(1, slots + 1))
  gumbel = -np.log(-np.log(rng.random((B, slots))))
  gaps = np.argsort(-(logp + gumbel), axis=1)[:, :P]                 # (B, P) slots
  tokens = np.full((B, T), FILLER, np.int32)
  tokens[:, 0:2 * P:2], tokens[:, 1:2 * P:2] = keys, vals
  rows = np.arange(B)[:, None]
  at = 2 * P + 2 * gaps                                               # query key at
  tokens[rows, at], tokens[rows, at + 1] = keys, vals
  loss_weights = np.zeros((B, T), np.float32)
  loss_weights[rows, at + 1] = 1.0
  return tokens, loss_weights


def parse_mix(text: str) -> tuple[tuple[int, int], ...]:
  """'T:P,T:P,..' (config mqar.train_mix) as ((T, P), ..); '' as (). Raises ValueError
  naming the field for a malformed entry."""
  out = []
  for part in filter(None, (x.strip() for x in str(text or "").split(","))):
    try:
      T, P = (int(x) for x in part.split(":"))
    except ValueError:
      raise ValueError(f"'mqar.train_mix': {part!r} is not tokens:pairs (e.g. '64:4,128:8')"
                       ) from None
    out.append((T, P))
  return tuple(out)


def check_mix(vocab_size: int, num_pairs: int, seq_len: int, mix, batch: int) -> None:
  """Raises ValueError naming 'mqar.train_mix' unless each (T, P) of the mixture makes
  an MQAR sequence of at most seq_len tokens and the batch holds a row of every part
  (the panel's own (seq_len, num_pairs) and each of mix)."""
  for T, P in mix:
    try:
      check(vocab_size, P, T)
    except ValueError as e:
      raise ValueError(f"'mqar.train_mix': {T}:{P}: {e}") from None
    if T > seq_len:
      raise ValueError(f"'mqar.train_mix': {T}:{P} is longer than mqar.seq_len={seq_len} "
                       "(its rows are padded to seq_len, never cut)")
  if mix and batch < len(mix) + 1:
    raise ValueError(f"'mqar.train_mix': batch_size={batch} cannot hold a row of each of "
                     f"its {len(mix) + 1} parts (seq_len:num_pairs and the mixture)")


def mixed_batch(rng: np.random.Generator, batch: int, *, vocab_size: int, num_pairs: int,
                seq_len: int, mix, power_a: float = POWER_A):
  """A training batch over a mixture of sequence shapes, as Zoology's later MQAR
  configs train (zoology/experiments/mqar_example_configs/original_mqar_configs.py:
  one run on 64/4, 128/8, 256/16, 256/32 and 256/64 sequences): the B rows are split
  as evenly as can be over the parts (seq_len, num_pairs) and each (T, P) of `mix`,
  in that order; a row of T < seq_len tokens is an MQAR sequence of T tokens followed
  by seq_len - T fillers of loss weight 0, which a causal model reads as exactly the
  sequence of T (no position after T reaches one before it). Deterministic given rng.

  Returns tokens int32 (B, seq_len) and loss_weights float32 (B, seq_len), as
  `mqar_batch`; row b's part is the one its position in that order falls in."""
  parts = ((seq_len, num_pairs), *mix)
  n = len(parts)
  sizes = [batch // n + (i < batch % n) for i in range(n)]
  tokens = np.full((batch, seq_len), FILLER, np.int32)
  weights = np.zeros((batch, seq_len), np.float32)
  r = 0
  for (T, P), b in zip(parts, sizes):
    if b:
      y, w = mqar_batch(rng, b, vocab_size=vocab_size, num_pairs=P, seq_len=T,
                        power_a=power_a)
      tokens[r:r + b, :T], weights[r:r + b, :T] = y, w
    r += b
  return tokens, weights
