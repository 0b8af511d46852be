"""studies/preset_times: a preset timed by two real train.py runs, the page and the
README table written from the rows, and the committed table is the committed JSON's."""
import json
import math
import pathlib

import pytest

from studies import preset_times as pt

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow   # two train.py subprocesses (make test-all)
def test_a_preset_timed_by_two_runs_and_written(tmp_path):
  row = pt.time_preset("copy", str(tmp_path / "runs"), steps=(2, 4, 1))
  # two steps' CPU time is within the noise of a compilation's: finite, not positive
  assert row["steps"] == [2, 4] and math.isfinite(row["cpu_ms_per_step"])
  assert row["steps_per_s"] > 0
  assert row["params"] > 0 and len(row["load_average"]) == 3
  assert "--config=configs/copy.py:cpu" in row["command"]
  for n in (2, 4):                          # each run finished where it was told
    recs = [json.loads(l) for l in open(tmp_path / "runs" / f"copy_cpu_{n}" / "metrics.jsonl")]
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
    assert "\n".join(pt.table(r["rows"], r["run"])) in (ROOT / readme).read_text(), readme
