"""The time per training step of every task config's cpu preset: results/cpu_presets/
and the table in configs/README.md and docs/performance.md (the study:
studies/bench/preset_times.py).

  python -m scripts.preset_times [--tasks copy,shakespeare,listops:cpu_long]
  python -m scripts.preset_times --page_only          # from results.json

Trains each preset twice (short and long) through train.py, with malloc's huge pages
on and then off; about 25 minutes on 2 CPU cores. Every number on the page comes
from the run that wrote results.json.

  python -m scripts.preset_times --heap --tasks=listops,copy

measures keeping malloc's heap (studies.core.runs.KEEP_HEAP, what the studies' children
set) against huge pages alone for those presets, one after the other, and adds it to
their rows of results.json (the other figures stay as they were).
"""
import argparse
import os

from studies.bench import preset_times as pt
from studies.core import pages


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--tasks", default=",".join(
      list(pt.STEPS) + [f"{t}:{pr}" for t, pr in pt.EXTRA]),
      help="task or task:preset (default: every task's cpu preset and studies.bench.preset_times.EXTRA)")
  p.add_argument("--root", default="workdirs/preset_times",
                 help="workdirs of the timing runs")
  p.add_argument("--out", default=pt.OUT)
  p.add_argument("--readmes", default=",".join(pt.READMES),
                 help="files whose table between the markers is rewritten")
  p.add_argument("--page_only", action="store_true",
                 help="rewrite the page and the table from <out>/results.json")
  p.add_argument("--heap", action="store_true",
                 help="measure the heap kept against huge pages alone for --tasks, added "
                      "to their rows of <out>/results.json")
  a = p.parse_args(argv)
  if a.heap:
    r = pages.read_json(os.path.join(a.out, "results.json"))
    run, rows = r["run"], r["rows"]
    heap_run = pages.run_record(pages.command_line("scripts.preset_times", argv,
                                                   drop=("--root", "--out", "--readmes")),
                                "cpu")
    for t in a.tasks.split(","):
      task, _, preset = t.partition(":")
      row = next((x for x in rows if (x["task"], x["preset"]) == (task, preset or "cpu")),
                 None)
      if row is None:
        p.error(f"--tasks: {t} has no row in {a.out}/results.json; time it first "
                "(without --heap)")
      row["keep_heap"] = {"run": heap_run, **pt.time_heap(task, a.root, preset or "cpu")}
      h = row["keep_heap"]
      print(f"{t}: {h['huge_pages']['cpu_ms_per_step']:.0f} CPU ms/step with huge pages "
            f"alone, {h['kept']['cpu_ms_per_step']:.0f} with the heap kept", flush=True)
  elif a.page_only:
    r = pages.read_json(os.path.join(a.out, "results.json"))
    run, rows = r["run"], r["rows"]
  else:
    run = pages.run_record(pages.command_line("scripts.preset_times", argv,
                                              drop=("--root", "--out", "--readmes")), "cpu")
    rows = []
    for t in a.tasks.split(","):
      task, _, preset = t.partition(":")
      rows.append(pt.time_preset(task, a.root, preset or "cpu"))
      r, off = rows[-1], rows[-1]["huge_pages_off"]
      print(f"{t}: {r['cpu_ms_per_step']:.0f} CPU ms/step ({r['sys_ms_per_step']:.0f} "
            f"system), {r['steps_per_s']:.3g} steps/s with huge pages; "
            f"{off['cpu_ms_per_step']:.0f} ({off['sys_ms_per_step']:.0f}), "
            f"{off['steps_per_s']:.3g} without", flush=True)
  pt.write(rows, run, a.out, a.readmes.split(","))
  print(f"wrote {a.out} and the tables in {a.readmes}")


if __name__ == "__main__":
  main()
