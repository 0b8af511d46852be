"""studies.core.results_index: results/README.md is written from the pages themselves,
links every results page, and keeps the variants summary between its markers."""
import os

from studies.core import all_pages, results_index as R

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "results")


def test_every_results_page_is_in_the_index_and_the_generator_links_it():
  files = R.page_files(RESULTS)
  assert "variants_copy/README.md" in files and "choose/README.md" in files
  committed = open(os.path.join(RESULTS, "README.md"), encoding="utf-8").read()
  fresh = "\n".join(R.lines(RESULTS))
  for rel in files:
    assert f"]({rel})" in fresh, rel
    assert f"]({rel})" in committed, (f"results/{rel} is not in results/README.md: run "
                                      "`python -m scripts.results_index`")
  assert "](choose/README.md)" in committed


def test_the_index_reads_each_pages_header_and_keeps_the_summary(tmp_path):
  (tmp_path / "alpha").mkdir()
  (tmp_path / "alpha" / "README.md").write_text(
      "# Alpha study\n\nWritten by `python -m scripts.alpha` on 2026-01-02: AMD EPYC, "
      "2 cores, 24 GiB RAM, jax 0.11.2.\n")
  (tmp_path / "README.md").write_text(f"# old\n\n{R.BEGIN}\n| kept |\n{R.END}\n")
  R.write(str(tmp_path))
  text = (tmp_path / "README.md").read_text()
  assert f"{R.BEGIN}\n| kept |\n{R.END}" in text
  assert ("| [alpha](alpha/README.md) | Alpha study | hand-written (no writer) | "
          "2026-01-02 | 2-core AMD EPYC |") in text
  assert R.writer("choose/README.md") == "`python -m scripts.choose --page_only`"
  assert any(p.module == "scripts.results_index" for p in all_pages.PAGES)


def test_every_results_folder_has_its_page():
  """A folder of results/ without a README.md would be left out of the index (which
  lists the pages): each one has its page, written by a `make pages` entry."""
  folders = sorted(e.name for e in os.scandir(RESULTS) if e.is_dir())
  assert "variants_copy" in folders
  missing = [f for f in folders if not os.path.isfile(os.path.join(RESULTS, f, "README.md"))]
  assert not missing, (f"results/{missing[0]}/ has no README.md: give it its page (a "
                       "studies/core/all_pages.py entry) or move its JSON beside the doc "
                       "that reads it")
