"""studies.bench.suite_cost: a command's CPU seconds (its child processes), its pytest
counts and the page rewritten from its JSON."""
import json
import sys

from studies.bench import suite_cost as sc


def test_outcome_reads_pytest_closing_line():
  text = "....\n= 3 failed, 1274 passed, 2 skipped, 5 deselected in 486.12s (0:08:06) =\n"
  assert sc.outcome(text) == {"failed": 3, "passed": 1274, "skipped": 2,
                              "deselected": 5, "pytest_s": 486.12}
  assert sc.outcome("1 error in 0.5s") == {"error": 1, "pytest_s": 0.5}
  assert sc.outcome("no summary") == {}


def test_slowest_phases_are_read_and_shown():
  text = ("== slowest 3 durations ==\n"
          "12.50s call     tests/a.py::test_x[(1, 80, 'bf16')]\n"
          "40.00s setup    tests/b.py::test_y@group\n"
          "(1 durations < 0.005s hidden.)\n= 2 passed in 60.0s =\n")
  got = sc.slowest(text)
  assert got == [{"s": 40.0, "when": "setup", "test": "tests/b.py::test_y@group"},
                 {"s": 12.5, "when": "call", "test": "tests/a.py::test_x[(1, 80, 'bf16')]"}]
  assert sc.slowest("2 passed in 1.0s") == []
  lines = sc.slowest_section({"slowest": got, "cpu_s": 105.0})
  assert "| 40.0 | setup | `tests/b.py::test_y@group` |" in lines
  assert "52 s together, about 50% of the CPU seconds" in " ".join(lines)
  assert sc.slowest_section({"cpu_s": 1.0}) == []


def test_a_command_is_measured_and_its_page_comes_back(tmp_path):
  # a child that burns ~0.3 s of CPU, then prints pytest's line
  code = ("import json, os, time; t = time.process_time()\n"
          "while time.process_time() - t < 0.3: pass\n"
          "f = open(os.environ['ATTNLAB_TEST_CPU_LOG'], 'a')\n"
          "f.write(json.dumps({'test': 't.py::a', 'cpu_s': 0.1}) + '\\n')\n"
          "f.write(json.dumps({'test': 't.py::b', 'cpu_s': 0.2}) + '\\n')\n"
          "print('2 passed in 0.31s')")
  rec = sc.measure([sys.executable, "-c", code], cwd=str(tmp_path), gauge_n=64)
  assert rec["status"] == 0 and rec["passed"] == 2 and rec["pytest_s"] == 0.31
  assert rec["cpu_s"] >= 0.3 and rec["wall_s"] >= 0.3
  assert rec["gauge_gflop_s"]["before"] > 0 and "64 × 64 float32" in \
      rec["gauge_gflop_s"]["what"]
  sc.write(rec, str(tmp_path / "out"))
  page = (tmp_path / "out" / "README.md").read_text()
  assert "2 passed" in page and "within the target" in page
  assert rec["costliest"] == [{"cpu_s": 0.2, "test": "t.py::b"},
                              {"cpu_s": 0.1, "test": "t.py::a"},
                              {"cpu_s": 0.3, "test": "<all 2 tests>"}]
  assert "| 0.2 | `t.py::b` |" in page and "of 0 s inside the tests" in page
  back = json.loads((tmp_path / "out" / "results.json").read_text())
  sc.write(back, str(tmp_path / "again"))
  assert (tmp_path / "again" / "README.md").read_text() == page


def _rec(commit, g, cpu, date="2026-11-29"):
  return {"commit": commit, "status": 0, "cpu_s": cpu, "wall_s": cpu / 2, "passed": 9,
          "run": {"date": date}, "gauge_gflop_s": {"before": g, "after": g}}


def test_same_code_pairs_give_the_exponent_and_the_page_its_scaled_column(tmp_path):
  # inversely proportional: twice the gauge, half the CPU seconds -> exponent 1
  hist = [_rec("a", 250, 1000), _rec("b", 250, 900), _rec("a", 500, 500, "2026-11-30"),
          _rec("b", 260, 880)]                       # b: gauges 4% apart, no exponent
  assert sc.same_code_exponents(hist) == [
      {"commit": "a", "gauges": [250, 500], "cpu_s": [1000, 500], "exponent": 1.0}]
  assert sc.scaled(_rec("x", 258, 1032)) == 1032 * 258 / sc.REFERENCE_GAUGE
  text = "\n".join(sc.history_section(hist))
  assert "exponent 1.00" in text and text.count("| `a` |") == 2
  assert "straddle" in text        # exactly 1: neither above nor below
  steep = [_rec("a", 250, 1000), _rec("a", 300, 600)]   # b = ln(1000/600)/ln(1.2) = 2.8
  assert "overstates" in "\n".join(sc.history_section(steep))
  assert "untested" in "\n".join(sc.history_section(hist[1:2]))
  failing = dict(_rec("c", 250, 900), status=2, failed=1)     # a red run says so
  assert "| 9 (1 failed) |" in "\n".join(sc.history_section([failing]))
  # write() appends each record once and the page lists every one
  out = str(tmp_path / "out")
  for r in hist[:2] + hist[:1]:
    sc.write({**r, "user_s": 1, "sys_s": 1, "load_1min": {"before": 0, "after": 0},
              "gauge_gflop_s": {**r["gauge_gflop_s"], "what": "m"},
              "budget": sc.BUDGET, "run": {**r["run"], "command": "c", "host": "h"}}, out)
  assert len(json.loads((tmp_path / "out" / "history.json").read_text())) == 2


def test_the_suite_logs_each_tests_cpu_seconds_when_asked(tmp_path):
  """tests/conftest.py with ATTNLAB_TEST_CPU_LOG: one line per test, its CPU seconds
  (a test that burns ~0.2 s reads at least that)."""
  import os
  import subprocess
  (tmp_path / "test_burn.py").write_text(
      "import time\n"
      "def test_burn():\n  t = time.process_time()\n"
      "  while time.process_time() - t < 0.2: pass\n"
      "def test_idle():\n  pass\n")
  log = tmp_path / "cpu.jsonl"
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                      "-p", "tests.conftest", "--rootdir", str(tmp_path), str(tmp_path)],
                     cwd=root, capture_output=True, text=True,
                     env={**os.environ, "PYTHONPATH": root, sc.CPU_LOG_ENV: str(log)})
  assert r.returncode == 0, r.stdout + r.stderr
  got = {d["test"].split("::")[-1]: d["cpu_s"] for d in map(json.loads, log.open())}
  assert set(got) == {"test_burn", "test_idle"} and got["test_burn"] >= 0.2, got
  assert got["test_idle"] < got["test_burn"]
