"""The pycode corpus (data/pycode.py) on fake sdists made here, pip faked: fetch and
verify, extract, the text task on the tree, the command line; and the recall
positions of data/recall.py. No network, nothing compiled."""
import hashlib
import io
import pathlib
import re
import tarfile
import zipfile

import numpy as np
import pytest

from data import fetch
from data import pycode
from data.recall import recall_mask

# name -> {path in the sdist (under its top folder): bytes}
SDISTS = {
    "alpha": {"alpha/__init__.py": b"", "alpha/core.py": b"def f(x):\n  return x + 1\n" * 4,
              "alpha/data.bin.py": b"\x00\x01binary", "README.md": b"# not code\n",
              ".hidden/skip.py": b"x = 1\n"},
    "beta": {"beta/m.py": "s = 'ünïcödé'\n".encode() * 5, "beta/latin1.py": b"s = '\xe9'\n",
             "tests/test_m.py": b"from beta import m\nassert m.s\n" * 3},
    "gamma": {"g.py": b"import os\nprint(os.sep)\n" * 3, "sub/h.py": b"class H:\n  pass\n" * 3},
}


def _sdist(folder: pathlib.Path, name: str, files: dict) -> pathlib.Path:
  """A .tar.gz (a .zip for gamma) holding `files` under <name>-1.0/."""
  if name == "gamma":
    path = folder / f"{name}-1.0.zip"
    with zipfile.ZipFile(path, "w") as z:
      for rel, body in files.items():
        z.writestr(f"{name}-1.0/{rel}", body)
    return path
  path = folder / f"{name}-1.0.tar.gz"
  with tarfile.open(path, "w:gz") as t:
    for rel, body in files.items():
      info = tarfile.TarInfo(f"{name}-1.0/{rel}")
      info.size = len(body)
      t.addfile(info, io.BytesIO(body))
  return path


@pytest.fixture
def index(tmp_path):
  """(packages as PACKAGES, folder standing for PyPI, list of download calls, download)."""
  pypi = tmp_path / "pypi"
  pypi.mkdir()
  packages = []
  for name, files in SDISTS.items():
    path = _sdist(pypi, name, files)
    packages.append((name, "1.0", path.name,
                     hashlib.sha256(path.read_bytes()).hexdigest(), "MIT"))
  calls = []

  def download(specs, dest):
    calls.append(list(specs))
    for spec in specs:
      name = spec.split("==")[0]
      src = next(pypi.glob(f"{name}-1.0.*"))
      (dest / src.name).write_bytes(src.read_bytes())
  return tuple(packages), pypi, calls, download


def test_fetch_downloads_the_missing_archives_once_and_verifies_them(index, tmp_path):
  packages, pypi, calls, download = index
  d, mirror = tmp_path / "d", tmp_path / "mirror"
  (mirror / pycode.SDIST_SUBDIR).mkdir(parents=True)
  (mirror / pycode.SDIST_SUBDIR / packages[0][2]).write_bytes((pypi / packages[0][2]).read_bytes())
  lines = []
  got = pycode.fetch_archives(d, mirror, lines.append, download, packages)
  assert calls == [["beta==1.0", "gamma==1.0"]]             # one pip call, the missing
  assert sorted(got) == sorted(p[2] for p in packages)
  assert "copied from" in lines[0] and all("downloaded by pip" in l for l in lines[1:])
  for archive, path in got.items():
    assert path.read_bytes() == (pypi / archive).read_bytes()
  pycode.fetch_archives(d, mirror, lines.append, download, packages)
  assert len(calls) == 1 and lines[-1].split(": ")[1].startswith("ok (kept)")


def test_a_sha256_mismatch_is_one_line_naming_the_archive_and_keeps_nothing(index, tmp_path):
  packages, _, _, download = index
  bad = list(packages)
  bad[1] = bad[1][:3] + ("0" * 64,) + bad[1][4:]
  with pytest.raises(fetch.DataError) as e:
    pycode.fetch_archives(tmp_path / "d", tmp_path / "none", None, download, bad)
  msg = str(e.value)
  assert "\n" not in msg and packages[1][2] in msg
  assert f"sha256 {packages[1][3]} != expected {'0' * 64}" in msg
  left = sorted(p.name for p in (tmp_path / "d" / pycode.SDIST_SUBDIR).iterdir())
  assert left == [packages[0][2]]               # alpha (verified) only: no bad copy, no temp


def test_extract_writes_the_text_py_files_and_counts_the_rest(index, tmp_path):
  packages, _, _, download = index
  d = tmp_path / "d"
  with pytest.raises(fetch.DataError, match="python -m data fetch pycode"):
    pycode.require(d, packages)
  root = pycode.prepare(d, tmp_path / "none", None, download, packages)
  assert root == d.absolute() / "pycode" and pycode.require(d, packages) == root
  found = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
  manifest = found.pop(pycode.MANIFEST)
  want = {f"{n}/{rel}": body for n, files in SDISTS.items() for rel, body in files.items()
          if rel.endswith(".py") and body and not rel.startswith(".")
          and b"\0" not in body and rel != "beta/latin1.py"}
  assert found == want
  sizes = pycode._read_manifest(root)["sizes"]
  assert sizes["alpha"] == {"files": 1, "bytes": len(SDISTS["alpha"]["alpha/core.py"]),
                            "skipped_not_text": 1, "skipped_empty": 1}
  assert sizes["beta"]["skipped_not_text"] == 1 and sizes["gamma"]["files"] == 2
  # kept while the archives are the same; another list of archives is rebuilt
  (root / "alpha" / "alpha" / "core.py").write_bytes(b"edited = True\n")
  assert pycode.extract({p[2]: d / pycode.SDIST_SUBDIR / p[2] for p in packages}, d,
                        packages)["files"] == len(want)
  assert (root / "alpha" / "alpha" / "core.py").read_bytes() == b"edited = True\n"
  with pytest.raises(fetch.DataError, match="made from other archives"):
    pycode.require(d, packages[:2])
  pycode.prepare(d, tmp_path / "none", None, download, packages[:2])
  assert not (root / "gamma").exists() and manifest != (root / pycode.MANIFEST).read_bytes()


