"""mqar.train_mix: MQAR training rows over a mixture of shapes (data.mqar.mixed_batch),
each shorter row an MQAR sequence padded with weight-0 fillers; evaluation unchanged;
bad mixtures refused naming the key."""
import numpy as np
import pytest

from configs import mqar as mqar_cfg
from data import mqar
from data import pipeline
from models import ConfigError
from trainer.config import validate


def test_rows_split_over_the_parts_each_a_padded_mqar_sequence():
  rng = np.random.default_rng(0)
  y, w = mqar.mixed_batch(rng, 7, vocab_size=64, num_pairs=8, seq_len=64,
                          mix=((16, 2), (32, 4)))
  assert y.shape == w.shape == (7, 64) and y.dtype == np.int32
  # 7 rows over 3 parts: 3, 2, 2 (the panel's own shape first)
  for rows, T, P in ((slice(0, 3), 64, 8), (slice(3, 5), 16, 2), (slice(5, 7), 32, 4)):
    assert (w[rows].sum(1) == P).all()                         # P answers per row
    assert (y[rows, T:] == mqar.FILLER).all() and (w[rows, T:] == 0).all()
    for row_y, row_w in zip(y[rows], w[rows]):
      keys, vals = row_y[0:2 * P:2], row_y[1:2 * P:2]
      lookup = dict(zip(keys, vals))
      ans = np.nonzero(row_w)[0]
      assert sorted(row_y[ans - 1]) == sorted(keys)            # each key queried once
      assert all(lookup[row_y[i - 1]] == row_y[i] for i in ans)
  # deterministic given the generator's state
  again = mqar.mixed_batch(np.random.default_rng(0), 7, vocab_size=64, num_pairs=8,
                           seq_len=64, mix=((16, 2), (32, 4)))
  np.testing.assert_array_equal(again[0], y)


def test_the_task_trains_on_the_mixture_and_evaluates_on_its_own_shape():
  c = mqar_cfg.get_config("cpu")
  c.mqar.train_mix = "16:2,32:4"
  validate(c)
  task = pipeline.Mqar(c)
  b = task.train_batch(3)
  assert b["y"].shape == (32, 64)
  # answers per row: the panel's own 4 pairs (64 tokens), 2 (16:2) and 4 (32:4)
  np.testing.assert_array_equal(b["w"].sum(1), [4] * 11 + [2] * 11 + [4] * 10)
  assert (b["y"][11:22, 16:] == mqar.FILLER).all()
  ev = next(iter(task.eval_batches()))
  assert (ev["w"].sum(1) == c.mqar.num_pairs).all()
  c.mqar.train_mix = ""
  np.testing.assert_array_equal(pipeline.Mqar(c).train_batch(3)["y"].shape, (32, 64))


@pytest.mark.parametrize("mix, words", [
    ("16:2,x", "'mqar.train_mix': 'x' is not tokens:pairs"),
    ("128:4", "longer than mqar.seq_len=64"),
    ("16:8", "'mqar.train_mix': 16:8: 'mqar.seq_len': 16 tokens cannot hold 8 pairs"),
])
def test_a_bad_mixture_names_the_key(mix, words):
  c = mqar_cfg.get_config("cpu")
  c.mqar.train_mix = mix
  with pytest.raises((ConfigError, ValueError), match=words):
    validate(c)
