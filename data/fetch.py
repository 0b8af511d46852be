"""The data file registry: which raw files each dataset needs, and `make data`.

Raw files live under a data directory (`default_data_dir()`: $ATTNLAB_DATA_DIR,
else `<repo>/.data`, which git ignores), at their relative paths in `FILES`, e.g.
`<data_dir>/mnist/train-images-idx3-ubyte.gz`. Nothing here is committed.

* `prepare(dataset)` puts the files there: it keeps a verified copy, else copies
  the file from a local mirror (`default_mirror()`: $ATTNLAB_DATA_MIRROR, else
  `<repo>/../shared/data`), else downloads it from the official URL. Every file
  is checked against its sha256 afterwards.
* `require(dataset)` never fetches anything: it returns the paths of verified
  files, or raises `DataError` with a one-line message saying what to run. Code
  that reads data calls this, so it never depends on the mirror silently.

The command line is `python -m data fetch|build` (data/__main__.py).
"""
import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile
import urllib.error
import urllib.request

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

_MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
_SHAKESPEARE_URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/"
                    "data/tinyshakespeare/input.txt")
_MULTI30K_URL = ("https://raw.githubusercontent.com/multi30k/dataset/master/"
                 "data/task1/raw/")

# dataset -> [(path relative to the data dir, sha256, official download URL)].
FILES = {
    "mnist": [
        ("mnist/train-images-idx3-ubyte.gz",
         "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
         _MNIST_URL + "train-images-idx3-ubyte.gz"),
        ("mnist/train-labels-idx1-ubyte.gz",
         "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
         _MNIST_URL + "train-labels-idx1-ubyte.gz"),
        ("mnist/t10k-images-idx3-ubyte.gz",
         "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
         _MNIST_URL + "t10k-images-idx3-ubyte.gz"),
        ("mnist/t10k-labels-idx1-ubyte.gz",
         "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
         _MNIST_URL + "t10k-labels-idx1-ubyte.gz"),
    ],
    "tiny_shakespeare": [
        ("tiny_shakespeare/input.txt",
         "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
         _SHAKESPEARE_URL),
    ],
    "multi30k": [
        ("multi30k/train.en.gz",
         "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
         _MULTI30K_URL + "train.en.gz"),
        ("multi30k/train.de.gz",
         "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
         _MULTI30K_URL + "train.de.gz"),
        ("multi30k/val.en.gz",
         "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
         _MULTI30K_URL + "val.en.gz"),
        ("multi30k/val.de.gz",
         "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
         _MULTI30K_URL + "val.de.gz"),
        ("multi30k/test_2016_flickr.en.gz",
         "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
         _MULTI30K_URL + "test_2016_flickr.en.gz"),
        ("multi30k/test_2016_flickr.de.gz",
         "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
         _MULTI30K_URL + "test_2016_flickr.de.gz"),
    ],
}

DATASETS = tuple(FILES)
_STAMP = ".verified.json"  # <data_dir>/.verified.json: rel path -> file key.


class DataError(ValueError):
  """A data file is missing, corrupt, or cannot be fetched (one-line message)."""


def default_data_dir() -> pathlib.Path:
  """$ATTNLAB_DATA_DIR if set, else `<repo root>/.data` (gitignored)."""
  env = os.environ.get("ATTNLAB_DATA_DIR")
  return pathlib.Path(env).expanduser() if env else REPO_ROOT / ".data"


def default_mirror() -> pathlib.Path:
  """$ATTNLAB_DATA_MIRROR if set, else `<repo root>/../shared/data`."""
  env = os.environ.get("ATTNLAB_DATA_MIRROR")
  return (pathlib.Path(env).expanduser() if env
          else REPO_ROOT.parent / "shared" / "data")


def sha256_file(path) -> str:
  """Hex sha256 of a file's bytes."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


@contextlib.contextmanager
def file_lock(path):
  """Exclusive advisory lock on `path` (created if needed), across processes."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _entries(dataset):
  if dataset not in FILES:
    raise DataError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
  return FILES[dataset]


def resolve_data_dir(data_dir=None) -> pathlib.Path:
  """Absolute data dir: `data_dir` if given, else `default_data_dir()`."""
  return pathlib.Path(data_dir if data_dir is not None
                      else default_data_dir()).expanduser().absolute()


def _file_key(path: pathlib.Path):
  st = path.stat()
  return [st.st_size, st.st_mtime_ns, st.st_ino]


def _read_stamp(data_dir: pathlib.Path) -> dict:
  try:
    stamp = json.loads((data_dir / _STAMP).read_text())
    return stamp if isinstance(stamp, dict) else {}
  except (OSError, ValueError):
    return {}


