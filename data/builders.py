"""The project's TFDS datasets, built from the raw files of `data.fetch`.

Each builder reads its verified raw files (`fetch.require`, so a missing file is
a one-line `DataError`), writes `array_record` files under `<data_dir>/tfds`, and
is read back with `tfds.data_source` as a random-access source: `len(src)`,
`src[i]` -> dict of numpy arrays / Python scalars / bytes. Examples keep the
order of the raw files (shuffling is the input pipeline's job). No TensorFlow is
needed: features are numpy-encoded `Tensor`s (uint8 data stored as raw bytes)
and `Text`, and nothing goes through `dl_manager` (whose extraction needs TF).

Datasets (`load(name, split)`, name with or without the `attnlab_` prefix):
  attnlab_mnist            train 60000, test 10000:
                             image uint8 (28, 28), 0 = background, 255 = ink;
                             label: ClassLabel(10), an int64 class id
                             (a Python int per example).
  attnlab_tiny_shakespeare train / validation = first 90% / last 10% of the
                           characters (nanoGPT split), in order, as chunks of
                           `CHUNK` characters (the last chunk may be shorter):
                             ids uint8 (n,), ids into `vocab_shakespeare()`;
                             index int64 (), the chunk number in its split.
                           Split sizes: 981 / 109 chunks.
  attnlab_multi30k         train 29000, validation 1014, test 1000
                           (test = test_2016_flickr), aligned sentence pairs:
                             en, de: bytes (UTF-8 text); index int64 ().
  attnlab_text             the user's own text files (`text_corpus`: a glob or a
                           directory), one example per file (document), split
                           into train / validation / test by a hash of the
                           file's name (`text_split`); prepared once per corpus
                           under <data_dir>/tfds/text/<corpus key>/:
                             bytes uint8 (n,), the file's bytes;
                             name: the file's name relative to the corpus root;
                             index int64 (), the document's number in its split.

`multi30k_spm()` trains (once) the shared en+de sentencepiece model.
"""
import dataclasses
import functools
import glob
import gzip
import hashlib
import io
import json
import os
import pathlib
import re
import tempfile

from absl import logging
import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import tqdm_utils

from data import fetch

CHUNK = 1024  # Characters per Tiny Shakespeare example.
TFDS_SUBDIR = "tfds"  # <data_dir>/tfds holds the prepared TFDS datasets.
SPM_SUBDIR = "spm"  # <data_dir>/spm holds the sentencepiece models.
ARRAYS_SUBDIR = "arrays"  # <data_dir>/arrays: whole MNIST splits as .npz (mnist_arrays).

_SHORT = {"mnist": "attnlab_mnist",
          "tiny_shakespeare": "attnlab_tiny_shakespeare",
          "multi30k": "attnlab_multi30k"}


