"""The data layer on the real files: fetch/verify, TFDS builders, spm, copy task.

The raw files come from the local mirror (`data.fetch.default_mirror()`, i.e.
$ATTNLAB_DATA_MIRROR or <repo>/../shared/data) into one temporary data dir per
test run (shared by pytest-xdist workers; builds are file-locked), never into
the repository's .data. Without the mirror the data tests skip.
"""
import gzip
import pathlib
import urllib.error

import numpy as np
import pytest

import data
from data import builders
from data import copy_task
from data import fetch

MNIST_TRAIN_CLASS_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265,
                            5851, 5949]
MNIST_TEST_CLASS_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974,
                           1009]
SHAKESPEARE = "tiny_shakespeare/input.txt"


def _mirror_or_skip(*datasets):
  mirror = fetch.default_mirror()
  missing = [rel for name in (datasets or fetch.DATASETS)
             for rel, _, _ in fetch.FILES[name] if not (mirror / rel).is_file()]
  if missing:
    pytest.skip(f"data mirror {mirror} lacks {missing[0]} (and "
                f"{len(missing) - 1} more); set ATTNLAB_DATA_MIRROR to a folder "
                "holding the raw files, laid out as data/fetch.py FILES")
  return mirror


@pytest.fixture(scope="session")
def data_dir(prepared_data):
  """The run's shared data dir (conftest.py), every raw file copied from the mirror
  and verified."""
  _mirror_or_skip()
  return pathlib.Path(prepared_data)


@pytest.fixture
def mirror():
  return _mirror_or_skip(SHAKESPEARE.split("/")[0])


# --- fetch ------------------------------------------------------------------


def test_files_table_matches_mirror_sha256sums(mirror):
  sums = mirror / "SHA256SUMS"
  if not sums.is_file():
    pytest.skip(f"{sums} not found")
  listed = dict(line.split()[::-1] for line in sums.read_text().splitlines()
                if line.strip())
  table = {rel: sha for files in fetch.FILES.values() for rel, sha, _ in files}
  assert table == listed
  for files in fetch.FILES.values():
    for rel, _, url in files:
      assert url.startswith("https://") and url.endswith(rel.split("/")[-1])


def test_default_dirs_follow_env(monkeypatch, tmp_path):
  monkeypatch.setenv("ATTNLAB_DATA_DIR", str(tmp_path / "d"))
  monkeypatch.setenv("ATTNLAB_DATA_MIRROR", str(tmp_path / "m"))
  assert fetch.default_data_dir() == tmp_path / "d"
  assert fetch.default_mirror() == tmp_path / "m"
  monkeypatch.delenv("ATTNLAB_DATA_DIR")
  monkeypatch.delenv("ATTNLAB_DATA_MIRROR")
  assert fetch.default_data_dir() == fetch.REPO_ROOT / ".data"
  assert fetch.default_mirror() == fetch.REPO_ROOT.parent / "shared" / "data"


def test_require_missing_file_is_one_line_naming_path_and_the_fix(tmp_path, monkeypatch):
  """The fix named is the one for the directory given: `make data` fills the default
  directory, so another one gets `python -m data fetch <dataset> --data_dir=<it>`."""
  with pytest.raises(fetch.DataError) as e:
    fetch.require("tiny_shakespeare", tmp_path)
  msg = str(e.value)
  assert "\n" not in msg
  assert str(tmp_path / SHAKESPEARE) in msg
  assert f"python -m data fetch tiny_shakespeare --data_dir={tmp_path}`" in msg, msg
  assert "make data" not in msg and "https://" in msg
  assert isinstance(e.value, ValueError)
  monkeypatch.setenv("ATTNLAB_DATA_DIR", str(tmp_path))     # now the default directory
  with pytest.raises(fetch.DataError, match="run `make data`"):
    fetch.require("tiny_shakespeare")


def test_prepare_copies_verifies_and_repairs(mirror, tmp_path):
  d = tmp_path / "d"
  lines = []
  paths = fetch.prepare("tiny_shakespeare", d, mirror, log=lines.append)
  assert paths == {SHAKESPEARE: d / SHAKESPEARE}
  assert len(lines) == 1 and "copied from" in lines[0]
  assert (d / SHAKESPEARE).read_bytes() == (mirror / SHAKESPEARE).read_bytes()
  assert fetch.require("tiny_shakespeare", d) == paths
  lines.clear()
  fetch.prepare("tiny_shakespeare", d, mirror, log=lines.append)
  assert "kept" in lines[0]

  with open(d / SHAKESPEARE, "ab") as f:  # Corrupt the copy.
    f.write(b"!")
  with pytest.raises(fetch.DataError, match="sha256") as e:
    fetch.require("tiny_shakespeare", d)
  assert "\n" not in str(e.value) and f"--data_dir={d}" in str(e.value)
  fetch.prepare("tiny_shakespeare", d, mirror)  # Replaces the bad copy.
  assert fetch.require("tiny_shakespeare", d) == paths


