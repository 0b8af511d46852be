"""studies.length.carry: what the length study's gpu preset carries to a lent GPU and
back (issue 105 item 3), without a GPU: the corpus slice is the preset's glob's
packages, a slice missing from the mirror is refused in one line (the GPU machine
downloads nothing), and the tarball brings back the ledger and each cut-off run with
its newest checkpoint only."""
import os
import tarfile

import pytest

from data import fetch, pycode
from studies.length import carry, presets


def test_the_gpu_slice_is_the_packages_its_glob_reads():
  names = [x[0] for x in carry.slice_packages("gpu")]
  assert names == ["networkx", "pygments"]
  assert presets.preset("gpu").files == "pycode/[np]*/**/*.py"
  assert carry.slice_packages("cpu") == list(pycode.PACKAGES)     # the whole corpus


def test_a_slice_missing_from_the_mirror_is_refused_without_a_download(tmp_path):
  with pytest.raises(fetch.DataError, match="networkx==3.4.2, pygments==2.18.0: not in "
                                            "the mirror .*--mirror_slice=.mirror"):
    carry.prepare_slice("gpu", data_dir=tmp_path / "data", mirror=tmp_path / "empty")


def test_the_pack_holds_the_page_and_each_cut_off_run_with_its_newest_checkpoint(
    tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  out, root = "results/lm_length/gpu", "workdirs/lm_length"
  os.makedirs(out)
  open(f"{out}/gpu_runs.json", "w").write("{}")
  done = f"{root}/gpu/flash@L4096@lr0.003@seed0"
  cut = f"{root}/gpu/flash@L4096@lr0.003@seed1"
  for wd in (done, cut):
    for step in ("1024", "2048"):
      os.makedirs(f"{wd}/checkpoints/{step}")
      open(f"{wd}/checkpoints/{step}/state", "w").write(step)
    open(f"{wd}/config.json", "w").write("{}")
  open(f"{cut}/checkpoints/metadata", "w").write("m")
  open(f"{done}/result.json", "w").write("{}")
  assert carry.unfinished(root) == [cut]
  got = carry.pack("back.tgz", root, out)
  assert got == [out, cut]
  with tarfile.open("back.tgz") as t:
    names = set(t.getnames())
  assert f"{out}/gpu_runs.json" in names and f"{cut}/config.json" in names
  assert f"{cut}/checkpoints/2048/state" in names and f"{cut}/checkpoints/metadata" in names
  assert not any(n.startswith(f"{cut}/checkpoints/1024") for n in names)
  assert not any(n.startswith(done) for n in names)


def test_the_gpu_presets_page_says_where_it_runs_and_what_it_reads():
  from studies.length import page, results
  d = results.build(presets.preset("gpu"), {})
  text = "\n".join(page.render(d))
  assert "this preset reads `pycode/[np]*/**/*.py` of it" in text
  assert f"{presets.GPU_SLICE['files']:,} files" in text
  assert "It runs on a lent GPU, one device call at a time" in text
  assert "No CPU-minute plan" in text and "--measure_steps" not in text
  assert page.gpu_pointer(d) == []                 # only the CPU page points to it