class _RawFilesBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Builds from `fetch.require(DATASET, raw_dir)` files, not from dl_manager."""

  DATASET = ""  # Key of `fetch.FILES`.
  # Bump VERSION whenever what a builder writes changes (e.g. CHUNK): prepared
  # data of the old version is otherwise reused.
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}

  def __init__(self, *, raw_dir=None, **kwargs):
    """raw_dir: root holding the raw files (default `fetch.default_data_dir()`)."""
    self._raw_dir = raw_dir
    super().__init__(**kwargs)

  def _raw_files(self) -> dict:
    return fetch.require(self.DATASET, self._raw_dir)

  # TFDS prints "Downloading and preparing dataset Unknown size ..." banners;
  # nothing is downloaded here, so log one plain line instead.
  def _log_download_bytes(self) -> None:
    logging.info("Preparing %s from %s into %s", self.name,
                 fetch.resolve_data_dir(self._raw_dir), self.data_dir)

  def _log_download_done(self) -> None:
    logging.info("Prepared %s in %s", self.name, self.data_dir)


class AttnlabMnist(_RawFilesBuilder):
  """MNIST digits from the original IDX files; image uint8 (28, 28), label."""

  name = "attnlab_mnist"
  DATASET = "mnist"

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description="MNIST handwritten digits (LeCun, Cortes & Burges), in the "
                    "order of the original IDX files.",
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Tensor(shape=(28, 28), dtype=np.uint8,
                                          encoding="bytes"),
            "label": tfds.features.ClassLabel(num_classes=10),
        }),
        supervised_keys=("image", "label"),
        disable_shuffling=True,
        homepage="http://yann.lecun.com/exdb/mnist/")

  def _split_generators(self, dl_manager):
    del dl_manager
    files = self._raw_files()
    return {split: self._generate_examples(files, prefix)
            for split, prefix in (("train", "train"), ("test", "t10k"))}

  def _generate_examples(self, files, prefix):
    images, labels = read_mnist(files, prefix)
    for i in range(len(labels)):
      yield i, {"image": images[i], "label": int(labels[i])}


class AttnlabTinyShakespeare(_RawFilesBuilder):
  """Tiny Shakespeare as in-order chunks of character ids (nanoGPT split)."""

  name = "attnlab_tiny_shakespeare"
  DATASET = "tiny_shakespeare"

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description="Tiny Shakespeare (char-rnn), character level. Each example "
                    f"is the next chunk of up to {CHUNK} characters of its "
                    "split, as ids into metadata['vocab'] (the sorted set of "
                    "characters of the file). train = first 90% of characters, "
                    "validation = last 10%.",
        features=tfds.features.FeaturesDict({
            "ids": tfds.features.Tensor(shape=(None,), dtype=np.uint8,
                                        encoding="bytes"),
            "index": tfds.features.Scalar(dtype=np.int64),
        }),
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(),
        homepage="https://github.com/karpathy/char-rnn")

  def _split_generators(self, dl_manager):
    del dl_manager
    text = read_text(self._raw_files()["tiny_shakespeare/input.txt"])
    vocab = "".join(sorted(set(text)))
    self.info.metadata["vocab"] = vocab
    ids = encode_chars(text, vocab)
    n_train = int(0.9 * len(ids))
    return {"train": self._generate_examples(ids[:n_train]),
            "validation": self._generate_examples(ids[n_train:])}

  def _generate_examples(self, ids):
    for i, start in enumerate(range(0, len(ids), CHUNK)):
      yield i, {"ids": ids[start:start + CHUNK], "index": i}


class AttnlabMulti30k(_RawFilesBuilder):
  """Multi30k task 1 English-German sentence pairs (raw, untokenised text)."""

  name = "attnlab_multi30k"
  DATASET = "multi30k"
  SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description="Multi30k task 1 (Elliott et al., 2016), English-German, "
                    "raw text; test is test_2016_flickr.",
        features=tfds.features.FeaturesDict({
            "en": tfds.features.Text(),
            "de": tfds.features.Text(),
            "index": tfds.features.Scalar(dtype=np.int64),
        }),
        supervised_keys=("en", "de"),
        disable_shuffling=True,
        homepage="https://github.com/multi30k/dataset")

  def _split_generators(self, dl_manager):
    del dl_manager
    files = self._raw_files()
    return {split: self._generate_examples(files, stem)
            for split, stem in self.SPLITS.items()}

  def _generate_examples(self, files, stem):
    en, de = (read_lines(files[f"multi30k/{stem}.{lang}.gz"])
              for lang in ("en", "de"))
    if len(en) != len(de):
      raise ValueError(f"multi30k/{stem}: {len(en)} English lines but "
                       f"{len(de)} German lines")
    for i, (e, d) in enumerate(zip(en, de)):
      yield i, {"en": e, "de": d, "index": i}


BUILDERS = {b.name: b for b in (AttnlabMnist, AttnlabTinyShakespeare,
                                AttnlabMulti30k)}


def read_mnist(files: dict, prefix: str):
  """Raw MNIST arrays: images uint8 (n, 28, 28), labels uint8 (n,).

  files: `fetch.require("mnist")`; prefix: "train" or "t10k".
  """
  with gzip.open(files[f"mnist/{prefix}-images-idx3-ubyte.gz"]) as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
  with gzip.open(files[f"mnist/{prefix}-labels-idx1-ubyte.gz"]) as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)
  if len(images) != len(labels):
    raise ValueError(f"mnist/{prefix}: {len(images)} images, {len(labels)} "
                     "labels")
  return images, labels


def read_text(path) -> str:
  """A UTF-8 file's text, newlines kept as-is."""
  with open(path, encoding="utf-8", newline="") as f:
    return f.read()


