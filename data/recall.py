"""Recall positions: where a byte could be predicted by copying from earlier in its
window (Zoology's split of an LM's loss, Arora et al. 2023, "Zoology: Measuring and
Improving Recall in Efficient Language Models", section 3: "associative recall hits").

`recall_mask(tokens_BT, n)` marks, in each row of a batch of windows, the positions
whose token an exact copy of an earlier occurrence of its context predicts; a study
splits each run's test loss into those positions and the rest, so that a quality gap
that grows with the window can be read as recall or not.
"""
import numpy as np

N_RECALL = 4  # the studies' n: 4 bytes of context (about one BPE token of code)


def recall_mask(tokens_BT, n: int = N_RECALL, copy: bool = True) -> np.ndarray:
  """Recall positions of each row of `tokens_BT`.

  Args:
    tokens_BT: int array (B, T) (or (T,)), the windows; rows are independent.
    n: context length, >= 1.
    copy: True (Zoology's hits): position t is a recall position iff t >= n and the
      (n+1)-gram tokens[t-n : t+1] (its n tokens of context and the token itself)
      occurred earlier in the same row, starting at some s < t - n: copying what
      followed that earlier occurrence of the context gives the right token.
      False: iff t >= n and the n-gram tokens[t-n : t] occurred starting at some
      s < t - n (the context was seen and followed by a token, whether the same or
      not: where a model can look something up, right or wrong).
    Occurrences may overlap the current one (s > t - 2n): "aaa" with n=1 marks t=2.
  Returns:
    mask_BT: bool array of tokens_BT's shape; False at t < n.
  Padding (weight 0) is not special: AND the mask with the weights.
  """
  if int(n) != n or n < 1:
    raise ValueError(f"recall_mask: n must be an integer >= 1, got {n!r}")
  tokens = np.asarray(tokens_BT)
  if tokens.ndim not in (1, 2) or not np.issubdtype(tokens.dtype, np.integer):
    raise ValueError(f"recall_mask: tokens_BT must be an int array (B, T) or (T,), got "
                     f"{tokens.dtype} {tokens.shape}")
  x_BT = tokens.reshape(1, -1) if tokens.ndim == 1 else tokens
  B, T = x_BT.shape
  m = n + 1 if copy else n                          # the gram compared
  mask_BT = np.zeros((B, T), bool)
  S = T - n                                         # grams start at s = t - n < T - n
  if S <= 0:                                        # no t >= n
    return mask_BT.reshape(tokens.shape)
  # the gram starting at s, for s = 0 .. S-1 (it ends at s + m - 1 <= T - 1), with
  # its row number first so that equal grams of different rows differ
  grams = np.lib.stride_tricks.sliding_window_view(x_BT, m, axis=1)[:, :S]
  key = np.concatenate([np.broadcast_to(np.arange(B)[:, None, None], (B, S, 1)),
                        grams.astype(np.int64)], axis=2).reshape(B * S, m + 1)
  _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
  # the first start of each gram, within its row (keys sort by row, then position)
  first_s = (first[inverse.reshape(-1)] % S).reshape(B, S)
  s = np.arange(S)
  mask_BT[:, n:] = first_s < s                      # t = s + n: an earlier start
  return mask_BT.reshape(tokens.shape)
