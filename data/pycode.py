"""pycode: a long-document code corpus for the `text` task, from pinned PyPI sdists.

The `.py` files of a pinned list of permissively licensed, pure-Python source
distributions (`PACKAGES`), each file one document: code has long-range dependencies
(names defined far above their use), the recall that fixed-state variants lose
(issue 101). Two steps, both under the data dir (`fetch.default_data_dir()`):

  fetch    <data_dir>/pycode_sdist/<archive>: each sdist kept if verified, else
           copied from the mirror (`<mirror>/pycode_sdist/<archive>`), else
           downloaded by `pip download --no-binary :all: --no-deps NAME==VERSION`
           (one pip call for all missing ones; pip builds each sdist's metadata,
           about a minute each); every archive's sha256 is checked before use.
  extract  <data_dir>/pycode/<name>/<path in the sdist>: every regular `.py` member of
           each verified archive (its top folder dropped; hidden paths left out)
           that is UTF-8 text without a NUL byte and not empty; the others are
           skipped and counted. The tree is
           written to a temporary folder and renamed into place, with a manifest
           (`<data_dir>/pycode/.manifest.json`, hidden: the text task skips it)
           naming the archives it came from: a tree of other archives is rebuilt.

`python -m data fetch pycode` (or `build pycode`) does both; train on it with
`--config=configs/text.py:pycode` (or `--config.text.files=<data_dir>/pycode`).
The list, licences and sizes: data/README.md.
"""
import json
import os
import pathlib
import posixpath
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from data import fetch

NAME = "pycode"                      # the dataset's name: `python -m data fetch pycode`
SDIST_SUBDIR = "pycode_sdist"        # <data_dir>/pycode_sdist/ holds the archives
MANIFEST = ".manifest.json"          # <data_dir>/pycode/.manifest.json
_FORMAT = 1                          # bump when what `extract` writes changes

# (name, version, archive file name as pip saves it, its sha256, licence)
PACKAGES = (
    ("django", "5.1.4", "Django-5.1.4.tar.gz",
     "de450c09e91879fa5a307f696e57c851955c910a438a35e6b4c895e86bedc82a",
     "BSD-3-Clause (a few files PSF-2.0)"),
    ("twisted", "24.11.0", "twisted-24.11.0.tar.gz",
     "695d0556d5ec579dcc464d2856b634880ed1319f45b10d19043f2b57eb0115b5", "MIT"),
    ("networkx", "3.4.2", "networkx-3.4.2.tar.gz",
     "307c3669428c5362aab27c8a1260aa8f47c4e91d3891f48be0141738d8d053e1",
     "BSD-3-Clause"),
    ("pygments", "2.18.0", "pygments-2.18.0.tar.gz",
     "786ff802f32e91311bff3889f6e9a86e81505fe99f2735bb6d60ae0c5004f199",
     "BSD-2-Clause"),
)


def pip_download(specs: list, dest: pathlib.Path) -> None:
  """Downloads the sdists of `specs` ("NAME==VERSION", ...) into `dest` with this
  interpreter's pip (`pip download --no-binary :all: --no-deps`); raises DataError
  (one line: pip's last line) if pip fails."""
  cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
         "--disable-pip-version-check", "-q", *specs, "-d", str(dest)]
  r = subprocess.run(cmd, capture_output=True, text=True)
  if r.returncode:
    last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
    raise fetch.DataError(f"pip download {' '.join(specs)} failed (exit {r.returncode}): "
                          f"{last}; copy the archives by hand to {dest}/ or point "
                          f"ATTNLAB_DATA_MIRROR at a folder holding {SDIST_SUBDIR}/")


def _check(path: pathlib.Path, sha: str, how: str) -> None:
  got = fetch.sha256_file(path)
  if got != sha:
    raise fetch.DataError(f"corrupt archive {path.name} ({how}): sha256 {got} != "
                          f"expected {sha}; the bad copy was deleted")


