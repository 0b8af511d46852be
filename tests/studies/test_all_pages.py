"""studies.core.all_pages: `make pages` rewrites every results page from one list, and no
results/*/README.md is left out of it."""
import glob
import os

from studies.core import all_pages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_results_page_is_written_by_an_entry_of_the_list():
  written = {w for p in all_pages.PAGES for w in p.writes}
  pages = {os.path.relpath(p, ROOT)
           for p in glob.glob(os.path.join(ROOT, "results", "*", "README.md"))}
  assert pages, "no results pages found"
  left_out = sorted(pages - written - set(all_pages.HAND_WRITTEN))
  assert not left_out, (f"{left_out}: add the command that writes each page to "
                        "studies/core/all_pages.py's PAGES (or to HAND_WRITTEN, saying why)")


def test_every_entry_runs_a_script_that_exists_and_names_pages_that_exist():
  for p in all_pages.PAGES:
    assert os.path.exists(os.path.join(ROOT, *p.module.split(".")) + ".py"), p.module
    for w in p.writes:
      assert glob.glob(os.path.join(ROOT, w)), (p.module, w)
  assert len({(p.module, p.args) for p in all_pages.PAGES}) == len(all_pages.PAGES)


def test_make_pages_runs_the_list(monkeypatch):
  text = open(os.path.join(ROOT, "Makefile")).read()
  target = text.split("\npages:", 1)[1].split("\n\n", 1)[0]
  assert "-m scripts.pages" in target and "--page_only" not in target
  ran = []
  monkeypatch.setattr(all_pages.subprocess, "call", lambda cmd: ran.append(cmd[2:]) or 0)
  assert all_pages.main(["variants_mqar"]) == 0     # the MQAR page (the short one: archived)
  assert ran == [["scripts.mqar", "--preset=zoology_cpu", "--page_only"]]
  ran.clear()
  monkeypatch.setattr(all_pages.subprocess, "call", lambda cmd: ran.append(cmd[2:]) or 3)
  assert all_pages.main([]) == 3 and len(ran) == 1          # stops at the first failure