def test_the_text_task_reads_the_tree(index, tmp_path):
  """The extracted tree is a `text` corpus: documents named <package>/<path>, split by
  their hash, training windows inside one document."""
  from configs import text
  from data import pipeline
  packages, _, _, download = index
  root = pycode.prepare(tmp_path / "d", tmp_path / "none", None, download, packages)
  c = text.get_config("pycode")
  assert c.text.files == str(fetch.default_data_dir() / "pycode")
  c.text.files = str(root)
  c.update(dict(seq_len=8, batch_size=4, eval_batch_size=4, eval_batches=0,
                data_dir=str(tmp_path / "tfds")))
  t = pipeline.create(c)
  assert sorted(n for n, _, _ in t.corpus.docs) == sorted(
      str(p.relative_to(root)) for p in root.rglob("*.py"))
  docs = [pathlib.Path(r).read_bytes() for _, r, s in t.corpus.docs if s == "train"]
  for y, w in zip(*(t.train_batch(0)[k] for k in ("y", "w"))):
    assert any(bytes(y[w > 0].astype(np.uint8)) in doc for doc in docs)


def test_the_command_line_fetches_and_extracts_pycode(index, tmp_path, monkeypatch, capsys):
  from data.__main__ import main
  packages, _, calls, download = index
  monkeypatch.setattr(pycode, "PACKAGES", packages)
  monkeypatch.setattr(pycode, "pip_download", download)
  args = ["--data_dir", str(tmp_path / "d"), "--mirror", str(tmp_path / "none"), "pycode"]
  assert main(["build", *args]) == 0
  out = capsys.readouterr().out.splitlines()
  assert len(out) == len(packages) + 1 and len(calls) == 1
  assert re.match(r"pycode/: extracted -> .* \(5 files, [\d.]+ MB of text; skipped 2 not "
                  r"UTF-8 text, 1 empty\)$", out[-1]), out[-1]
  monkeypatch.setattr(pycode, "PACKAGES", ((*packages[0][:3], "0" * 64, "MIT"),))
  assert main(["fetch", *args]) == 1
  assert capsys.readouterr().err.startswith(f"error: corrupt archive {packages[0][2]}")


def test_the_pinned_list_is_well_formed():
  for name, version, archive, sha, licence in pycode.PACKAGES:
    assert re.fullmatch(r"[0-9a-f]{64}", sha), name
    assert archive.lower() == f"{name}-{version}.tar.gz", archive
    assert re.search(r"MIT|BSD|Apache-2.0|PSF", licence), licence
  assert len({p[0] for p in pycode.PACKAGES}) == len(pycode.PACKAGES)


# ---- recall positions ------------------------------------------------------------------

def _brute(row, n, copy):
  T, m = len(row), n + 1 if copy else n
  out = np.zeros(T, bool)
  for t in range(n, T):
    g = list(row[t - n:t - n + m])
    out[t] = any(list(row[s:s + m]) == g for s in range(t - n))
  return out


def test_recall_mask_on_a_hand_made_example():
  x = np.frombuffer(b"abcXabcY", np.uint8)
  # n=2: the second "ab" is followed by 'c' as the first was (t=6); "bc" was seen
  # before the 'Y' (t=7) but followed by 'X': a lookup, not a copy
  np.testing.assert_array_equal(recall_mask(x, 2), [0, 0, 0, 0, 0, 0, 1, 0])
  np.testing.assert_array_equal(recall_mask(x, 2, copy=False), [0, 0, 0, 0, 0, 0, 1, 1])
  # n=1: "ab" and "bc" recur at t=5, 6; 'a' after 'X' (t=4) was never seen
  np.testing.assert_array_equal(recall_mask(x, 1), [0, 0, 0, 0, 0, 1, 1, 0])
  np.testing.assert_array_equal(recall_mask(np.frombuffer(b"aaaa", np.uint8), 2),
                                [0, 0, 0, 1])          # overlapping occurrences count
  # rows are independent: the same bytes in another row are not "earlier"
  b = np.stack([np.frombuffer(b"abcd", np.uint8), np.frombuffer(b"abcX", np.uint8)])
  assert not recall_mask(b, 1).any()
  assert recall_mask(x[:2], 2).shape == (2,) and not recall_mask(x[:2], 2).any()
  with pytest.raises(ValueError, match="n must be"):
    recall_mask(x, 0)
  with pytest.raises(ValueError, match="int array"):
    recall_mask(x.astype(np.float32), 1)


def test_recall_mask_matches_a_brute_force_loop():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 4, size=(3, 60))            # 4 symbols: many repeats
  for n in (1, 2, 3):
    for copy in (True, False):
      want = np.stack([_brute(r, n, copy) for r in x])
      np.testing.assert_array_equal(recall_mask(x, n, copy), want, err_msg=f"{n} {copy}")
      assert 0 < want.sum() < want.size