def fetch_archives(data_dir=None, mirror=None, log=None, download=None,
                   packages=None) -> dict:
  """Makes every archive of `packages` present and verified under
  <data_dir>/pycode_sdist/: kept if verified, else copied from
  <mirror>/pycode_sdist/, else downloaded by `download(specs, folder)` (default
  `pip_download`, one call for all missing ones, into a temporary folder).
  packages: default `PACKAGES`.

  Returns: dict archive file name -> absolute path.
  Raises: DataError (one line) for a failed download, a missing archive after it,
    or a sha256 mismatch (naming the archive, the expected and the got sum; the bad
    copy is deleted).
  """
  download = download or pip_download
  packages = PACKAGES if packages is None else packages
  data_dir = fetch.resolve_data_dir(data_dir)
  mirror = pathlib.Path(mirror if mirror is not None
                        else fetch.default_mirror()).expanduser().absolute()
  folder = data_dir / SDIST_SUBDIR
  folder.mkdir(parents=True, exist_ok=True)
  out, how, missing = {}, {}, []
  with fetch.file_lock(data_dir / ".fetch.lock"):
    for name, version, archive, sha, _ in packages:
      rel = f"{SDIST_SUBDIR}/{archive}"
      out[archive] = data_dir / rel
      if fetch._verified(data_dir, rel, sha):  # pylint: disable=protected-access
        how[archive] = "ok (kept)"
      elif (mirror / rel).is_file():
        _place(data_dir, rel, sha, mirror / rel, f"copied from {mirror / rel}")
        how[archive] = f"copied from {mirror / rel}"
      else:
        missing.append((name, version, archive, sha))
    if missing:
      with tempfile.TemporaryDirectory(dir=folder, prefix=".pip") as tmp:
        download([f"{n}=={v}" for n, v, _, _ in missing], pathlib.Path(tmp))
        for _, _, archive, sha in missing:
          got = pathlib.Path(tmp) / archive
          if not got.is_file():
            raise fetch.DataError(f"pip download left no {archive} in {tmp} (it holds "
                                  f"{sorted(os.listdir(tmp))})")
          _place(data_dir, f"{SDIST_SUBDIR}/{archive}", sha, got, "downloaded by pip")
          how[archive] = "downloaded by pip"
  if log is not None:
    for archive, path in out.items():
      log(f"{SDIST_SUBDIR}/{archive}: {how[archive]} -> {path}")
  return out


def _place(data_dir: pathlib.Path, rel: str, sha: str, src: pathlib.Path,
           how: str) -> None:
  """Copies `src` to <data_dir>/<rel> after checking its sha256 (atomic)."""
  dest = data_dir / rel
  fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".part")
  os.close(fd)
  tmp = pathlib.Path(tmp)
  try:
    shutil.copyfile(src, tmp)
    _check(tmp, sha, how)
    os.replace(tmp, dest)
  finally:
    tmp.unlink(missing_ok=True)
  fetch._update_stamp(data_dir, rel, fetch._file_key(dest) + [sha])  # pylint: disable=protected-access


def _members(path: pathlib.Path):
  """(path inside the archive without its top folder, bytes) of each regular `.py`
  member of a .tar.gz or .zip sdist, in archive order; unsafe paths (absolute, ..)
  and hidden ones (a part starting with ".", which the text task skips) are left out."""
  def inner(name):
    parts = posixpath.normpath(name).split("/")[1:]
    if not parts or name.startswith("/") or any(p.startswith(".") for p in parts):
      return None
    return "/".join(parts)
  if path.name.endswith(".zip"):
    with zipfile.ZipFile(path) as z:
      for info in z.infolist():
        rel = inner(info.filename)
        if not info.is_dir() and rel and rel.endswith(".py"):
          yield rel, z.read(info)
  else:
    with tarfile.open(path) as t:
      for m in t:
        rel = inner(m.name)
        if m.isfile() and rel and rel.endswith(".py"):
          yield rel, t.extractfile(m).read()


