"""The time per training step of every task config's cpu preset (the table of
configs/README.md and docs/performance.md; `python -m scripts.preset_times`), each
measured with malloc's huge pages on (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, what
the Makefile and the studies' child processes set: studies/core/runs.py says why) and then
off (=0, glibc's default).

Each preset is trained by the command a user runs (`python train.py
--config=configs/<task>.py:cpu --config.num_train_steps=N ...`, in a subprocess of
its own) twice, for `short` and `long` steps, with one evaluation and one checkpoint
at the end of each run and the preset's model, batch and data. Two figures per preset:

- CPU time per step: the second run's CPU seconds (user + system, every thread of
  the process) less the first's, over the steps between: the compilation, the data
  loading, the final evaluation and the save are in both runs and cancel. It does not
  depend on what else runs on the machine (unlike wall time), and on an idle machine
  with C cores one step takes at least cpu_ms / C of wall time.
- Wall steps/s of training alone in the long run (`runs.rates`: the log intervals
  after the first, which holds the compilation), as loaded as the machine was: the
  load average before and after each run is recorded beside it.
"""
from __future__ import annotations

import os
import resource
import shutil
import sys

from data import tasks
from studies.core import pages, runs

# (short, long) steps per task, and the log interval of the timing runs (the rate is
# over long/log - 1 intervals), from each task's record (Study.timing["cpu"]);
# evaluation and checkpoint only at the end of each run, over one batch (and 16
# sentences of BLEU), so that the runs spend their time training. multi30k compiles one
# step per length bucket when a batch of it first comes: buckets 16, 24, 48 and 32 come
# first at steps 0, 3, 9 and 21 and 64 after step 100, so both of its runs compile the
# same four, and its rate's intervals (after the first 30 steps) compile nothing.
STEPS = {n: tasks.task(n).study.timing["cpu"] for n in tasks.names()
         if "cpu" in tasks.task(n).study.timing}
# Other presets timed beside the cpu ones ((task, preset): steps as above, the other
# presets of Study.timing): ListOps at LRA's lengths (up to 2000 tokens), seconds per
# step.
EXTRA = {(n, p): s for n in tasks.names() for p, s in tasks.task(n).study.timing.items()
         if p != "cpu"}
OUT = "results/cpu_presets"
READMES = ("configs/README.md", "docs/performance.md")   # the table goes between markers
BEGIN = "<!-- cpu presets: written by scripts/preset_times.py -->"
END = "<!-- end cpu presets -->"


def command(task: str, preset: str, steps: int, log_every: int, workdir: str) -> list:
  """The train.py command line of one timing run."""
  ov = dict(num_train_steps=steps, eval_every=steps, checkpoint_every=steps,
            log_every=log_every, eval_batches=1, progress=False)
  if tasks.task(task).metric == "bleu":       # the BLEU of 16 sentences
    ov["bleu_sentences"] = 16
  return [sys.executable, "train.py", f"--config=configs/{task}.py:{preset}",
          f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in ov.items()]


def _children_cpu() -> tuple[float, float]:
  """(user + system, system) CPU seconds of this process's finished children."""
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime, r.ru_stime


def _timed(task, root, preset, short, long, log_every, huge_pages,
           keep_heap: bool = False) -> dict:
  """One setting of malloc (huge pages on or off; the heap kept or not: runs.KEEP_HEAP):
  the short and the long run, and their figures."""
  tag = ("huge" if huge_pages else "plain") + ("_kept" if keep_heap else "")
  cpu, sys_, load, wall = {}, {}, [], {}
  for n in (short, long):
    wd = os.path.join(root, f"{task}_{preset}_{tag}_{n}")
    shutil.rmtree(wd, ignore_errors=True)          # from scratch: no resume
    load.append(round(os.getloadavg()[0], 2))
    c0, s0 = _children_cpu()
    code, tail, secs = runs.in_subprocess(command(task, preset, n, log_every, wd),
                                          wd + ".log", huge_pages=huge_pages,
                                          keep_heap=keep_heap)
    if code != 0:
      raise RuntimeError(f"{task}:{preset}: train.py exited {code} at {n} steps: {tail}")
    runs.require_finished(wd, n)
    c1, s1 = _children_cpu()
    cpu[n], sys_[n], wall[n] = c1 - c0, s1 - s0, round(secs, 1)
  load.append(round(os.getloadavg()[0], 2))
  rate, _, params = runs.rates(wd)
  per = lambda d: 1000 * (d[long] - d[short]) / (long - short)
  return dict(cpu_ms_per_step=per(cpu), sys_ms_per_step=per(sys_), steps_per_s=rate,
              params=params, load_average=load, wall_s=wall)