def read_lines(path) -> list:
  """Lines of a gzipped UTF-8 file without their final "\\n"."""
  with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
    lines = f.read().split("\n")
  return lines[:-1] if lines and not lines[-1] else lines


def encode_chars(text: str, vocab: str) -> np.ndarray:
  """Character ids uint8 (len(text),) into `vocab` (at most 256 characters).

  Raises ValueError for a character outside `vocab`.
  """
  if len(vocab) > 256:
    raise ValueError(f"vocabulary of {len(vocab)} characters does not fit uint8")
  codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
  table = np.full(max(map(ord, vocab), default=0) + 1, -1, np.int32)
  table[[ord(c) for c in vocab]] = np.arange(len(vocab))
  ids = table[np.minimum(codes, len(table) - 1)]
  bad = (ids < 0) | (codes >= len(table))
  if bad.any():
    i = int(np.argmax(bad))
    raise ValueError(f"character {text[i]!r} at offset {i} is not in the "
                     "vocabulary")
  return ids.astype(np.uint8)


def decode_chars(ids, vocab: str) -> str:
  """Inverse of `encode_chars`: ids (any int array) -> text."""
  return "".join(vocab[i] for i in np.asarray(ids).reshape(-1).tolist())


def _full_name(name: str) -> str:
  full = _SHORT.get(name, name)
  if full not in BUILDERS:
    raise ValueError(f"unknown dataset {name!r}; known: "
                     f"{', '.join(list(_SHORT) + list(BUILDERS))}")
  return full


_PREPARED = {}  # (full name, data dir) -> prepared builder.


def builder(name: str, data_dir=None) -> tfds.core.DatasetBuilder:
  """The prepared TFDS builder of `name`; builds it on first use.

  Preparation reads the raw files under `data_dir` (default
  `fetch.default_data_dir()`; missing ones raise `fetch.DataError`) and writes
  `<data_dir>/tfds/<name>/1.0.0/`. A file lock makes concurrent callers build
  once.
  """
  full = _full_name(name)
  root = fetch.resolve_data_dir(data_dir)
  key = (full, str(root))
  if key not in _PREPARED:
    tfds_dir = root / TFDS_SUBDIR
    cls = BUILDERS[full]
    b = cls(raw_dir=root, data_dir=tfds_dir, file_format="array_record")
    if not _is_prepared(b):
      fetch.require(cls.DATASET, root)  # Fail early, before TFDS makes folders.
      with fetch.file_lock(tfds_dir / f".{full}.lock"):
        b = cls(raw_dir=root, data_dir=tfds_dir, file_format="array_record")
        if not _is_prepared(b):
          _download_and_prepare(b)
    _PREPARED[key] = b
  return _PREPARED[key]


def _is_prepared(b: tfds.core.DatasetBuilder) -> bool:
  # As `b.is_prepared()`, without its warning when the folder does not exist.
  version_dir = pathlib.Path(os.fspath(b.data_dir))
  return all((version_dir / f).is_file()
             for f in ("dataset_info.json", "features.json"))


