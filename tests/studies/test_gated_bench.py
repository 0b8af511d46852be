"""studies.bench.gated: one case measured at tiny shapes (every measurement runs, the
decode prefill reaches its context), and the page, written from the JSON alone, states
the targets' verdicts from the figures."""
import dataclasses
import os

import pytest

from studies.bench import gated as gb
from studies.core import pages


# The case measured: "gla (ssd)" (an OPTION_CASES case: the options reach every form and
# the decode, the gate's per-token inputs are made, it has the assoc form) compiles in
# less than half gla's default gate's time (its chunked fwd+bwd ~1.2 against ~2.6 CPU-s,
# compiled three times here); the forms' numerics are tests/attention/test_gated.py's.
CASE = "gla (ssd)"


def test_the_committed_page_is_written_from_its_json_alone(tmp_path, monkeypatch):
  """The page from bench.json alone: the committed JSON gives the committed page, byte
  for byte; each case's ratios are its forms' times (`summary`) and its verdict on the
  scan target is read from them; the load before the run decides which clock the page
  calls the user's. (make test's cover of the page; the measured tiny case is make
  test-all's, below.)"""
  saved = pages.read_json("results/gated/bench.json")
  out = str(tmp_path / "gated")
  gb.write(saved, out)
  page = open(os.path.join(out, "README.md")).read()
  assert page == open("results/gated/README.md").read()
  assert os.path.getsize(os.path.join(out, "bench.png")) > 0
  for case, (slope, scan, assoc, dec) in gb.summary(saved, "wall").items():
    f = saved["cases"][case]["forms"]
    assert scan == pytest.approx(f["scan"]["wall"] / f["chunked"]["wall"])
    assert assoc == (pytest.approx(f["assoc"]["wall"] / f["chunked beside assoc"]["wall"])
                     if "assoc" in f else None)
    verdict = "met" if scan >= 3 else "missed"
    assert f"| {case} | wall | {slope:.2f} (" in page and f"{scan:.2f} ({verdict})" in page
  assert f"preset `{saved['run']['preset']}`" in page
  monkeypatch.setattr(gb, "plot", lambda path, r: None)   # the words only (~0.6 CPU-s a plot)
  for before, word in ((0.1, "the machine was idle"), (3.0, "the machine was shared")):
    gb.write(dict(saved, load={"before": before, "after": before}), out)
    assert word in open(os.path.join(out, "README.md")).read()


@pytest.mark.slow
def test_one_case_measured_and_its_page_rewritten_from_the_json(tmp_path, monkeypatch):
  """make test-all's: one case measured end to end. Covered in make test by
  tests/studies/test_gated_bench.py::test_the_committed_page_is_written_from_its_json_alone
  (the page, its ratios and verdicts from the JSON) and the forms' numerics by
  tests/attention/test_gated.py."""
  p = dataclasses.replace(gb.PRESETS["smoke"], lens=(32, 64), forms_N=32,
                          decode_lens=(8, 32), rounds=1)
  r = gb.measure(p, "smoke", "python -m scripts.gated_bench --preset=smoke", (CASE,),
                 log=lambda s: None)
  c = r["cases"][CASE]
  assert set(c["slope"]["times"]) == {32, 64} and set(c["forms"]) == {
      "chunked", "scan", "assoc", "chunked beside assoc"}
  assert set(c["decode"]) == {8, 32}
  for t in [*c["slope"]["times"].values(), *c["forms"].values(), *c["decode"].values()]:
    assert t["wall"] > 0 and t["cpu"] >= 0
  out = str(tmp_path / "gated")
  gb.write(r, out)
  saved = pages.read_json(os.path.join(out, "bench.json"))
  page = open(os.path.join(out, "README.md")).read()
  assert os.path.getsize(os.path.join(out, "bench.png")) > 0
  gb.write(saved, out)                         # the page from the JSON alone: the same
  assert open(os.path.join(out, "README.md")).read() == page
  slope, scan, assoc, dec = gb.summary(saved, "wall")[CASE]
  f = c["forms"]
  assert scan == pytest.approx(f["scan"]["wall"] / f["chunked"]["wall"])
  assert assoc == pytest.approx(f["assoc"]["wall"] / f["chunked beside assoc"]["wall"])
  verdict = "met" if scan >= 3 else "missed"
  assert f"| {CASE} | wall | {slope:.2f} (" in page and f"{scan:.2f} ({verdict})" in page
  assert "preset `smoke`" in page
  # the load before the run decides which clock the page calls the user's
  assert set(saved["load"]) == {"before", "after"}
  monkeypatch.setattr(gb, "plot", lambda path, r: None)   # the words only (~0.6 CPU-s a plot)
  for before, word in ((0.1, "the machine was idle"), (3.0, "the machine was shared")):
    gb.write(dict(saved, load={"before": before, "after": before}), out)
    assert word in open(os.path.join(out, "README.md")).read()


def test_the_script_merges_the_cases_it_measured_into_an_existing_bench(tmp_path, monkeypatch):
  """`scripts.gated_bench --cases=<some>` over an existing bench.json of the same shape
  replaces those cases' rows (merge_case, the run named on the page) and keeps the
  others', instead of writing a page of those cases alone."""
  import json
  import shutil
  from scripts import gated_bench as script
  shutil.copy("results/gated/bench.json", tmp_path / "bench.json")
  old = json.loads((tmp_path / "bench.json").read_text())
  new = dict(old, run=dict(old["run"], date="2099-01-01"), load={"before": 0.1, "after": 0.2})
  new["cases"] = {"deltanet": old["cases"]["gla"]}          # recognisably not deltanet's
  monkeypatch.setattr(gb, "measure", lambda *a, **k: new)
  monkeypatch.setattr(gb, "plot", lambda path, r: None)
  script.main(["--cases=deltanet", f"--out={tmp_path}"])
  got = json.loads((tmp_path / "bench.json").read_text())
  assert set(got["cases"]) == set(old["cases"])
  assert got["cases"]["deltanet"] == old["cases"]["gla"]
  assert got["cases"]["retention"] == old["cases"]["retention"]
  assert got["case_runs"]["deltanet"]["run"]["date"] == "2099-01-01"
  assert "**deltanet's rows come from another run**" in (tmp_path / "README.md").read_text()