def time_preset(task: str, root: str, preset: str = "cpu", steps=None) -> dict:
  """Trains configs/<task>.py:<preset> for `short` then `long` steps (log every
  `log_every`; `steps` = (short, long, log_every), default STEPS[task] or EXTRA), each
  from scratch in a workdir of its own under `root` (an earlier one there is removed),
  with malloc's huge pages on, then again with them off; returns the row (module
  docstring): the figures with huge pages on at its top level, those with them off
  under `huge_pages_off`."""
  short, long, log_every = steps or EXTRA.get((task, preset)) or STEPS[task]
  row = {"task": task, "preset": preset, "steps": [short, long], "log_every": log_every,
         "command": " ".join(["python"] + command(task, preset, long, log_every,
                                                  "WORKDIR")[1:])}
  row.update(_timed(task, root, preset, short, long, log_every, True))
  row["huge_pages_off"] = _timed(task, root, preset, short, long, log_every, False)
  return row


def time_heap(task: str, root: str, preset: str = "cpu", steps=None) -> dict:
  """Keeping the heap (runs.KEEP_HEAP, what the studies' children set) against huge
  pages alone (the Makefile's setting), both with huge pages on, measured one after the
  other as `time_preset` measures: {"huge_pages": figures, "kept": figures}."""
  short, long, log_every = steps or EXTRA.get((task, preset)) or STEPS[task]
  return {"huge_pages": _timed(task, root, preset, short, long, log_every, True),
          "kept": _timed(task, root, preset, short, long, log_every, True, keep_heap=True)}


def heap_table(rows: list[dict]) -> list[str]:
  """The heap kept against huge pages alone, per preset (rows measured both ways)."""
  body = []
  for r in rows:
    h = r.get("keep_heap")
    if not h:
      continue
    a, b = h["huge_pages"], h["kept"]
    body.append(_pair_row(r, a, b, b["cpu_ms_per_step"] / a["cpu_ms_per_step"]))
  return pages.table(["preset", "CPU ms per step, huge pages alone (system)",
                      "heap kept too (system)", "kept / alone, CPU",
                      "steps/s, alone / kept (wall)"], body)


def _rate(x: float) -> str:
  return f"{x:.1f}" if x >= 1 else f"{x:.3f}"


def _pair_row(r: dict, a: dict, b: dict, ratio: float) -> list[str]:
  """A comparison table's row: the preset, each setting's CPU ms per step (its system
  part in brackets; a difference of two runs' totals, so "-0" reads 0), the ratio and
  the two wall rates."""
  ms = lambda x: "0" if abs(x) < 0.5 else f"{x:.0f}"
  return [f"`configs/{r['task']}.py:{r['preset']}`",
          f"{ms(a['cpu_ms_per_step'])} ({ms(a['sys_ms_per_step'])})",
          f"{ms(b['cpu_ms_per_step'])} ({ms(b['sys_ms_per_step'])})", f"{ratio:.2f}",
          f"{_rate(a['steps_per_s'])} / {_rate(b['steps_per_s'])}"]


def table(rows: list[dict], run: dict) -> list[str]:
  """The table of the rows in configs/README.md and docs/performance.md (huge pages on:
  how the studies and make run), with the run that measured them."""
  body = [[f"`configs/{r['task']}.py:{r['preset']}`", f"{r['cpu_ms_per_step']:.0f}",
           _rate(r["steps_per_s"]), "–".join(f"{x:g}" for x in r["load_average"]),
           f"{r['params']:,}"] for r in rows]
  return ([pages.header(run), ""] + pages.table(
      ["preset", "CPU ms per step (user + system)", "steps/s (wall, training only)",
       "1-min load average during", "parameters"], body))