def _is_text(raw: bytes) -> bool:
  if b"\0" in raw:
    return False
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError:
    return False
  return True


def _manifest_of(packages) -> list:
  return [[n, v, a, s] for n, v, a, s, _ in packages]


def extract(archives: dict, data_dir=None, packages=None, log=None) -> dict:
  """Writes the corpus tree <data_dir>/pycode/<name>/... from verified archives
  (`fetch_archives`), unless the tree there was made from the same archives.

  Returns the manifest: {"format", "packages": [[name, version, archive, sha256]],
  "sizes": {name: {"files", "bytes", "skipped_not_text", "skipped_empty"}},
  "files", "bytes"} (bytes: of the documents written).
  """
  packages = PACKAGES if packages is None else packages
  data_dir = fetch.resolve_data_dir(data_dir)
  root = data_dir / NAME
  want = {"format": _FORMAT, "packages": _manifest_of(packages)}
  with fetch.file_lock(data_dir / f".{NAME}.lock"):
    old = _read_manifest(root)
    if old is not None and {k: old.get(k) for k in want} == want:
      if log is not None:
        log(f"{NAME}/: ok (kept) -> {root} ({_summary(old)})")
      return old
    tmp = pathlib.Path(tempfile.mkdtemp(dir=data_dir, prefix=f".{NAME}.tmp"))
    try:
      sizes = {}
      for name, _, archive, _, _ in packages:
        s = sizes[name] = {"files": 0, "bytes": 0, "skipped_not_text": 0,
                           "skipped_empty": 0}
        for rel, raw in _members(pathlib.Path(archives[archive])):
          if not raw:
            s["skipped_empty"] += 1
          elif not _is_text(raw):
            s["skipped_not_text"] += 1
          else:
            dest = tmp / name / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(raw)
            s["files"] += 1
            s["bytes"] += len(raw)
      manifest = {**want, "sizes": sizes,
                  "files": sum(s["files"] for s in sizes.values()),
                  "bytes": sum(s["bytes"] for s in sizes.values())}
      (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
      os.chmod(tmp, 0o755)
      if root.exists():
        shutil.rmtree(root)
      os.replace(tmp, root)
    finally:
      shutil.rmtree(tmp, ignore_errors=True)
  if log is not None:
    log(f"{NAME}/: extracted -> {root} ({_summary(manifest)})")
  return manifest


def _summary(m: dict) -> str:
  skipped = sum(s["skipped_not_text"] for s in m["sizes"].values())
  empty = sum(s["skipped_empty"] for s in m["sizes"].values())
  return (f"{m['files']:,} files, {m['bytes'] / 1e6:.2f} MB of text; skipped "
          f"{skipped} not UTF-8 text, {empty} empty")


def _read_manifest(root: pathlib.Path):
  try:
    return json.loads((root / MANIFEST).read_text())
  except (OSError, ValueError):
    return None


def prepare(data_dir=None, mirror=None, log=None, download=None,
            packages=None) -> pathlib.Path:
  """`fetch_archives` then `extract`: the corpus tree's root, <data_dir>/pycode,
  ready for `--config.text.files=<it>`."""
  archives = fetch_archives(data_dir, mirror, log, download, packages)
  extract(archives, data_dir, packages, log)
  return fetch.resolve_data_dir(data_dir) / NAME


def require(data_dir=None, packages=None) -> pathlib.Path:
  """The corpus tree's root if it was extracted from `packages`' archives; never
  fetches anything. Raises DataError (one line) saying what to run otherwise."""
  packages = PACKAGES if packages is None else packages
  data_dir = fetch.resolve_data_dir(data_dir)
  root = data_dir / NAME
  m = _read_manifest(root)
  if m is None or m.get("packages") != _manifest_of(packages) or m.get("format") != _FORMAT:
    what = "missing" if m is None else "made from other archives"
    raise fetch.DataError(f"the {NAME} corpus at {root} is {what}: run `python -m data "
                          f"fetch {NAME} --data_dir={data_dir}`")
  return root