def _download_and_prepare(b: tfds.core.DatasetBuilder) -> None:
  """Runs TFDS preparation quietly (no progress bars, no downloads)."""
  active = getattr(tqdm_utils, "_active", True)
  tfds.disable_progress_bar()
  try:
    b.download_and_prepare(download_config=tfds.download.DownloadConfig(
        try_download_gcs=False))
  finally:
    tfds.display_progress_bar(active)


def load(name: str, split: str, data_dir=None):
  """Random-access source of one split, prepared on first use.

  Args:
    name: "mnist", "tiny_shakespeare", "multi30k" (or with "attnlab_" prefix).
    split: e.g. "train", "test", "validation"; TFDS slicing ("train[:10%]") is
      accepted.
    data_dir: data root (default `fetch.default_data_dir()`).
  Returns:
    A TFDS `ArrayRecordDataSource`, as `tfds.data_source` returns (which is
    `tfds.builder(...).as_data_source(split)`): `len(src)`, `src[i]` -> feature dict (see the
    module docstring), `src.__getitems__(list_of_ints)` -> list of dicts.
  """
  return builder(name, data_dir).as_data_source(split=split)


def vocab_shakespeare(data_dir=None) -> str:
  """The 65 characters of Tiny Shakespeare, sorted; id i is character i."""
  return builder("tiny_shakespeare", data_dir).info.metadata["vocab"]


def multi30k_spm(data_dir=None, vocab_size: int = 8000,
                 model_type: str = "unigram") -> pathlib.Path:
  """Path of the shared English+German sentencepiece model of Multi30k.

  Trained once on the train split (en and de lines jointly, in file order, one
  thread, so the model is deterministic) and cached as
  `<data_dir>/spm/multi30k_<model_type>_<vocab_size>.model`. Special ids:
  pad 0 ("<pad>"), bos 1 ("<s>"), eos 2 ("</s>"), unk 3 ("<unk>"). Character
  coverage is 1.0; text is NFKC-normalised ("nmt_nfkc") before encoding.
  """
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel

  root = fetch.resolve_data_dir(data_dir)
  path = root / SPM_SUBDIR / f"multi30k_{model_type}_{vocab_size}.model"
  if path.is_file():
    return path
  files = fetch.require("multi30k", root)
  with fetch.file_lock(path.parent / f".{path.stem}.lock"):
    if path.is_file():  # Trained by another process meanwhile.
      return path
    lines = (read_lines(files["multi30k/train.en.gz"])
             + read_lines(files["multi30k/train.de.gz"]))
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0,
        pad_id=0, bos_id=1, eos_id=2, unk_id=3, num_threads=1,
        input_sentence_size=0, shuffle_input_sentence=False, minloglevel=2)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(buf.getvalue())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  return path


def build(name: str, data_dir=None) -> list:
  """Prepares the TFDS dataset `name` (and for multi30k the spm model).

  Returns one line per artefact, for `python -m data build`.
  """
  b = builder(name, data_dir)
  sizes = ", ".join(f"{s} {info.num_examples}" for s, info in
                    sorted(b.info.splits.items()))
  lines = [f"{b.name}: {sizes} -> {b.data_dir}"]
  if _full_name(name) == "attnlab_multi30k":
    lines.append(f"multi30k sentencepiece model -> {multi30k_spm(data_dir)}")
  return lines


def _read_all(src) -> list:
  """Every example of a data source, in order, as a list of feature dicts."""
  return list(src.__getitems__(list(range(len(src))))) if len(src) else []


def mnist_arrays(split: str, data_dir=None):
  """A whole MNIST split: images uint8 (N, 28, 28), labels int64 (N,), read-only.

  Parsing the 70,000 TFDS records costs ~10 s of Python per process, so a plain
  split is also kept as `<data_dir>/arrays/mnist_<split>_<key>.npz` (read in well
  under a second), where key hashes the TFDS build's dataset_info.json: a rebuilt
  dataset gets a new file. Cached per (split, data dir, key) in this process too."""
  root = str(fetch.resolve_data_dir(data_dir))
  return _mnist_arrays(split, root, build_key("mnist", root))


