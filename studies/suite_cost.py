"""What the test suite costs: `make test`'s CPU seconds (user + system of every process
it starts, what `/usr/bin/time` reports), its wall time and its outcome, with the
machine's matmul gauge before and after and the load around it, in
results/suite/results.json and results/suite/README.md (the run: scripts/suite_cost.py).

The budget it is held to (docs/testing.md): at most 1,000 CPU-seconds, i.e. under 10
minutes on 2 idle cores, CI's machine; 800 leaves room for the tests later issues add.
CPU seconds, not wall time, because they hold under load (two cores shared with another
job lengthen the wall time, not the work); the gauge and the load average say how far
the machine was from idle.
"""
from __future__ import annotations

import os
import re
import resource
import subprocess
import time

from studies import pages, timing

OUT = "results/suite"
BUDGET = {"cpu_s": 1000, "target_cpu_s": 800}
COMMAND = ("make", "test")


def outcome(text: str) -> dict:
  """pytest's closing counts from its output ('1274 passed, 2 skipped in 486.1s'):
  {"passed": 1274, "skipped": 2, "pytest_s": 486.1}; {} when there is no such line."""
  lines = [l for l in text.splitlines() if re.search(r"\b(passed|failed|error)", l)
           and re.search(r" in [\d.]+s", l)]
  if not lines:
    return {}
  last = lines[-1]
  out = {w: int(n) for n, w in re.findall(
      r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)", last)}
  out["pytest_s"] = float(re.search(r" in ([\d.]+)s", last).group(1))
  return out


def measure(command=COMMAND, cwd: str = ".", gauge_n: int = 2048,
            by: str | None = None) -> dict:
  """Runs `command` (a list of words) in `cwd` and returns its record: the run record
  (machine, date, and `by`, the command line that measured, default `command`),
  "measured" (`command` in words), "cpu_s" (user + system of its processes: RUSAGE_CHILDREN
  around it), "user_s", "sys_s", "wall_s", "status", pytest's counts ("passed",
  "failed", ..., "pytest_s"), the git commit of `cwd`, the 1-minute load average
  before and after, and the matmul gauge (studies.timing.matmul_peak at `gauge_n`)
  before and after, in GFLOP/s."""
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd,
                          capture_output=True, text=True).stdout.strip() or None
  gauge = [timing.matmul_peak(gauge_n)]
  load = [os.getloadavg()[0]]
  before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
  r = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True)
  wall = time.perf_counter() - t
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  load.append(os.getloadavg()[0])
  gauge.append(timing.matmul_peak(gauge_n))
  user, sys_ = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
  return {"run": pages.run_record(by or " ".join(command)), "measured": " ".join(command),
          "commit": commit,
          "status": r.returncode, "cpu_s": round(user + sys_, 1),
          "user_s": round(user, 1), "sys_s": round(sys_, 1), "wall_s": round(wall, 1),
          **outcome(r.stdout + r.stderr),
          "load_1min": {"before": round(load[0], 2), "after": round(load[1], 2)},
          "gauge_gflop_s": {"before": round(gauge[0]["flop_per_s"] / 1e9, 1),
                            "after": round(gauge[1]["flop_per_s"] / 1e9, 1),
                            "what": timing.peak_text(gauge[0]).split(" (", 1)[1][:-1]},
          "budget": BUDGET}


def page(rec: dict) -> str:
  """The page of a record (results/suite/README.md)."""
  run, g, ld = rec["run"], rec["gauge_gflop_s"], rec["load_1min"]
  counts = ", ".join(f"{rec[k]} {k}" for k in ("passed", "failed", "skipped", "errors",
                                                "error") if rec.get(k))
  b = rec["budget"]
  verdict = ("within the target" if rec["cpu_s"] <= b["target_cpu_s"] else
             "over the target, within the budget" if rec["cpu_s"] <= b["cpu_s"] else
             "OVER THE BUDGET")
  lines = [
      "# What the test suite costs", "",
      pages.header(run), "",
      f"`{rec.get('measured', run['command'])}` at commit `{rec['commit']}`: exit "
      f"status {rec['status']}, "
      f"{counts or 'no pytest summary line'}.", "",
      *pages.table(["CPU seconds (user + system)", "user", "system", "wall seconds",
                    "budget / target (CPU s)", ""],
                   [[f"**{rec['cpu_s']:.0f}**", f"{rec['user_s']:.0f}",
                     f"{rec['sys_s']:.0f}", f"{rec['wall_s']:.0f}",
                     f"{b['cpu_s']} / {b['target_cpu_s']}", verdict]]),
      "",
      f"The machine's matmul gauge ({g['what']}): {g['before']:.0f} GFLOP/s before, "
      f"{g['after']:.0f} after; 1-minute load average {ld['before']:.2f} before, "
      f"{ld['after']:.2f} after (the suite itself loads 2 cores).", "",
      "CPU seconds are those of every process the command starts (RUSAGE_CHILDREN, "
      "what `/usr/bin/time` reports), so they hold when the cores are shared; the wall "
      "time does not. What the suite covers, what `make test-all` adds and how it is "
      "kept cheap: [docs/testing.md](../../docs/testing.md). Rewritten from "
      "[results.json](results.json) by `python -m scripts.suite_cost --page_only`.", ""]
  return "\n".join(lines)


def write(rec: dict, out: str = OUT) -> None:
  """results.json and README.md of a record in `out`."""
  os.makedirs(out, exist_ok=True)
  pages.write_json(os.path.join(out, "results.json"), rec)
  pages.write_text(os.path.join(out, "README.md"), page(rec))
