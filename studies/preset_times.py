"""The time per training step of every task config's cpu preset (configs/README.md's
table; `python -m scripts.preset_times`).

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

from studies import pages, runs

# (short, long) steps per task, and the log interval of the timing runs (the rate is
# over long/log - 1 intervals); evaluation and checkpoint only at the end of each run,
# over one batch (and 16 sentences of BLEU), so that the runs spend their time
# training. multi30k compiles one step per length bucket when a batch of it first
# comes: buckets 16, 24, 48 and 32 come first at steps 0, 3, 9 and 21 and 64 after
# step 100, so both of its runs compile the same four, and its rate's intervals (after
# the first 30 steps) compile nothing.
STEPS = {"copy": (50, 250, 25), "shakespeare": (50, 300, 50), "mnist": (50, 150, 25),
         "listops": (50, 200, 25), "multi30k": (30, 90, 30)}
OUT = "results/cpu_presets"
READMES = ("configs/README.md", "README.md")     # the table goes between markers
BEGIN = "<!-- cpu presets: written by scripts/preset_times.py -->"
END = "<!-- end cpu presets -->"


def command(task: str, preset: str, steps: int, log_every: int, workdir: str) -> list:
  """The train.py command line of one timing run."""
  ov = dict(num_train_steps=steps, eval_every=steps, checkpoint_every=steps,
            log_every=log_every, eval_batches=1, progress=False)
  if task == "multi30k":
    ov["bleu_sentences"] = 16
  return [sys.executable, "train.py", f"--config=configs/{task}.py:{preset}",
          f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in ov.items()]


def _cpu_seconds() -> float:
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime


def time_preset(task: str, root: str, preset: str = "cpu", steps=None) -> dict:
  """Trains configs/<task>.py:<preset> for `short` then `long` steps (log every
  `log_every`; `steps` = (short, long, log_every), default STEPS[task]), each from
  scratch in a workdir of its own under `root` (an earlier one there is removed);
  returns the row (module docstring)."""
  short, long, log_every = steps or STEPS[task]
  row = {"task": task, "preset": preset, "steps": [short, long], "log_every": log_every,
         "command": " ".join(["python"] + command(task, preset, long, log_every,
                                                  "WORKDIR")[1:])}
  cpu, load = {}, []
  for n in (short, long):
    wd = os.path.join(root, f"{task}_{preset}_{n}")
    shutil.rmtree(wd, ignore_errors=True)          # from scratch: no resume
    load.append(round(os.getloadavg()[0], 2))
    c0 = _cpu_seconds()
    code, tail, secs = runs.in_subprocess(command(task, preset, n, log_every, wd),
                                          os.path.join(root, f"{task}_{preset}_{n}.log"))
    if code != 0:
      raise RuntimeError(f"{task}: train.py exited {code} at {n} steps: {tail}")
    runs.require_finished(wd, n)
    cpu[n] = _cpu_seconds() - c0
    row[f"wall_s_{n}"] = round(secs, 1)
  load.append(round(os.getloadavg()[0], 2))
  rate, _, params = runs.rates(wd)
  row.update(cpu_ms_per_step=1000 * (cpu[long] - cpu[short]) / (long - short),
             steps_per_s=rate, params=params, load_average=load)
  return row


def table(rows: list[dict], run: dict) -> list[str]:
  """The README's table of the rows, with the run that measured them."""
  body = [[f"`configs/{r['task']}.py:{r['preset']}`", f"{r['cpu_ms_per_step']:.0f}",
           f"{r['steps_per_s']:.1f}", "–".join(f"{x:g}" for x in r["load_average"]),
           f"{r['params']:,}"] for r in rows]
  return ([pages.header(run), ""] + pages.table(
      ["preset", "CPU ms per step (user + system)", "steps/s (wall, training only)",
       "1-min load average during", "parameters"], body))


def write(rows: list[dict], run: dict, out: str = OUT, readmes=READMES) -> None:
  """out/results.json and out/README.md (the table and how it was measured), and the
  table between the markers of each of `readmes`."""
  pages.write_json(os.path.join(out, "results.json"), {"run": run, "rows": rows})
  method = __doc__.split("\n\n", 1)[1].strip()
  pages.write_text(os.path.join(out, "README.md"), [
      "# Time per step of the CPU presets", ""] + table(rows, run) + [
      "", method, "", "The command of each preset's long run (WORKDIR: a fresh "
      "directory):", ""] + [f"- `{r['command']}`" for r in rows])
  for readme in readmes:
    pages.splice_file(readme, BEGIN, END, "\n".join(table(rows, run)))