def build_key(name: str, data_dir=None) -> str:
  """16 hex digits of the sha256 of the TFDS build's dataset_info.json (which records
  the build's files and their example counts): it changes when the dataset is rebuilt,
  so caches keyed on it are never read stale. Costs one small file read."""
  info = pathlib.Path(os.fspath(builder(name, data_dir).data_dir)) / "dataset_info.json"
  return hashlib.sha256(info.read_bytes()).hexdigest()[:16]


@functools.lru_cache(maxsize=4)
def _mnist_arrays(split: str, root: str, key: str):
  b = builder("mnist", root)
  path = pathlib.Path(root) / ARRAYS_SUBDIR / f"mnist_{split}_{key}.npz"
  if split.isidentifier() and path.is_file():
    with np.load(path) as f:
      images, labels = f["images"], f["labels"]
  else:
    rows = _read_all(b.as_data_source(split=split))
    images = np.stack([r["image"] for r in rows]) if rows else np.zeros(
        (0, 28, 28), np.uint8)
    labels = np.array([r["label"] for r in rows], np.int64)
    if split.isidentifier():            # not a slice such as "train[:10%]"
      path.parent.mkdir(parents=True, exist_ok=True)
      with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz",
                                       delete=False) as tmp:
        np.savez(tmp, images=images, labels=labels)
      os.chmod(tmp.name, 0o644)
      os.replace(tmp.name, path)         # atomic: a reader never sees half a file
  images.flags.writeable = labels.flags.writeable = False
  return images, labels


def shakespeare_ids(split: str, data_dir=None) -> np.ndarray:
  """A whole Tiny Shakespeare split as character ids uint8 (n,), in order.

  Ids index `vocab_shakespeare(data_dir)`; train + validation ids concatenated
  decode to the whole file.
  """
  rows = _read_all(load("tiny_shakespeare", split, data_dir))
  if not rows:
    return np.zeros((0,), np.uint8)
  return np.concatenate([r["ids"] for r in sorted(rows,
                                                  key=lambda r: r["index"])])


def multi30k_pairs(split: str, data_dir=None) -> tuple:
  """A whole Multi30k split as ((english str, german str), ...), in file order.

  Cached per (split, data dir, `build_key`) in this process: parsing the 29,000 TFDS
  records of the train split costs ~3 s of Python, and a run that trains then
  evaluates (or a study that trains several variants in one process) reads it more
  than once; a rebuilt dataset is read again."""
  root = str(fetch.resolve_data_dir(data_dir))
  return _multi30k_pairs(split, root, build_key("multi30k", root))


@functools.lru_cache(maxsize=4)
def _multi30k_pairs(split: str, data_dir: str, key: str) -> tuple:
  rows = _read_all(load("multi30k", split, data_dir))
  return tuple((r["en"].decode("utf-8"), r["de"].decode("utf-8")) for r in rows)


# ---- text: the user's own files ------------------------------------------------------

TEXT_SUBDIR = "text"  # <data_dir>/tfds/text/<corpus key>/ holds each prepared corpus.
SPLITS = ("train", "validation", "test")


def text_split(name: str, validation_fraction: float, test_fraction: float) -> str:
  """The split of the document named `name` (its path relative to the corpus root)
  by rule 1 of `text_corpus`: h = the first 8 bytes of sha256(name, UTF-8) as a
  fraction of 2^64; "test" if h < test_fraction, "validation" if h < test_fraction +
  validation_fraction, else "train". A function of the name alone: the same file
  keeps its split whatever else the corpus holds, wherever the corpus lies."""
  h = _hash01(name)
  if h < test_fraction:
    return "test"
  return "validation" if h < test_fraction + validation_fraction else "train"