def test_require_caches_verification(mirror, tmp_path, monkeypatch):
  fetch.prepare("tiny_shakespeare", tmp_path, mirror)
  def no_hashing(path):
    raise AssertionError(f"re-hashed {path}")
  monkeypatch.setattr(fetch, "sha256_file", no_hashing)
  fetch.require("tiny_shakespeare", tmp_path)


def test_prepare_rejects_corrupt_mirror_and_keeps_nothing(tmp_path):
  bad = tmp_path / "mirror" / SHAKESPEARE
  bad.parent.mkdir(parents=True)
  bad.write_text("not shakespeare\n")
  d = tmp_path / "d"
  with pytest.raises(fetch.DataError, match="sha256"):
    fetch.prepare("tiny_shakespeare", d, tmp_path / "mirror")
  assert not list((d / "tiny_shakespeare").iterdir())


def test_prepare_download_failure_is_clear(tmp_path, monkeypatch):
  def offline(url, timeout=None):
    raise urllib.error.URLError("no network")
  monkeypatch.setattr(fetch.urllib.request, "urlopen", offline)
  with pytest.raises(fetch.DataError, match="cannot download") as e:
    fetch.prepare("tiny_shakespeare", tmp_path / "d", tmp_path / "no_mirror")
  assert "raw.githubusercontent.com" in str(e.value)
  assert not list((tmp_path / "d" / "tiny_shakespeare").iterdir())


