"""studies.core.pages and studies.core.plots: the run header, tables, splicing, JSON round trips."""
import json

import pytest

from studies.core import pages, plots


def test_run_record_and_header_name_command_machine_date_and_preset():
  run = pages.run_record("python -m scripts.x --preset=cpu", "cpu")
  for k in ("backend", "host", "jax_version", "date", "command", "preset", "ram_gib"):
    assert run[k] is not None, k
  h = pages.header(run)
  assert h.startswith("Written by `python -m scripts.x --preset=cpu` on " + run["date"])
  assert run["host"] in h and f"jax {run['jax_version']}" in h and "preset `cpu`" in h
  gpu = dict(run, backend="gpu", device_kind="NVIDIA H100", device_count=8, ram_gib=None)
  assert pages.where(gpu) == f"NVIDIA H100 x8 ({run['host']} host)"
  assert pages.header(dict(run, preset=None)).endswith(f"jax {run['jax_version']}.")


def test_command_line_leaves_out_local_paths():
  cmd = pages.command_line("scripts.x", ["--a=1", "--out=results/o", "--data_dir=d", "--b"])
  assert cmd == "python -m scripts.x --a=1 --b"


def test_table_splice_and_json(tmp_path):
  assert pages.table(["a", "b"], [[1, "x"]]) == ["| a | b |", "|---|---|", "| 1 | x |"]
  p = tmp_path / "page.md"
  p.write_text("top\n<!-- b -->\nold\n<!-- e -->\nbottom\n")
  pages.splice_file(str(p), "<!-- b -->", "<!-- e -->", "new")
  assert p.read_text() == "top\n<!-- b -->\nnew\n<!-- e -->\nbottom\n"
  with pytest.raises(ValueError, match="no marker"):
    pages.splice("text", "<!-- b -->", "<!-- e -->", "x")
  pages.write_json(str(tmp_path / "d" / "r.json"), {"1": 2.5})
  assert pages.keyed(pages.read_json(str(tmp_path / "d" / "r.json"))) == {1: 2.5}
  assert pages.read_json(str(tmp_path / "none.json"), {}) == {}
  pages.write_text(str(tmp_path / "x.md"), ["a", "b"])
  assert (tmp_path / "x.md").read_text() == "a\nb\n"


def test_plots_save_a_png(tmp_path):
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(2, 2))
  ax.plot([0, 1], [1, 0])
  plots.save(fig, str(tmp_path / "f.png"), dpi=50)
  assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
  assert not plt.get_fignums()          # saved and closed


def test_update_json_loses_no_entry_when_two_processes_append_at_once(tmp_path):
  """Two invocations of a sweep (one per core) record their runs in one JSON file."""
  import subprocess
  import sys
  path = str(tmp_path / "runs.json")
  code = ("import sys; from studies.core import pages\n"
          "for i in range(200):\n"
          "  pages.update_json(sys.argv[1], lambda d: d + [sys.argv[2] + str(i)], [])")
  ps = [subprocess.Popen([sys.executable, "-c", code, path, t]) for t in "ab"]
  assert [p.wait() for p in ps] == [0, 0]
  done = json.load(open(path))
  assert sorted(done) == sorted(f"{t}{i}" for t in "ab" for i in range(200))


def test_a_ring_row_of_a_one_device_run_says_it_ran_flash():
  """A variants-page row whose run had one device on its 'seq' mesh axis is marked
  (short in the variant cell, from the registry's `runs_as` note of its config's mesh),
  one whose config splits 'seq' over 2 devices is not; the mark comes from the run's
  config (or its recorded notes), not from the variant's name."""
  from studies.variants import compare as cv, page as vp
  res = {"variant": "ring", "task": "copy", "status": "ok", "eval": {"device_count": 1},
         "steps_per_s": 1.0, "params": 10, "decode_mode": "cache", "curve": []}
  one = cv.make_config("copy", "cpu", "ring")
  notes = vp.run_notes(res, one)
  assert len(notes) == 1 and notes[0].startswith("ring on 1 device = flash")
  cell = vp.row(res, notes=notes).split("|")[1]
  assert "`ring` (ring on 1 device = flash)" in cell
  two = cv.make_config("copy", "cpu", "ring")
  two.mesh.seq = 2
  assert vp.run_notes(dict(res, eval={"device_count": 2}), two) == []
  assert vp.run_notes(dict(res, eval={}), two) == []          # device count not recorded
  assert vp.run_notes(dict(res, attention_notes=[]), one) == []   # the run's own record
  assert vp.run_notes(dict(res, status="refused"), one) == []
  assert cv.attention_notes(cv.make_config("copy", "cpu", "flash")) == []