def _hash01(name: str) -> float:
  """The first 8 bytes of sha256(name, UTF-8) as a fraction of 2^64, in [0, 1)."""
  return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2 ** 64


@dataclasses.dataclass(frozen=True)
class Corpus:
  """The documents of a text corpus and their splits (`text_corpus`).

  root: the folder their names are relative to; docs: ((name, path, split), ...)
  sorted by name; key: 16 hex digits naming this corpus and its split (the names,
  sizes and modification times of its files, and the fractions): its prepared TFDS
  dataset's folder, so a changed file is prepared anew.
  """
  pattern: str
  root: str
  docs: tuple
  key: str

  def names(self, split: str) -> list:
    return [n for n, _, s in self.docs if s == split]


def text_corpus(pattern: str, validation_fraction: float = 0.1,
                test_fraction: float = 0.1) -> Corpus:
  """The documents of `pattern` and their splits; reads no file (it stats them).

  pattern: a directory (every file under it, at any depth, but those under a folder
    or with a name starting with "."), or a glob (`glob.glob`, ** recursive); each
    regular file (symlinks followed) of at least one byte is a document. A file
    reached twice (a symlink to another file of the corpus) counts once, under the
    smaller of its names.
  Names: each document's path relative to the root: the directory, or for a glob the
    folder before its first wildcard.
  Splits: 1. `text_split` of each name (train / validation / test by a hash of the
    name, stable); 2. in a small corpus, a split that rule 1 left empty (train, then
    validation, then test) takes the document of smallest hash of the split holding
    the most documents that can spare one (a split earlier in that order keeps one):
    2 documents make train + validation, 3 or more all three.
  Raises data.fetch.DataError (one line) where nothing matches, or only empty files.
  """
  p = os.path.expanduser(str(pattern or ""))
  if not p:
    raise fetch.DataError("text.files is empty: name your text with "
                          "--config.text.files=<glob or directory>")
  if os.path.isdir(p):
    root, found = p, []
    for d, dirs, names in os.walk(p, followlinks=True):
      dirs[:] = [x for x in dirs if not x.startswith(".")]     # not .git and the like
      found += [os.path.join(d, f) for f in names if not f.startswith(".")]
  else:
    head = re.split(r"[*?\[]", p, maxsplit=1)[0]
    root = head if head.endswith(os.sep) else os.path.dirname(head)
    found = glob.glob(p, recursive=True)
  files = {}
  for f in sorted(found):
    if os.path.isfile(f) and os.path.getsize(f) > 0:
      real = os.path.realpath(f)
      name = os.path.relpath(f, root or ".")
      if real not in files or name < files[real]:
        files[real] = name
  if not files:
    raise fetch.DataError(f"text.files={pattern!r}: " + (
        "no file matches" if not found else f"the {len(found)} paths it matches hold "
        "no non-empty regular file"))
  docs = sorted((name, real) for real, name in files.items())
  split = {n: text_split(n, validation_fraction, test_fraction) for n, _ in docs}
  for i, s in enumerate(SPLITS):                # rule 2: a small corpus
    held = {t: sorted((n for n in split if split[n] == t), key=_hash01) for t in SPLITS}
    if held[s]:
      continue
    # a split after s may give its last document, one before s keeps one
    donors = [t for j, t in enumerate(SPLITS) if len(held[t]) > (j < i)]
    if donors:
      split[held[max(donors, key=lambda t: len(held[t]))][0]] = s
  st = [(n, os.stat(r).st_size, os.stat(r).st_mtime_ns) for n, r in docs]
  key = hashlib.sha256(json.dumps([st, validation_fraction, test_fraction]).encode())
  return Corpus(str(pattern), os.path.abspath(root or "."),
                tuple((n, r, split[n]) for n, r in docs), key.hexdigest()[:16])


