"""studies.suite_cost: a command's CPU seconds (its child processes), its pytest counts
and the page rewritten from its JSON."""
import json
import sys

from studies import suite_cost as sc


def test_outcome_reads_pytest_closing_line():
  text = "....\n= 3 failed, 1274 passed, 2 skipped, 5 deselected in 486.12s (0:08:06) =\n"
  assert sc.outcome(text) == {"failed": 3, "passed": 1274, "skipped": 2,
                              "deselected": 5, "pytest_s": 486.12}
  assert sc.outcome("1 error in 0.5s") == {"error": 1, "pytest_s": 0.5}
  assert sc.outcome("no summary") == {}


def test_a_command_is_measured_and_its_page_comes_back(tmp_path):
  # a child that burns ~0.3 s of CPU, then prints pytest's line
  code = ("import time; t = time.process_time()\n"
          "while time.process_time() - t < 0.3: pass\n"
          "print('2 passed in 0.31s')")
  rec = sc.measure([sys.executable, "-c", code], cwd=str(tmp_path), gauge_n=64)
  assert rec["status"] == 0 and rec["passed"] == 2 and rec["pytest_s"] == 0.31
  assert rec["cpu_s"] >= 0.3 and rec["wall_s"] >= 0.3
  assert rec["gauge_gflop_s"]["before"] > 0 and "64 × 64 float32" in \
      rec["gauge_gflop_s"]["what"]
  sc.write(rec, str(tmp_path / "out"))
  page = (tmp_path / "out" / "README.md").read_text()
  assert "2 passed" in page and "within the target" in page
  back = json.loads((tmp_path / "out" / "results.json").read_text())
  sc.write(back, str(tmp_path / "again"))
  assert (tmp_path / "again" / "README.md").read_text() == page
