"""The synthetic copy task of Katharopoulos et al. 2020, section 4.1.

A sequence is `0 t1 .. tn 0 t1 .. tn`: a separator 0, n random symbols drawn
uniformly from 1..9, the separator again, and the same n symbols (vocabulary
size 10, length 2n + 2). A model reads it left to right and is scored only on
reproducing the second copy.

Loss-weight convention: `loss_weights[b, i]` marks TARGET positions, i.e. it
says whether predicting `tokens[b, i]` (from `tokens[b, :i]`, the logits at
position i - 1 of a next-token model) counts. It is 1 exactly at positions
n+2 .. 2n+1 (the second t1..tn) and 0 elsewhere, including the second
separator at position n+1, which is always 0 and so gives nothing to learn.
With next-token logits `logits[:, :-1]` the matching targets and weights are
`tokens[:, 1:]` and `loss_weights[:, 1:]`.
"""
import numpy as np

VOCAB_SIZE = 10  # Symbols 1..9 plus the separator 0.
SEPARATOR = 0


def copy_batch(rng: np.random.Generator, batch: int, n: int):
  """A batch of copy sequences; deterministic given `rng`'s state.

  Args:
    rng: numpy Generator (consumed: draws `batch * n` integers).
    batch: B, number of sequences.
    n: number of symbols to copy (n >= 1).
  Returns:
    tokens int32 (B, 2n+2): `0 t1..tn 0 t1..tn`, t in 1..9.
    loss_weights float32 (B, 2n+2): 1.0 at positions n+2..2n+1 (the second
      copy, as targets), else 0.0.
  """
  if batch < 0 or n < 1:
    raise ValueError(f"copy_batch needs batch >= 0 and n >= 1, got batch="
                     f"{batch}, n={n}")
  symbols = rng.integers(1, VOCAB_SIZE, size=(batch, n), dtype=np.int32)
  sep = np.full((batch, 1), SEPARATOR, np.int32)
  tokens = np.concatenate([sep, symbols, sep, symbols], axis=1)
  loss_weights = np.zeros((batch, 2 * n + 2), np.float32)
  loss_weights[:, n + 2:] = 1.0
  return tokens, loss_weights
