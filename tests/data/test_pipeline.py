"""data.pipeline: the length-bucketed Multi30k train batches (no data dir needed: the
split arrays are stand-ins with the same layout)."""
import ml_collections
import numpy as np

from data import pipeline
def _task(buckets, n=1000, B=16, seed=0):
  rng = np.random.default_rng(7)
  S = 40
  src = np.zeros((n, S), np.int32)
  tgt = np.zeros((n, S), np.int32)
  for i in range(n):                             # lengths 3..40, EOS (2) last
    a, b = rng.integers(3, S + 1, size=2)
    src[i, :a] = rng.integers(3, 50, a)
    tgt[i, :b] = rng.integers(3, 50, b)
    src[i, a - 1] = tgt[i, b - 1] = 2
    src[i, 0] = 100 + i                          # names the example in the batch
  t = object.__new__(pipeline.Multi30k)
  t.config = ml_collections.ConfigDict(dict(seed=seed, batch_size=B, length_buckets=buckets))
  t.splits = {"train": (src, tgt, None)}
  return t, src, tgt


def test_bucketed_batches_cut_no_token_and_cover_each_epoch_once():
  t, src, tgt = _task((8, 16, 24))
  B, per_epoch = 16, 1000 // 16
  seen, widths = [], []
  for step in range(per_epoch):
    b = t.train_batch(step)
    L = b["src"].shape[1]
    assert b["y"].shape[1] == L and L in (8, 16, 24, 40)
    widths.append(L)
    rows = list(b["src"][:, 0] - 100)
    np.testing.assert_array_equal(b["src"], src[rows, :L])
    seen += rows
    # nothing but padding was cut: the full rows start with the batch
    np.testing.assert_array_equal(src[rows, L:], 0)
    np.testing.assert_array_equal(tgt[rows, L:], 0)
    np.testing.assert_array_equal(b["y"], tgt[rows, :L])
    np.testing.assert_array_equal(b["w"], tgt[rows, :L] != 0)
  assert len(seen) == per_epoch * B
  assert len(set(seen)) == len(seen)            # each example at most once per epoch
  # grouping by length: a third of the examples fit 24 columns, and so do about a
  # third of the grouped batches; of the same-size random batches almost none do
  lens = np.maximum((src != 0).sum(1), (tgt != 0).sum(1))
  rand = [lens[pipeline._epoch_rows(0, s, B, len(src))].max() <= 24
          for s in range(per_epoch)]
  assert sum(w <= 24 for w in widths) >= 0.8 * np.mean(lens <= 24) * per_epoch
  assert sum(rand) <= 2


def test_bucketed_batches_are_a_function_of_seed_and_step():
  t1, _, _ = _task((16, 32))
  t2, _, _ = _task((16, 32))
  for step in (0, 61, 62, 200):                  # across the epoch boundary (62 / epoch)
    a, b = t1.train_batch(step), t2.train_batch(step)
    np.testing.assert_array_equal(a["src"], b["src"])
  t3, _, _ = _task((16, 32), seed=1)
  assert not np.array_equal(t3.train_batch(0)["src"], t1.train_batch(0)["src"])
  # no buckets: the fixed-width batches of _epoch_rows
  t4, src, _ = _task(())
  assert t4.train_batch(0)["src"].shape == (16, src.shape[1])


def test_epoch_rows_cover_each_epoch_once_across_its_boundary():
  """_epoch_rows: each epoch is one seeded permutation (made once per epoch and kept
  read-only, so no caller can change the batches of a later step)."""
  n, B = 10, 4                       # batches straddle the epoch boundaries 10, 20
  rows = np.concatenate([pipeline._epoch_rows(3, s, B, n) for s in range(5)])
  np.testing.assert_array_equal(rows[:10], np.random.default_rng([3, 0]).permutation(n))
  np.testing.assert_array_equal(rows[10:20], np.random.default_rng([3, 1]).permutation(n))
  assert sorted(rows[:10]) == list(range(n)) and sorted(rows[10:20]) == list(range(n))
  np.testing.assert_array_equal(pipeline._epoch_rows(3, 2, B, n), rows[8:12])
  assert not pipeline._epoch_permutation(3, 0, n).flags.writeable


def test_mnist_tokens_are_read_once_per_build(prepared_data, monkeypatch):
  """MNIST's pixel tokens are cached per process, keyed on the TFDS build: the same
  build hands back the same (read-only) arrays, a rebuilt one (a new dataset_info,
  so a new build key) is read anew."""
  import data
  from data import builders
  x, y = pipeline._mnist_tokens("test", str(prepared_data), "", 7)
  assert x.shape == (10000, 49) and x.dtype == np.int32 and not x.flags.writeable
  assert pipeline._mnist_tokens("test", str(prepared_data), "", 7)[0] is x
  arrays = data.mnist_arrays("test", prepared_data)
  monkeypatch.setattr(builders, "build_key", lambda name, d=None: "rebuilt")
  monkeypatch.setattr(data, "mnist_arrays", lambda split, d=None: arrays)  # no new .npz
  again, again_y = pipeline._mnist_tokens("test", str(prepared_data), "", 7)
  assert again is not x
  np.testing.assert_array_equal(again, x)
  np.testing.assert_array_equal(again_y, y)
