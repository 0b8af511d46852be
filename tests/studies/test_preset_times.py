"""studies/bench/preset_times.py: a preset timed by two real train.py runs, the page and the
README table written from the rows, and the committed table is the committed JSON's."""
import json
import math
import pathlib

import pytest

from studies.bench import preset_times as pt

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow   # two train.py subprocesses (make test-all)
def test_a_preset_timed_by_two_runs_and_written(tmp_path):
  row = pt.time_preset("copy", str(tmp_path / "runs"), steps=(2, 4, 1))
  # two steps' CPU time is within the noise of a compilation's: finite, not positive
  assert row["steps"] == [2, 4] and math.isfinite(row["cpu_ms_per_step"])
  assert row["steps_per_s"] > 0
  assert row["params"] > 0 and len(row["load_average"]) == 3
  assert "--config=configs/copy.py:cpu" in row["command"]
  off = row["huge_pages_off"]                # the same runs with malloc's huge pages off
  assert off["steps_per_s"] > 0 and math.isfinite(off["sys_ms_per_step"])
  for tag in ("huge", "plain"):
    for n in (2, 4):                        # each run finished where it was told
      recs = [json.loads(l) for l in
              open(tmp_path / "runs" / f"copy_cpu_{tag}_{n}" / "metrics.jsonl")]
      assert max(r["step"] for r in recs) == n
  readme = tmp_path / "README.md"
  readme.write_text(f"before\n{pt.BEGIN}\nold\n{pt.END}\nafter\n")
  run = {"command": "python -m scripts.preset_times", "date": "2026-11-25",
         "backend": "cpu", "host_cpu": "x", "preset": "cpu"}
  pt.write([row], run, str(tmp_path / "out"), [str(readme)])
  text = readme.read_text()
  assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
  assert f"| `configs/copy.py:cpu` | {row['cpu_ms_per_step']:.0f} |" in text
  assert "## " not in text and "CPU time per step" in (tmp_path / "out" / "README.md").read_text()


def test_the_committed_table_is_the_committed_json_and_covers_every_task():
  r = json.loads((ROOT / pt.OUT / "results.json").read_text())
  assert {row["task"] for row in r["rows"]} == set(pt.STEPS)
  for readme in pt.READMES:
    assert "\n".join(pt.table(r["rows"], r["run"]) + pt.huge_pages_summary(r["rows"])) \
        in (ROOT / readme).read_text(), readme


def test_the_huge_pages_table_sets_each_preset_on_against_off(tmp_path):
  row = dict(task="listops", preset="cpu_long", steps=[4, 12], log_every=4, command="c",
             cpu_ms_per_step=9000.0, sys_ms_per_step=1500.0, steps_per_s=0.2,
             load_average=[1, 2, 2], params=10, huge_pages_off=dict(
                 cpu_ms_per_step=12000.0, sys_ms_per_step=4000.0, steps_per_s=0.15))
  assert pt.huge_pages_table([row])[2] == \
      "| `configs/listops.py:cpu_long` | 9000 (1500) | 12000 (4000) | 0.75 | 0.200 / 0.150 |"
  run = {"command": "python -m scripts.preset_times", "date": "2026-11-27",
         "backend": "cpu", "host_cpu": "x", "preset": "cpu"}
  readme = tmp_path / "R.md"
  readme.write_text(f"{pt.BEGIN}\n{pt.END}\n")
  pt.write([row], run, str(tmp_path / "out"), [str(readme)])
  page = (tmp_path / "out" / "README.md").read_text()
  assert "## Malloc's huge pages, on and off" in page and "| 0.75 |" in page
  assert "| 0.200 |" in readme.read_text()     # rates under 1 step/s keep 3 decimals
  assert "took 1.33 to 1.33 times the CPU time per step (`listops.py:cpu_long`: 33% of " \
      "it in the kernel" in readme.read_text()
  old = {k: v for k, v in row.items() if k not in ("huge_pages_off", "sys_ms_per_step")}
  pt.write([old], run, str(tmp_path / "old"), [str(readme)])    # rows of an older run
  assert "Malloc" not in (tmp_path / "old" / "README.md").read_text()


def test_the_heap_section_sets_huge_pages_alone_against_the_heap_kept(tmp_path):
  """A row measured both ways (scripts.preset_times --heap) gets the page's section on
  keeping the heap; the README table (the Makefile's setting) is unchanged by it."""
  fig = lambda cpu, sys_, rate: dict(cpu_ms_per_step=cpu, sys_ms_per_step=sys_,
                                     steps_per_s=rate)
  run = {"command": "python -m scripts.preset_times", "date": "2026-11-29",
         "backend": "cpu", "host_cpu": "x", "preset": "cpu"}
  row = dict(task="listops", preset="cpu", steps=[50, 200], log_every=25, command="c",
             load_average=[1, 2, 2], params=10, **fig(120.0, 17.0, 9.0))
  readme = tmp_path / "R.md"
  readme.write_text(f"{pt.BEGIN}\n{pt.END}\n")
  pt.write([row], run, str(tmp_path / "a"), [str(readme)])
  before = readme.read_text()
  assert "Keeping the heap" not in (tmp_path / "a" / "README.md").read_text()
  row["keep_heap"] = {"run": dict(run, command="python -m scripts.preset_times --heap"),
                      "huge_pages": fig(120.0, 17.0, 9.0), "kept": fig(108.0, 4.0, 10.0)}
  assert pt.heap_table([row])[2] == \
      "| `configs/listops.py:cpu` | 120 (17) | 108 (4) | 0.90 | 9.0 / 10.0 |"
  pt.write([row], run, str(tmp_path / "b"), [str(readme)])
  page = (tmp_path / "b" / "README.md").read_text()
  assert "## Keeping the heap" in page and "--heap" in page and "| 0.90 |" in page
  assert readme.read_text() == before