def test_cli_prints_one_line_per_file(mirror, tmp_path, capsys):
  """`python -m data fetch` (data/__main__.py): one line per file, a one-line error."""
  from data.__main__ import main
  assert main(["fetch", "--data_dir", str(tmp_path), "--mirror", str(mirror),
               "tiny_shakespeare"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert len(out) == 1 and out[0].startswith(SHAKESPEARE)
  assert main(["fetch", "--data_dir", str(tmp_path), "--mirror", str(mirror),
               "no_such_dataset"]) == 1
  assert "unknown dataset 'no_such_dataset'" in capsys.readouterr().err
  with pytest.raises(SystemExit):                      # fetch or build, nothing else
    main(["--data_dir", str(tmp_path)])


def test_the_old_command_line_says_where_it_moved():
  import subprocess
  import sys
  r = subprocess.run([sys.executable, "-m", "data.fetch", "mnist"], capture_output=True,
                     text=True, timeout=60)
  assert r.returncode == 1 and "python -m data fetch" in r.stderr


def test_load_without_raw_files_raises_data_error(tmp_path):
  with pytest.raises(fetch.DataError, match="python -m data fetch multi30k"):
    data.load("multi30k", "train", tmp_path)
  assert not (tmp_path / "tfds").exists()


# --- builders on the real files ------------------------------------------------


def test_mnist(data_dir):
  images, labels = data.mnist_arrays("train", data_dir)
  assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
  assert labels.shape == (60000,) and labels.dtype == np.int64
  assert np.bincount(labels).tolist() == MNIST_TRAIN_CLASS_COUNTS
  assert labels[:5].tolist() == [5, 0, 4, 1, 9]
  assert int(images[0].sum()) == 27525
  with gzip.open(data_dir / "mnist/train-images-idx3-ubyte.gz") as f:
    raw = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
  np.testing.assert_array_equal(images, raw)
  assert not images.flags.writeable                 # cached: nobody may change them
  # the second process's read comes from the .npz cache, and is the same
  cached = list((data_dir / builders.ARRAYS_SUBDIR).glob("mnist_train_*.npz"))
  assert len(cached) == 1
  builders._mnist_arrays.cache_clear()
  again, again_labels = data.mnist_arrays("train", data_dir)
  np.testing.assert_array_equal(again, raw)
  np.testing.assert_array_equal(again_labels, labels)

  test = data.load("mnist", "test", data_dir)
  assert len(test) == 10000
  example = test[0]
  assert example["image"].shape == (28, 28) and example["label"] == 7
  _, test_labels = data.mnist_arrays("test", data_dir)
  assert np.bincount(test_labels).tolist() == MNIST_TEST_CLASS_COUNTS


def test_tiny_shakespeare(data_dir):
  text = (data_dir / SHAKESPEARE).read_text(encoding="utf-8")
  vocab = data.vocab_shakespeare(data_dir)
  assert len(vocab) == 65 and vocab == "".join(sorted(set(text)))
  train = data.shakespeare_ids("train", data_dir)
  val = data.shakespeare_ids("validation", data_dir)
  assert train.dtype == np.uint8 and len(train) == int(0.9 * len(text))
  assert data.decode_chars(np.concatenate([train, val]), vocab) == text
  src = data.load("tiny_shakespeare", "validation", data_dir)
  assert len(src) == -(-len(val) // builders.CHUNK)
  assert [src[i]["index"] for i in range(3)] == [0, 1, 2]
  assert src[0]["ids"].shape == (builders.CHUNK,)
  assert src[len(src) - 1]["ids"].shape == (len(val) % builders.CHUNK,)
  np.testing.assert_array_equal(data.encode_chars(text[:50], vocab),
                                train[:50])


def test_multi30k(data_dir, monkeypatch):
  sizes = {s: len(data.load("multi30k", s, data_dir))
           for s in ("train", "validation", "test")}
  assert sizes == {"train": 29000, "validation": 1014, "test": 1000}
  first = data.load("multi30k", "train", data_dir)[0]
  assert first["en"].decode() == (
      "Two young, White males are outside near many bushes.")
  assert first["de"].decode() == (
      "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.")
  pairs = data.multi30k_pairs("test", data_dir)
  with gzip.open(data_dir / "multi30k/test_2016_flickr.de.gz", "rt",
                 encoding="utf-8") as f:
    assert [de for _, de in pairs] == f.read().split("\n")[:-1]
  assert data.multi30k_pairs("test", data_dir) is pairs     # parsed once per process
  key = builders.build_key("multi30k", data_dir)
  assert len(key) == 16 and key == builders.build_key("multi30k", data_dir)
  # a rebuilt dataset (a new dataset_info.json, so a new key) is parsed again
  monkeypatch.setattr(builders, "build_key", lambda name, d=None: "rebuilt")
  again = data.multi30k_pairs("test", data_dir)
  assert again is not pairs and again == pairs


def test_multi30k_sentencepiece(data_dir):
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  path = data.multi30k_spm(data_dir)
  assert path.is_file() and path.parent == data_dir / "spm"
  assert data.multi30k_spm(data_dir) == path  # Cached, not retrained.
  sp = spm.SentencePieceProcessor(model_file=str(path))
  assert sp.get_piece_size() == 8000
  assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
  for sentence in ("Two young, White males are outside near many bushes.",
                   "Zwei junge weiße Männer sind im Freien in der Nähe "
                   "vieler Büsche."):
    ids = sp.encode(sentence)
    assert min(ids) > 3 and sp.decode(ids) == sentence


# --- copy task -----------------------------------------------------------------


def test_copy_batch():
  n, b = 7, 5
  tokens, weights = copy_task.copy_batch(np.random.default_rng(0), b, n)
  assert tokens.shape == weights.shape == (b, 2 * n + 2)
  assert tokens.dtype == np.int32 and weights.dtype == np.float32
  assert (tokens[:, 0] == 0).all() and (tokens[:, n + 1] == 0).all()
  np.testing.assert_array_equal(tokens[:, 1:n + 1], tokens[:, n + 2:])
  assert tokens[:, 1:n + 1].min() >= 1 and tokens[:, 1:n + 1].max() <= 9
  expected = np.zeros(2 * n + 2, np.float32)
  expected[n + 2:] = 1
  np.testing.assert_array_equal(weights, np.broadcast_to(expected, weights.shape))
  again, _ = copy_task.copy_batch(np.random.default_rng(0), b, n)
  np.testing.assert_array_equal(tokens, again)
  other, _ = copy_task.copy_batch(np.random.default_rng(1), b, n)
  assert not np.array_equal(tokens, other)
  with pytest.raises(ValueError):
    copy_task.copy_batch(np.random.default_rng(0), b, 0)


def test_public_api_is_documented():
  for name in data.__all__:
    obj = getattr(data, name)
    if callable(obj) and not isinstance(obj, dict):
      assert obj.__doc__, name