def _update_stamp(data_dir: pathlib.Path, rel: str, key) -> None:
  """Records that `rel` verified with file key `key` (atomic rewrite)."""
  try:
    stamp = _read_stamp(data_dir)
    if key is None:
      stamp.pop(rel, None)
    else:
      stamp[rel] = key
    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=_STAMP, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
      json.dump(stamp, f, indent=1, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.replace(tmp, data_dir / _STAMP)
  except OSError:
    pass  # The stamp is only a cache: a read-only data dir re-hashes each time.


def _verified(data_dir: pathlib.Path, rel: str, sha: str) -> bool:
  """Whether `<data_dir>/<rel>` exists with sha256 `sha` (cached by size+mtime)."""
  path = data_dir / rel
  if not path.is_file():
    return False
  key = _file_key(path)
  if _read_stamp(data_dir).get(rel) == key + [sha]:
    return True
  ok = sha256_file(path) == sha
  _update_stamp(data_dir, rel, key + [sha] if ok else None)
  return ok


def _how_to_get(rel: str, url: str, data_dir: pathlib.Path | None = None) -> str:
  """The command that fills `data_dir` (the default one: `make data`)."""
  name = rel.split('/')[0]
  if data_dir is None or data_dir.resolve() == default_data_dir().resolve():
    cmd = f"run `make data` (or `python -m data fetch {name}`)"
  else:                    # make data fills the default directory, not this one
    cmd = f"run `python -m data fetch {name} --data_dir={data_dir}`"
  return f"{cmd}, which copies it from {default_mirror()} or downloads it from {url}"


def require(dataset: str, data_dir=None) -> dict:
  """Paths of a dataset's verified raw files; never fetches anything.

  Returns:
    dict relative path (e.g. "mnist/train-images-idx3-ubyte.gz") -> absolute
    pathlib.Path under `data_dir` (default `default_data_dir()`).
  Raises:
    DataError: one line naming the first missing or corrupt file, where it was
      expected, and how to get it.
  """
  data_dir = resolve_data_dir(data_dir)
  out = {}
  for rel, sha, url in _entries(dataset):
    path = data_dir / rel
    if not path.is_file():
      raise DataError(f"missing data file {rel}: expected at {path}; "
                      f"{_how_to_get(rel, url, data_dir)}")
    if not _verified(data_dir, rel, sha):
      raise DataError(f"corrupt data file {rel} at {path}: sha256 "
                      f"{sha256_file(path)} != expected {sha}; delete it and "
                      + _how_to_get(rel, url, data_dir).split(", which")[0])
    out[rel] = path
  return out


def _download(url: str, dest: pathlib.Path, rel: str) -> None:
  try:
    with urllib.request.urlopen(url, timeout=60) as r, open(dest, "wb") as f:
      shutil.copyfileobj(r, f, 1 << 20)
  except (urllib.error.URLError, OSError) as e:
    raise DataError(
        f"cannot download data file {rel} from {url}: {e}; copy it by hand to "
        f"{dest.parent}/ or point ATTNLAB_DATA_MIRROR at a folder holding "
        f"{rel}") from e


def _fetch_one(data_dir, mirror, rel, sha, url) -> str:
  """Makes `<data_dir>/<rel>` a verified copy; returns how it got there."""
  dest = data_dir / rel
  if _verified(data_dir, rel, sha):
    return "ok (kept)"
  dest.parent.mkdir(parents=True, exist_ok=True)
  src = mirror / rel if mirror is not None else None
  fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".part")
  os.close(fd)
  tmp = pathlib.Path(tmp)
  try:
    if src is not None and src.is_file():
      shutil.copyfile(src, tmp)
      how = f"copied from {src}"
    else:
      _download(url, tmp, rel)
      how = f"downloaded from {url}"
    got = sha256_file(tmp)
    if got != sha:
      raise DataError(f"corrupt data file {rel} ({how}): sha256 {got} != "
                      f"expected {sha}; the bad copy was deleted")
    os.replace(tmp, dest)
  finally:
    tmp.unlink(missing_ok=True)
  _update_stamp(data_dir, rel, _file_key(dest) + [sha])
  return how


def prepare(dataset: str, data_dir=None, mirror=None, log=None) -> dict:
  """Makes a dataset's raw files present and verified under `data_dir`.

  Each file is kept if already verified, else copied from `mirror` (default
  `default_mirror()`) if it holds it, else downloaded from its URL; its sha256
  is always checked after. A stale or bad file in `data_dir` is replaced.

  Args:
    dataset: a key of `FILES`.
    data_dir: destination root (default `default_data_dir()`).
    mirror: local folder laid out like `data_dir` (default `default_mirror()`).
    log: optional callable taking one line per file.
  Returns:
    dict relative path -> absolute pathlib.Path, as `require`.
  Raises:
    DataError: unknown dataset, failed download or sha256 mismatch.
  """
  data_dir = resolve_data_dir(data_dir)
  mirror = pathlib.Path(mirror if mirror is not None
                        else default_mirror()).expanduser().absolute()
  data_dir.mkdir(parents=True, exist_ok=True)
  out = {}
  with file_lock(data_dir / ".fetch.lock"):
    for rel, sha, url in _entries(dataset):
      how = _fetch_one(data_dir, mirror, rel, sha, url)
      out[rel] = data_dir / rel
      if log is not None:
        log(f"{rel}: {how} -> {data_dir / rel}")
  return out


if __name__ == "__main__":   # the command line moved to data/__main__.py
  sys.exit("python -m data.fetch is now `python -m data fetch` (raw files) or "
           "`python -m data build` (and the TFDS datasets); see python -m data --help")
