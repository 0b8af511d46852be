"""Input pipelines: numpy batches for each task, deterministic per step.

  task = create(config)             # reads data through data.builders (TFDS, no TensorFlow),
                                    # as config.task's record says (data/tasks/)
  batch = task.train_batch(step)    # dict of numpy arrays, a pure function of (seed, step)
  for batch in task.eval_batches(): ...
  task.model_overrides              # sizes the model must have (e.g. vocab_size)

A train batch depends only on (seed, step): epoch e = (step * B) // N is a seeded
permutation of the N examples, so training resumed at step s sees exactly the batches
an uninterrupted run sees, and skipping to s costs nothing. Eval batches are fixed.
With `task.rows` set (a slice of the B rows: one process's share in a multi-process
run), train_batch returns only those rows of the global batch, and reads only their
examples: the step's example indices (window starts, packed rows, bucket plan) are
computed whole, which costs no reading, then cut before any example is decoded.
With `task.eval_rows` set (a slice of the eval_batch_size rows), eval_batches yields
only those rows of each eval batch the same way: a last partial batch is padded to
eval_batch_size rows (weight 0) as one process pads it, and each process reads only
its real rows and pads its part with the padding rows that fall in it.

Batch layouts:
  LM tasks (mnist, shakespeare, text, copy, mqar): y (B, T) int32 targets, w (B, T)
    float32 loss weights (the model's inputs are y shifted right by its start token;
    text: w = 0 past the end of a document shorter than the window).
  multi30k: src (B, S) and tgt (B, T) int32, padded with 0, targets end with EOS;
    w (B, T) = tgt != 0. With config.length_buckets, train batches group sentences of
    similar length and S = T = the smallest bucket that holds the batch.
  listops (a classifier): src (B, L) int32 padded with 0, y (B, 1) class, w (B, 1) ones.

Packed train batches (config.packing, multi30k and listops; `Packer`, data/packing.py):
B rows of the full length (src_len, tgt_len; listops.max_length), several examples
laid end to end in each, with segment ids src_seg / y_seg (B, ·) int32 (1, 2, ... per
row, 0 = padding) and positions src_pos / y_pos (B, ·) int32 that restart at 0 per
example. multi30k: example i's source and target segments have the same id (the
decoder's cross-attention matches y_seg against src_seg); w = y_seg != 0. listops:
y (B, M) and w (B, M), one label slot per segment (M = `packed_labels`, w = 0 at
empty slots). config.batch_size then counts rows. Eval batches are never packed (the same
as an unpacked run's, so that eval metrics compare like for like). The LM tasks do
not pack: their rows are windows of a continuous stream (shakespeare) or fixed-length
sequences (mnist, copy), with no padding to remove.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Iterator

import numpy as np

import data
from data import listops, mqar, packing


@functools.lru_cache(maxsize=4)
def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  """The seeded permutation of range(n) for one epoch (read-only), made once: making
  it (0.8 ms for MNIST's 60000) was most of a batch's CPU time, spent every step."""
  perm = np.random.default_rng([seed, epoch]).permutation(n)
  perm.flags.writeable = False
  return perm


def _epoch_rows(seed: int, step: int, batch: int, n: int) -> np.ndarray:
  """Example indices of train batch `step`: seeded permutation per epoch."""
  idx = np.arange(step * batch, (step + 1) * batch)
  out = np.empty(batch, np.int64)
  for e in np.unique(idx // n):
    perm = _epoch_permutation(int(seed), int(e), int(n))
    sel = idx // n == e
    out[sel] = perm[idx[sel] % n]
  return out


class Packer:
  """The packed rows of train step `step`, a pure function of (seed, step).

  Epoch e is a seeded permutation of the N examples, packed by
  `packing.first_fit_decreasing` (windows of `window` examples) into rows of cap_C
  tokens, the rows then shuffled (seeded), and cut into batches of B rows. Every
  epoch has the steps of epoch 0 (len(rows of epoch 0) // B: row counts differ by a
  few between epochs): an epoch with fewer rows ends with all-padding rows (weight 0),
  one with more leaves its last rows' examples to the next epoch's permutation, as
  the bucketed batches leave N % B. So step s is in epoch s // steps_per_epoch, and a
  resumed run packs only its epoch (~0.3 s for Multi30k) to see exactly the batches
  of an uninterrupted one.
  """

  def __init__(self, lens_NC, cap_C, batch: int, seed: int, max_segments: int = 0,
               window: int = 1024, key: str = "batch_size"):
    self.lens = np.asarray(lens_NC)
    self.cap, self.B, self.seed = tuple(cap_C), int(batch), int(seed)
    self.max_segments, self.window = int(max_segments), int(window)
    self._epoch = (None, None)
    self.steps_per_epoch = len(self.epoch_rows(0)) // self.B
    if not self.steps_per_epoch:
      raise ValueError(f"config '{key}': {self.B} packed rows per batch, but an epoch "
                       f"packs into {len(self.epoch_rows(0))} rows")

  def epoch_rows(self, epoch: int) -> list[np.ndarray]:
    """The rows (arrays of example indices) of `epoch`, in batch order; kept for the
    current epoch."""
    if self._epoch[0] != epoch:
      rng = np.random.default_rng([self.seed, epoch, 2])
      perm = rng.permutation(len(self.lens))
      rows = packing.first_fit_decreasing(self.lens[perm], self.cap, self.window,
                                          self.max_segments)
      self._epoch = (epoch, [perm[rows[i]] for i in rng.permutation(len(rows))])
    return self._epoch[1]

  def rows(self, step: int) -> list[np.ndarray]:
    """Up to B rows of train step `step` (fewer only at the end of a short epoch)."""
    e, i = divmod(int(step), self.steps_per_epoch)
    return self.epoch_rows(e)[i * self.B:(i + 1) * self.B]


@dataclasses.dataclass
class Task:
  """Base: subclasses set the arrays and implement train_batch / eval_batches.

  name and metric are the task's registry record's (data/tasks/: `create` sets them)."""
  config: object
  name: str = ""
  metric: str = ""              # the task metric recorded with eval_loss
  model_overrides: dict = dataclasses.field(default_factory=dict)
  # Why config.packing cannot pack this task's train batches (None: it packs them);
  # trainer.config.validate refuses packing=True with it, naming the key.
  no_packing: str | None = "its rows have no padding to remove"
  # This process's rows of every train batch (a slice of its batch_size rows; the
  # trainer sets trainer.parallel.local_rows in a multi-process run): train_batch(step)
  # then returns those rows alone, in their global order, and reads no other example;
  # None: every row (one process).
  rows: slice | None = None
  # The same for every eval batch (a slice of its eval_batch_size rows; the trainer's
  # evaluation sets local_rows in a multi-process run): eval_batches() then yields
  # those rows alone of each batch, padding rows included, and reads no other example.
  eval_rows: slice | None = None

  def _span(self, n: int) -> slice:
    """self.rows as a slice(start, stop) of a batch of n rows (all of them if None)."""
    return slice(0, n) if self.rows is None else slice(*self.rows.indices(n)[:2])

  def _eval_span(self) -> slice:
    """self.eval_rows as a slice(start, stop) of an eval batch's eval_batch_size rows
    (all of them if None)."""
    B = int(self.config.eval_batch_size)
    return slice(0, B) if self.eval_rows is None else \
        slice(*self.eval_rows.indices(B)[:2])

  def _eval_parts(self, n_total: int) -> Iterator[tuple[int, int, int]]:
    """(start, stop, rows) of this process's part (`eval_rows`) of each eval batch of
    a split of n_total examples (`_eval_rows`): it reads the split's examples
    [start, stop), and pads them with zeros to `rows` rows (`_pad_rows`), the padding
    rows of a last partial batch that fall in its part."""
    span = self._eval_span()
    for i, j in _eval_rows(n_total, self.config):
      yield min(i + span.start, j), min(i + span.stop, j), span.stop - span.start

  def _fixed_batches(self, x, w=None) -> Iterator[dict]:
    """This process's part of each eval batch of the fixed sequences x (N, T): {"y":
    rows of x, "w": w's rows (N, T) float32, or ones}, padded as `_eval_parts` says."""
    for i, j, B in self._eval_parts(len(x)):
      y = x[i:j]
      yield _pad_rows({"y": y, "w": np.ones(y.shape, np.float32) if w is None
                       else w[i:j]}, B)

  def _mine(self, x_B):
    """This process's part (`rows`) of a per-row array of the whole batch: the
    example indices, window starts or generated rows of a step, cut before any
    example is read, so that each process decodes only its own."""
    return x_B if self.rows is None else x_B[self._span(len(x_B))]

  @property
  def seed(self):
    return int(self.config.seed)

  def eval_batches(self) -> Iterator[dict]:
    raise NotImplementedError

  @property
  def seq_len(self) -> int:
    """Tokens per (target) sequence of this task."""
    raise NotImplementedError


def _mnist_tokens(split: str, data_dir, shift: str, side: int):
  """(pixel tokens int32 (N, side²), labels) of an MNIST split, optionally shifted;
  cached (read-only) because every task, eval and study run would re-read it, per
  (split, data dir, shift, side, the TFDS build's key): a rebuilt dataset is read anew."""
  from data import builders
  root = str(data.fetch.resolve_data_dir(data_dir))
  return _mnist_tokens_of(split, root, shift, side, builders.build_key("mnist", root))


@functools.lru_cache(maxsize=8)
def _mnist_tokens_of(split: str, data_dir: str, shift: str, side: int, key: str):
  del key          # only the cache's key: the build whose arrays these are
  imgs, labels = data.mnist_arrays(split, data_dir)
  if shift:
    from data import shifts
    name, strength = shifts.parse(shift)
    imgs = shifts.to_uint8(shifts.apply(name, imgs, strength))
  if side != 28:
    imgs = resize(imgs, side)
  x = imgs.reshape(len(imgs), side * side).astype(np.int32)
  x.flags.writeable = labels.flags.writeable = False
  return x, labels


class Mnist(Task):
  """Images as raster-order pixel sequences of image_size² tokens in 0..255, of
  MNIST or (config.shift) one of its shifts in data/shifts.py."""
  no_packing = "every image is the same number of pixel tokens: no row has padding"

  def __init__(self, config):
    super().__init__(config, model_overrides={"vocab_size": 256})
    s = int(config.get("image_size", 28))
    self.side = s
    self.train_x, self.train_y = self._load("train", s)
    self.test_x, self.test_y = self._load("test", s)
    self._hold_out()

  def _hold_out(self):
    """studies.core.protocol: the last `mnist_validation` training images held out as the
    validation split (0: none; training on all 60,000 and evaluating on test, as every
    run before the protocol did)."""
    k = int(self.config.get("mnist_validation", 0) or 0)
    self.eval_split = _split_name(self.config)
    if k:       # (np.asarray: a lazy train split's held-out part read once, here)
      self.val_x, self.val_y = np.asarray(self.train_x[-k:]), np.asarray(self.train_y[-k:])
      self.train_x, self.train_y = self.train_x[:-k], self.train_y[:-k]
    else:
      self.val_x, self.val_y = self.test_x, self.test_y

  def _load(self, split, s):
    return _mnist_tokens(split, self.config.data_dir or None,
                         self.config.get("shift", ""), s)

  @property
  def seq_len(self):
    return self.train_x.shape[1]

  def train_batch(self, step):
    rows = self._mine(_epoch_rows(self.seed, step, self.config.batch_size,
                                  len(self.train_x)))
    y = self.train_x[rows]
    return {"y": y, "w": np.ones(y.shape, np.float32)}

  def eval_batches(self):
    yield from self._fixed_batches(self.test_x if self.eval_split == "test"
                                   else self.val_x)


def _split_name(config) -> str:
  """config.eval_split: "validation" (the default: what training evaluates on) or
  "test" (eval.py's, for a study's reported figure)."""
  split = str(config.get("eval_split", "validation") or "validation")
  if split not in ("validation", "test"):
    raise ValueError(f"eval_split: {split!r}; valid: validation, test")
  return split


def resize(imgs_N28, s):
  """Area-average (or nearest for non-divisors) resize of (N, 28, 28) uint8 to (N, s, s)."""
  if 28 % s == 0:
    f = 28 // s
    return imgs_N28.reshape(-1, s, f, s, f).mean((2, 4)).round().astype(np.uint8)
  idx = (np.arange(s) * 28 // s)
  return imgs_N28[:, idx][:, :, idx]


def _eval_rows(n_total: int, config) -> Iterator[tuple[int, int]]:
  """(start, stop) rows of each eval batch: config.eval_batches batches of
  eval_batch_size (0: the whole split, its last batch partial)."""
  B, k = int(config.eval_batch_size), int(config.eval_batches)
  n = n_total if not k else min(n_total, k * B)
  for i in range(0, n, B):
    yield i, min(i + B, n)


def _pad_rows(batch: dict, B: int) -> dict:
  """A partial eval batch padded to B rows with zeros (weight 0: padding rows count
  in no loss, accuracy or sequence count), so that one compiled shape serves all."""
  n = len(next(iter(batch.values())))
  if n == B:
    return batch
  return {k: np.concatenate([v, np.zeros((B - n,) + v.shape[1:], v.dtype)])
          for k, v in batch.items()}


def _fixed_batches(x, config, w=None):
  """The eval batches of the fixed sequences x (N, T) under `config` (one process's:
  every row; `Task._fixed_batches`)."""
  yield from Task(config)._fixed_batches(x, w)


class _Windows(Task):
  """A language model over windows of a free length (Shakespeare's characters, a text
  corpus's bytes): seq_len tokens per training window, eval_seq_len per evaluation
  window (config.eval_seq_len, or seq_len if 0/unset)."""

  @property
  def seq_len(self):
    return int(self.config.seq_len)

  @property
  def eval_seq_len(self):
    return int(self.config.get("eval_seq_len", 0) or self.config.seq_len)


class Shakespeare(_Windows):
  """Random windows of seq_len characters (train); consecutive, non-overlapping windows
  of eval_seq_len characters (validation; 0: seq_len), so that a model trained at L can
  be evaluated at 2L, 4L, ... (Press et al.'s length extrapolation, on the same text:
  the windows cover the first n * T characters of the split)."""
  no_packing = ("its rows are windows of one continuous text, every token real: there "
                "is no padding to remove (packing would only cut the context at "
                "arbitrary segment boundaries)")

  def __init__(self, config):
    self.vocab = data.vocab_shakespeare(config.data_dir or None)
    super().__init__(config, model_overrides={"vocab_size": len(self.vocab)})
    self.train_ids = data.shakespeare_ids("train", config.data_dir or None).astype(np.int32)
    self.val_ids = data.shakespeare_ids("validation", config.data_dir or None).astype(np.int32)
    # studies.core.protocol: the test split, the last `test_fraction` of the training
    # characters, held out of training (0: none, as every run before the protocol)
    frac = float(config.get("test_fraction", 0.0) or 0.0)
    cut = len(self.train_ids) - int(round(frac * len(self.train_ids)))
    self.train_ids, self.test_ids = self.train_ids[:cut], self.train_ids[cut:]
    self.eval_split = _split_name(config)
    if self.eval_split == "test" and not len(self.test_ids):
      raise ValueError("shakespeare has no test split unless test_fraction > 0 (the "
                       "protocol's 0.05: studies/PROTOCOL.md)")
    T = self.eval_seq_len
    ids = self.test_ids if self.eval_split == "test" else self.val_ids
    n = (len(ids) // T) * T
    self.val_windows = ids[:n].reshape(-1, T)

  def train_batch(self, step):
    T, B = int(self.config.seq_len), int(self.config.batch_size)
    rng = np.random.default_rng([self.seed, int(step)])
    starts = self._mine(rng.integers(0, len(self.train_ids) - T, size=B))
    y = self.train_ids[starts[:, None] + np.arange(T)]
    return {"y": y, "w": np.ones(y.shape, np.float32)}

  def eval_batches(self):
    yield from self._fixed_batches(self.val_windows)

  def decode(self, ids):
    return "".join(self.vocab[int(i)] for i in ids)

  def encode(self, text):
    return np.array([self.vocab.index(c) for c in text], np.int32)


class Text(_Windows):
  """A byte-level LM over the user's own text files (config.text.files: a glob or a
  directory; data.builders.text_corpus says which files, and how each document goes
  to train / validation / test by a hash of its name). Vocabulary: the 256 byte
  values (the model's start token, id 256, begins every window).

  Train rows: windows of seq_len bytes cut inside one document, never across two:
  a window start drawn uniformly from every start of the train split (a document of
  L >= seq_len bytes has L - seq_len + 1, a shorter one one: the whole document,
  padded with weight 0), from (seed, step) alone, vectorised over the batch.
  Evaluation: each document of the split cut into consecutive windows of
  eval_seq_len bytes (0: seq_len), its last window padded with weight 0, so that
  every byte of the split is scored once.

  Raises data.fetch.DataError (one line) for an empty glob, a file that is not UTF-8
  text, an empty validation split (fewer than 2 documents) or a train split of fewer
  bytes than one batch (batch_size * seq_len).
  """
  no_packing = ("its rows are windows inside one document, every token real: there is "
                "no padding to remove")

  def __init__(self, config):
    from data import builders
    super().__init__(config, model_overrides={"vocab_size": 256})
    t = config.text
    self.corpus = builders.text_corpus(t.files, float(t.validation_fraction),
                                            float(t.test_fraction))
    n = {s: len(self.corpus.names(s)) for s in ("train", "validation", "test")}
    if not n["validation"]:
      raise data.DataError(f"text.files={t.files!r}: {len(self.corpus.docs)} document(s), "
                           "none for validation: the text task needs at least 2 files")
    self.eval_split = _split_name(config)
    if self.eval_split == "test" and not n["test"]:
      raise data.DataError(f"text.files={t.files!r}: no document of the "
                           f"{len(self.corpus.docs)} is in the test split (3 or more "
                           "files make one)")
    root = config.data_dir or None
    self.train_ids, self.train_offsets, _ = builders.text_documents(
        self.corpus, "train", root)
    T, B = self.seq_len, int(config.batch_size)
    if len(self.train_ids) < B * T:
      raise data.DataError(
          f"text.files={t.files!r}: the train split holds {len(self.train_ids):,} bytes "
          f"in {n['train']} document(s), fewer than one batch of batch_size x seq_len "
          f"= {B} x {T} = {B * T:,}: add files, or lower batch_size or seq_len")
    lens = np.diff(self.train_offsets)
    self._starts = np.maximum(lens - T + 1, 1)          # window starts per document
    self._cum = np.cumsum(self._starts)
    ids, offsets, _ = builders.text_documents(self.corpus, self.eval_split, root)
    self.val_windows, self.val_weights = _doc_windows(ids, offsets, self.eval_seq_len)

  def train_batch(self, step):
    T, B = self.seq_len, int(self.config.batch_size)
    rng = np.random.default_rng([self.seed, int(step)])
    u = self._mine(rng.integers(0, int(self._cum[-1]), size=B))
    doc = np.searchsorted(self._cum, u, side="right")   # the document of each start
    start = self.train_offsets[doc] + u - (self._cum[doc] - self._starts[doc])
    idx = start[:, None] + np.arange(T)
    real = idx < self.train_offsets[doc + 1][:, None]   # inside the document
    y = np.where(real, self.train_ids[np.minimum(idx, len(self.train_ids) - 1)], 0)
    return {"y": y.astype(np.int32), "w": real.astype(np.float32)}

  def eval_batches(self):
    yield from self._fixed_batches(self.val_windows, self.val_weights)

  def decode(self, ids):
    """Bytes (ids < 256; the start token and anything past are dropped) as text, an
    invalid UTF-8 sequence (a sample cut mid-character) replaced by U+FFFD."""
    b = np.asarray(ids).reshape(-1)
    return bytes(b[(b >= 0) & (b < 256)].astype(np.uint8)).decode("utf-8", "replace")

  def encode(self, text):
    return np.frombuffer(str(text).encode("utf-8"), np.uint8).astype(np.int32)


def _doc_windows(ids, offsets, T):
  """(windows int32 (n, T), weights float32 (n, T)): each document
  ids[offsets[i]:offsets[i + 1]] cut into consecutive windows of T, its last one
  padded with 0 (weight 0)."""
  lens = np.diff(offsets)
  per = -(-lens // T)                                     # windows per document
  doc = np.repeat(np.arange(len(lens)), per)
  first = np.cumsum(per) - per                            # each document's first window
  start = offsets[doc] + (np.arange(len(doc)) - first[doc]) * T
  idx = start[:, None] + np.arange(T)
  real = idx < offsets[doc + 1][:, None]
  win = np.where(real, ids[np.minimum(idx, max(len(ids) - 1, 0))], 0) if len(ids) else \
      np.zeros((0, T), np.int64)
  return win.astype(np.int32), real.astype(np.float32)


# The test split's generator of the copy and MQAR tasks (studies.core.protocol): 3 words,
# unlike the 2 of every train ([seed, step]) and validation ([seed, 2^31 - 1]) stream.
TEST_STREAM = (2 ** 31 - 1, 2 ** 31 - 2, 77)


class Copy(Task):
  """Fresh random copy sequences per step; 16 fixed eval batches from a held-out seed."""
  no_packing = "every sequence has the same length, 2 * copy_len + 2: no padding"

  def __init__(self, config):
    super().__init__(config, model_overrides={"vocab_size": 10})

  @property
  def seq_len(self):
    return 2 * int(self.config.copy_len) + 2

  def _batch(self, rng, B):
    y, w = data.copy_batch(rng, B, int(self.config.copy_len))
    return {"y": y.astype(np.int32), "w": w.astype(np.float32)}

  def train_batch(self, step):
    # the generator's stream is the data: the whole batch is drawn (microseconds) to
    # keep it, and this process's rows cut from it
    b = self._batch(np.random.default_rng([self.seed, int(step)]),
                    int(self.config.batch_size))
    return {k: self._mine(v) for k, v in b.items()}

  def eval_batches(self):
    # validation: a stream of the training seed past every train step (the one every
    # run before the protocol evaluated on); test: a stream of its own, the same for
    # every training seed, which no train or validation stream draws (2^31 - 2 is
    # never a train step, and no training seed is TEST_STREAM[0] with that step)
    rng = (np.random.default_rng(TEST_STREAM) if _split_name(self.config) == "test"
           else np.random.default_rng([self.seed, 2 ** 31 - 1]))
    # (the whole batch drawn, as train_batch's, and this process's rows cut from it)
    span = self._eval_span()
    for _ in range(int(self.config.eval_batches) or 16):
      b = self._batch(rng, int(self.config.eval_batch_size))
      yield {k: v[span] for k, v in b.items()}


class Mqar(Copy):
  """Multi-query associative recall (data/mqar.py): fresh sequences per step, like the
  copy task (its batches, held-out eval seed and loss weights), scored by the share of
  queried values predicted exactly (token_accuracy)."""

  def __init__(self, config):
    Task.__init__(self, config, model_overrides={"vocab_size": int(config.mqar.vocab_size)})

  @property
  def seq_len(self):
    return int(self.config.mqar.seq_len)

  def _batch(self, rng, B):
    m = self.config.mqar
    y, w = mqar.mqar_batch(rng, B, vocab_size=int(m.vocab_size),
                           num_pairs=int(m.num_pairs), seq_len=int(m.seq_len),
                           power_a=float(m.power_a))
    return {"y": y, "w": w}

  def train_batch(self, step):
    # mqar.train_mix: training rows over a mixture of shapes (data.mqar.mixed_batch);
    # evaluation stays on (seq_len, num_pairs) alone
    m = self.config.mqar
    mix = mqar.parse_mix(m.get("train_mix", ""))
    if not mix:
      return super().train_batch(step)
    y, w = mqar.mixed_batch(np.random.default_rng([self.seed, int(step)]),
                            int(self.config.batch_size), vocab_size=int(m.vocab_size),
                            num_pairs=int(m.num_pairs), seq_len=int(m.seq_len), mix=mix,
                            power_a=float(m.power_a))
    return {"y": self._mine(y), "w": self._mine(w)}


def _bucket(width: int, buckets: tuple) -> int | None:
  """The smallest bucket >= width (None, i.e. no cut, if none is)."""
  return next((b for b in sorted(buckets) if b >= width), None)


class _Lazy(dict):
  """{key: make(key)}, each value made on its first lookup and kept."""

  def __init__(self, make):
    super().__init__()
    self._make = make

  def __missing__(self, key):
    self[key] = value = self._make(key)
    return value


class Multi30k(Task):
  """English -> German sentence pairs as sentencepiece ids (a shared vocabulary).

  config.packing: train batches of batch_size rows of (src_len, tgt_len) tokens, each
  pair's source and target packed side by side under one segment id (`Packer`)."""
  no_packing = None

  def __init__(self, config):
    import sentencepiece as spm
    path = data.multi30k_spm(config.data_dir or None, vocab_size=int(config.spm_vocab_size))
    self.sp = spm.SentencePieceProcessor(model_file=str(path))
    super().__init__(config, model_overrides={"vocab_size": self.sp.get_piece_size(),
                                              "pad_id": 0, "bos_id": 1, "eos_id": 2})
    self.eval_split = str(config.get("eval_split", "validation"))   # eval.py: "test"
    # each split is read and encoded when first used: eval.py never reads the 29,000
    # training pairs (~3 s of TFDS parsing on a CPU), train.py reads both
    self.splits = _Lazy(self._encode)

  def _encode(self, split):
    pairs = data.multi30k_pairs(split, self.config.data_dir or None)
    S, T = int(self.config.src_len), int(self.config.tgt_len)
    src = np.zeros((len(pairs), S), np.int32)
    tgt = np.zeros((len(pairs), T), np.int32)
    refs = []
    for i, (en, de) in enumerate(pairs):
      a = self.sp.encode(en)[:S - 1] + [2]
      b = self.sp.encode(de)[:T - 1] + [2]
      src[i, :len(a)] = a
      tgt[i, :len(b)] = b
      refs.append(de)
    return src, tgt, refs

  @property
  def seq_len(self):
    return int(self.config.tgt_len)

  def _pack(self, src, tgt):
    return {"src": src, "y": tgt, "w": (tgt != 0).astype(np.float32)}

  def train_batch(self, step):
    src, tgt, _ = self.splits["train"]
    if self.config.get("packing"):
      return self._packed_batch(step)
    buckets = tuple(int(b) for b in self.config.get("length_buckets", ()) or ())
    if not buckets:
      rows = self._mine(_epoch_rows(self.seed, step, self.config.batch_size, len(src)))
      return self._pack(src[rows], tgt[rows])
    B = int(self.config.batch_size)
    per_epoch = len(src) // B
    epoch = int(step) // per_epoch
    if getattr(self, "_plan", (None,))[0] != (epoch, B):
      self._plan = ((epoch, B), self._bucket_plan(epoch, B))
    plan = self._plan[1]
    rows = plan[int(step) % per_epoch]
    # the bucket of the whole batch (every process cuts to the same width), from the
    # lengths alone; then only this process's rows are read
    lens = self._train_lengths[:, rows]
    L = _bucket(max(1, int(lens.max(initial=0))), buckets)
    rows = self._mine(rows)
    return self._pack(src[rows, :L], tgt[rows, :L])

  @functools.cached_property
  def _train_lengths(self) -> np.ndarray:
    """(2, N) int64: the source and target tokens of each training pair, up to its
    last nonzero id (`packing.lengths`), so that a batch's bucket is found without
    reading its rows."""
    src, tgt, _ = self.splits["train"]
    return np.stack([packing.lengths(src), packing.lengths(tgt)])

  @functools.cached_property
  def packer(self) -> Packer:
    """The train split's packed rows (config.packing): sources and targets side by
    side in rows of (src_len, tgt_len) tokens."""
    src, tgt, _ = self.splits["train"]
    lens = np.stack([packing.lengths(src), packing.lengths(tgt)], 1)
    return Packer(lens, (src.shape[1], tgt.shape[1]), int(self.config.batch_size),
                  self.seed)

  def _packed_batch(self, step) -> dict:
    """Train batch `step` packed (module docstring): src, src_seg, src_pos (B, S); y,
    y_seg, y_pos, w (B, T); example i's two segments have the same id."""
    src, tgt, _ = self.splits["train"]
    span = self._span(self.packer.B)       # this process's rows of the B
    rows = self.packer.rows(step)[span]
    B = span.stop - span.start
    s = packing.place(src, rows, src.shape[1], B)
    t = packing.place(tgt, rows, tgt.shape[1], B)
    return {"src": s["x"], "src_seg": s["seg"], "src_pos": s["pos"],
            "y": t["x"], "y_seg": t["seg"], "y_pos": t["pos"],
            "w": (t["seg"] != 0).astype(np.float32)}

  def _bucket_plan(self, epoch: int, B: int) -> np.ndarray:
    """(N // B, B) rows of each batch of `epoch`, grouped by length.

    A seeded permutation of the epoch is cut into windows of 64 batches; each window
    is sorted by length (the longer of source and target) and cut into batches, and
    the batches are shuffled. Each batch is then cut to the smallest of
    config.length_buckets that holds it (not cut if none does), so a batch of short
    sentences costs a short step, and a jitted step compiles once per bucket. The plan is a pure function of
    (seed, epoch), so resumed runs see the same batches. The N % B examples left over
    differ per epoch.
    """
    src, tgt, _ = self.splits["train"]
    n = len(src)
    lens = np.maximum((src != 0).sum(1), (tgt != 0).sum(1))
    rng = np.random.default_rng([self.seed, epoch, 1])
    perm = rng.permutation(n)[:n // B * B]
    W = 64 * B
    for i in range(0, len(perm), W):
      win = perm[i:i + W]
      perm[i:i + W] = win[np.argsort(lens[win], kind="stable")]
    batches = perm.reshape(-1, B)
    return batches[rng.permutation(len(batches))]

  def eval_batches(self):
    src, tgt, _ = self.splits[self.eval_split]
    for i, j, B in self._eval_parts(len(src)):
      yield _pad_rows(self._pack(src[i:j], tgt[i:j]), B)

  def detokenize(self, ids):
    ids = [int(i) for i in ids]
    if 2 in ids:
      ids = ids[:ids.index(2)]
    return self.sp.decode([i for i in ids if i > 2])


class TfdsImages(Mnist):
  """Any TFDS image dataset by name (config.tfds_name) as a pixel-sequence LM task.

  Each image (H, W[, C]) uint8 becomes H*W*C tokens in raster order, channels
  interleaved. The project's own builders (attnlab_mnist) are read through
  `data.load`; a stock name (e.g. cifar10) goes to `tfds.data_source`, which
  prepares it under <data_dir>/tfds where the environment can (stock builders may
  need TensorFlow or internet to prepare; the error is TFDS's own).
  config.tfds_splits = "train,test": the train and eval splits.

  The train split is read by index as batches need it (`SourceRows`): each train
  batch decodes its rows from the data source (a process, only its own rows: `rows`)
  and nothing is held in memory; the eval split (and the held-out validation
  images) are read whole at start.
  """

  def __init__(self, config):
    Task.__init__(self, config, model_overrides={"vocab_size": 256})
    self.side = None
    train, test = str(config.get("tfds_splits", "train,test")).split(",")
    self.train_x, self.train_y = self._load_split(train)
    self.test_x, self.test_y = (np.asarray(a) for a in self._load_split(test))
    self._hold_out()

  def _load_split(self, split) -> tuple[SourceRows, SourceRows]:
    """(images int32 (N, H*W*C), labels int64 (N,), -1 where there is none) of a
    split, as SourceRows: nothing read but its first image (the shape)."""
    name = str(self.config.tfds_name)
    if name.startswith("attnlab_"):
      src = data.load(name, split, self.config.data_dir or None)
    else:
      import tensorflow_datasets as tfds
      d = data.fetch.resolve_data_dir(self.config.data_dir or None) / "tfds"
      src = tfds.data_source(name, split=split, data_dir=str(d))
    shape = np.shape(src[0]["image"])
    if self.side is None:
      self.image_shape = shape
      side = int(np.sqrt(np.prod(shape)))
      self.side = side if side * side == np.prod(shape) else None
    D = int(np.prod(shape))
    images = lambda ex: np.array([np.asarray(e["image"], np.uint8).reshape(D) for e in ex],
                                 np.int32).reshape(len(ex), D)
    labels = lambda ex: np.array([int(e.get("label", -1)) for e in ex], np.int64)
    return SourceRows(src, images, (D,)), SourceRows(src, labels, ())


class SourceRows:
  """One feature of a data source's examples (TFDS `data_source`: len(src),
  src.__getitems__(ids) -> feature dicts) as a read-only array read by index on
  demand: x[ids] (ids an int array of any shape) decodes those examples alone into
  an array ids.shape + row_shape; x[a:b] is a part of it, read nothing yet;
  np.asarray(x) reads every example; len(x) and x.shape as an array's.

  Args:
    src: the data source.
    convert: [feature dict, ...] -> array (n,) + row_shape of those examples.
    row_shape: the shape of one example's row.
    index: the source's examples this array holds, in order (default all).
  """

  def __init__(self, src, convert, row_shape: tuple, index=None):
    self.src, self.convert, self.row_shape = src, convert, tuple(row_shape)
    self.index = np.arange(len(src)) if index is None else np.asarray(index)

  def __len__(self) -> int:
    return len(self.index)

  @property
  def shape(self) -> tuple:
    return (len(self.index),) + self.row_shape

  def __getitem__(self, ids):
    if isinstance(ids, slice):
      return SourceRows(self.src, self.convert, self.row_shape, self.index[ids])
    at = np.asarray(self.index[ids])
    flat = [int(i) for i in at.reshape(-1)]
    ex = self.src.__getitems__(flat) if hasattr(self.src, "__getitems__") \
        else [self.src[i] for i in flat]
    return self.convert(list(ex)).reshape(at.shape + self.row_shape)

  def __array__(self, dtype=None, copy=None):
    x = self[np.arange(len(self))]
    return x if dtype is None else x.astype(dtype)


def packed_labels(config) -> int:
  """M, the label slots per packed ListOps row: every sequence has more than
  listops.min_length tokens, so a row of max_length holds at most
  max_length // (min_length + 1) of them."""
  return max(1, int(config.listops.max_length) // (int(config.listops.min_length) + 1))


class ListOps(Task):
  """LRA's ListOps generated by the project (data/listops.py): src (B, L) token ids
  padded with 0, y (B, 1) the label 0..9, w (B, 1) ones (a classifier's batch).

  config.packing: train batches of batch_size rows of max_length tokens, several
  sequences each, with one label slot per segment (module docstring).

  The splits are a pure function of config.listops (seed, sizes, lengths); they are
  generated once and cached under <data_dir>/listops/ (a few seconds to minutes)."""

  def __init__(self, config):
    super().__init__(config, model_overrides={"vocab_size": listops.NUM_CLASSES,
                                              "src_vocab_size": listops.VOCAB_SIZE,
                                              "pad_id": listops.PAD})
    self.splits = _listops_splits(**config.listops.to_dict(),
                                  data_dir=config.data_dir or None)
    self.eval_split = str(config.get("eval_split", "validation"))     # eval.py: "test"

  no_packing = None

  @property
  def seq_len(self):
    return int(self.config.listops.max_length)

  @functools.cached_property
  def packer(self) -> Packer:
    """The train split's packed rows (config.packing): rows of listops.max_length
    tokens, at most PACKED_LABELS sequences each (`packed_labels`)."""
    x, _ = self.splits["train"]
    return Packer(packing.lengths(x)[:, None], (x.shape[1],),
                  int(self.config.batch_size), self.seed,
                  max_segments=packed_labels(self.config))

  def _packed_batch(self, step) -> dict:
    """Train batch `step` packed: src, src_seg, src_pos (B, L); y, w (B, M): the label
    of segment m + 1 in column m, w = 1 where that segment exists."""
    x, y = self.splits["train"]
    span = self._span(self.packer.B)       # this process's rows of the B
    rows = self.packer.rows(step)[span]
    B, M = span.stop - span.start, self.packer.max_segments
    p = packing.place(x, rows, x.shape[1], B)       # its rows alone, then int32
    lab = np.zeros((B, M), y.dtype)
    w = np.zeros((B, M), np.float32)
    for r, members in enumerate(rows):
      lab[r, :len(members)] = y[members]
      w[r, :len(members)] = 1.0
    return {"src": p["x"].astype(np.int32), "src_seg": p["seg"], "src_pos": p["pos"],
            "y": lab, "w": w}

  def train_batch(self, step):
    x, y = self.splits["train"]
    if self.config.get("packing"):
      return self._packed_batch(step)
    rows = self._mine(_epoch_rows(self.seed, step, self.config.batch_size, len(x)))
    return {"src": x[rows].astype(np.int32), "y": y[rows, None],
            "w": np.ones((len(rows), 1), np.float32)}

  def eval_batches(self):
    x, y = self.splits[self.eval_split]
    for i, j, B in self._eval_parts(len(x)):
      yield _pad_rows({"src": x[i:j].astype(np.int32), "y": y[i:j, None],
                       "w": np.ones((j - i, 1), np.float32)}, B)


@functools.lru_cache(maxsize=2)
def _listops_splits(data_dir=None, **kw):
  """data.listops.splits(**kw), cached in memory and under <data_dir>/listops/."""
  import hashlib
  import json
  from data import fetch
  key = hashlib.sha256(json.dumps(kw, sort_keys=True).encode()).hexdigest()[:12]
  path = fetch.resolve_data_dir(data_dir) / "listops" / f"listops_{key}.npz"
  if path.exists():
    z = np.load(path)
    return {s: (z[f"{s}_x"], z[f"{s}_y"]) for s in ("train", "validation", "test")}
  out = listops.splits(**kw)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(".tmp.npz")
  np.savez_compressed(tmp, **{f"{s}_{a}": v for s, (x, y) in out.items()
                              for a, v in (("x", x), ("y", y))})
  tmp.replace(path)
  return out


def create(config) -> Task:
  """The batches of the task named by config.task, built as its registry record says
  (data/tasks/: `data.tasks.create`); an unknown name lists the valid ones."""
  from data import tasks
  return tasks.create(config)