def _both(rows: list[dict]) -> list[dict]:
  """The rows measured with huge pages on and off (rows of older runs have one)."""
  return [r for r in rows if r.get("huge_pages_off") and "sys_ms_per_step" in r]


def huge_pages_table(rows: list[dict]) -> list[str]:
  """Huge pages on against off, per preset (rows measured both ways)."""
  body = []
  for r in _both(rows):
    off = r["huge_pages_off"]
    body.append(_pair_row(r, r, off, r["cpu_ms_per_step"] / off["cpu_ms_per_step"]))
  return pages.table(["preset", "CPU ms per step, huge pages on (system)",
                      "off (system)", "on / off, CPU", "steps/s, on / off (wall)"], body)


def huge_pages_summary(rows: list[dict]) -> list[str]:
  """The READMEs' line on huge pages: how much more CPU the runs took without them."""
  both = _both(rows)
  if not both:
    return []
  x = [r["huge_pages_off"]["cpu_ms_per_step"] / r["cpu_ms_per_step"] for r in both]
  worst = max(both, key=lambda r: r["huge_pages_off"]["cpu_ms_per_step"] / r["cpu_ms_per_step"])
  off = worst["huge_pages_off"]
  return ["", f"With malloc's huge pages off (`GLIBC_TUNABLES=glibc.malloc.hugetlb=0`, "
              f"glibc's default) the same runs took {min(x):.2f} to {max(x):.2f} times "
              f"the CPU time per step (`{worst['task']}.py:{worst['preset']}`: "
              f"{off['sys_ms_per_step'] / off['cpu_ms_per_step']:.0%} of it in the kernel, "
              "faulting in fresh pages)."]


def heap_section(rows: list[dict]) -> list[str]:
  """The page's section on keeping the heap, where rows were measured both ways."""
  hp = heap_table(rows)
  if len(hp) <= 2:
    return []
  runs_ = [r["keep_heap"]["run"] for r in rows if r.get("keep_heap")]
  return ["", "## Keeping the heap", "",
          "The studies' child processes (one training run each) also keep malloc's heap "
          "(`studies.core.runs.KEEP_HEAP`: one arena, no mmap'd blocks, no trimming, 256 MiB "
          "more on each growth), so that a step's buffers are not handed back and "
          "faulted in (and zeroed) again on the next step; their resident memory stays "
          "at its high-water mark. Both settings with huge pages on, one after the other "
          "(`python -m scripts.preset_times --heap --tasks=...`); CPU ms per step (user + "
          "system) with the system part in brackets (each a difference of two runs' "
          "totals: near 0 it can come out a little below). Not set for the test suite (it "
          "compiles more than it runs) nor by the Makefile.", "",
          pages.header(runs_[-1]), ""] + hp + [""]


def write(rows: list[dict], run: dict, out: str = OUT, readmes=READMES) -> None:
  """out/results.json and out/README.md (the table and how it was measured), and the
  table between the markers of each of `readmes`."""
  pages.write_json(os.path.join(out, "results.json"), {"run": run, "rows": rows})
  method = __doc__.split("\n\n", 1)[1].strip()
  hp = huge_pages_table(rows)
  pages.write_text(os.path.join(out, "README.md"), [
      "# Time per step of the CPU presets", ""] + table(rows, run) + [
      "", method, ""] + ([
      "## Malloc's huge pages, on and off", "",
      "The same runs with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (on: the table "
      "above, what the Makefile and the studies' child processes set) and `=0` (off, "
      "glibc's default), one after the other on the machine above; CPU ms per step "
      "(user + system) with the system part, the kernel's (page faults mostly), in "
      "brackets. The CPU time is the measure to read (other tenants of the machine "
      "move the wall rate more).", ""] + hp + [""] if len(hp) > 2 else []) + [
      "The command of each preset's long run (WORKDIR: a fresh directory):", ""] + [
      f"- `{r['command']}`" for r in rows] + heap_section(rows))
  for readme in readmes:
    pages.splice_file(readme, BEGIN, END,
                      "\n".join(table(rows, run) + huge_pages_summary(rows)))