def check_text(name: str, raw: bytes) -> None:
  """Raises DataError unless `raw` is text: no NUL byte, valid UTF-8 (a binary file,
  or text in another encoding, is refused, naming the file and the offset)."""
  nul = raw.find(b"\0")
  if nul >= 0:
    raise fetch.DataError(f"text.files: {name} is not text (a NUL byte at offset "
                          f"{nul}): the text task reads UTF-8 text files only; narrow "
                          "the glob")
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise fetch.DataError(f"text.files: {name} is not UTF-8 text (byte "
                          f"0x{raw[e.start]:02x} at offset {e.start}): the text task "
                          "reads UTF-8 text files only; narrow the glob") from None


class AttnlabText(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """A text corpus (`Corpus`), one example per document, in name order per split."""

  name = "attnlab_text"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}

  def __init__(self, *, corpus: Corpus, **kwargs):
    self._corpus = corpus
    super().__init__(**kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description="A user's text files, one example per file, as bytes; split by a "
                    "hash of each file's name (data.builders.text_corpus).",
        features=tfds.features.FeaturesDict({
            "bytes": tfds.features.Tensor(shape=(None,), dtype=np.uint8,
                                          encoding="bytes"),
            "name": tfds.features.Text(),
            "index": tfds.features.Scalar(dtype=np.int64),
        }),
        disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {s: self._generate_examples(s) for s in SPLITS if self._corpus.names(s)}

  def _generate_examples(self, split):
    docs = [(n, r) for n, r, s in self._corpus.docs if s == split]
    for i, (name, real) in enumerate(docs):
      raw = pathlib.Path(real).read_bytes()
      yield i, {"bytes": np.frombuffer(raw, np.uint8), "name": name, "index": i}

  def _log_download_bytes(self) -> None:
    logging.info("Preparing the text corpus %s into %s", self._corpus.pattern,
                 self.data_dir)

  def _log_download_done(self) -> None:
    logging.info("Prepared the text corpus %s in %s", self._corpus.pattern, self.data_dir)


_TEXT = {}  # (corpus key, data dir) -> prepared builder.


def text_builder(corpus: Corpus, data_dir=None) -> tfds.core.DatasetBuilder:
  """The prepared TFDS builder of `corpus`; prepares it on first use, after checking
  every document (`check_text`), under <data_dir>/tfds/text/<corpus.key>/ (a file
  lock makes concurrent callers prepare once)."""
  root = fetch.resolve_data_dir(data_dir)
  key = (corpus.key, str(root))
  if key not in _TEXT:
    d = root / TFDS_SUBDIR / TEXT_SUBDIR / corpus.key
    b = AttnlabText(corpus=corpus, data_dir=d, file_format="array_record")
    if not _is_prepared(b):
      for name, real, _ in corpus.docs:
        check_text(name, pathlib.Path(real).read_bytes())
      with fetch.file_lock(d / ".attnlab_text.lock"):
        b = AttnlabText(corpus=corpus, data_dir=d, file_format="array_record")
        if not _is_prepared(b):
          _download_and_prepare(b)
    _TEXT[key] = b
  return _TEXT[key]


def text_documents(corpus: Corpus, split: str, data_dir=None):
  """One split of a text corpus: (bytes uint8 (n,) of its documents end to end, in
  name order; offsets int64 (k + 1,): document i is bytes[offsets[i]:offsets[i + 1]];
  names (k,)). An empty split: ((0,), (1,), ())."""
  if not corpus.names(split):
    return np.zeros((0,), np.uint8), np.zeros((1,), np.int64), ()
  rows = sorted(_read_all(text_builder(corpus, data_dir).as_data_source(split=split)),
                key=lambda r: r["index"])
  lens = np.array([len(r["bytes"]) for r in rows], np.int64)
  offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
  ids = np.concatenate([np.asarray(r["bytes"], np.uint8) for r in rows])
  names = tuple(r["name"].decode("utf-8") if isinstance(r["name"], bytes) else r["name"]
                for r in rows)
  return ids, offsets, names
