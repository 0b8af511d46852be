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

import math
import os
import re
import resource
import subprocess
import time

from studies.core import pages, timing

OUT = "results/suite"
BUDGET = {"cpu_s": 1000, "target_cpu_s": 800}
COMMAND = ("make", "test")
# The matmul gauge (GFLOP/s) of the machine the budget was set on (issue 74: "this
# machine read about 516"): the gauge the history's scaled column refers to
REFERENCE_GAUGE = 516.0


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


def slowest(text: str) -> list[dict]:
  """pytest's `--durations` lines ('76.35s call     tests/x.py::test_y[a]'), slowest
  first: [{"s": 76.35, "when": "call", "test": "tests/x.py::test_y[a]"}]; [] without."""
  got = [{"s": float(s), "when": w, "test": t} for s, w, t in re.findall(
      r"^([\d.]+)s (setup|call|teardown)\s+(\S.*?)\s*$", text, re.M)]
  return sorted(got, key=lambda d: -d["s"])


# tests/conftest.py appends {"test", "cpu_s"} per test to the file this names.
CPU_LOG_ENV = "ATTNLAB_TEST_CPU_LOG"


def costliest_tests(log: str, top: int = 25) -> list[dict]:
  """The `top` tests of most CPU seconds in the per-test log tests/conftest.py writes
  under CPU_LOG_ENV (JSON lines {"test", "cpu_s"}: a test's setup, call and teardown,
  its process's user + system seconds and its waited-for children's, so a module
  fixture counts in the first test that uses it), costliest first, each with
  {"cpu_s", "test"}, plus the log's total as the first entry's "of_total"
  (see `costliest_total`)."""
  import json
  rows = [json.loads(l) for l in log.splitlines() if l.strip()]
  ranked = sorted(rows, key=lambda d: -d["cpu_s"])[:top]
  return [{"cpu_s": d["cpu_s"], "test": d["test"]} for d in ranked] + (
      [{"cpu_s": round(sum(d["cpu_s"] for d in rows), 1), "test": f"<all {len(rows)} tests>"}]
      if rows else [])


def measure(command=COMMAND, cwd: str = ".", gauge_n: int = 2048,
            by: str | None = None, keep_log: str | None = None) -> dict:
  """Runs `command` (a list of words) in `cwd` and returns its record: the run record
  (machine, date, and `by`, the command line that measured, default `command`),
  "measured" (`command` in words), "cpu_s" (user + system of its processes: RUSAGE_CHILDREN
  around it), "user_s", "sys_s", "wall_s", "status", pytest's counts ("passed",
  "failed", ..., "pytest_s"), the git commit of `cwd`, the 1-minute load average
  before and after, and the matmul gauge (studies.core.timing.matmul_peak at `gauge_n`)
  before and after, in GFLOP/s. keep_log: a path to keep the per-test CPU log at
  (JSON lines {"test", "cpu_s"}, tests/conftest.py); by default it is removed."""
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd,
                          capture_output=True, text=True).stdout.strip() or None
  gauge = [timing.matmul_peak(gauge_n)]
  load = [os.getloadavg()[0]]
  import tempfile
  fd, log = tempfile.mkstemp(prefix="attnlab_test_cpu_", suffix=".jsonl")
  os.close(fd)
  env = {**os.environ, CPU_LOG_ENV: log}      # tests/conftest.py: CPU seconds per test
  before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
  r = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, env=env)
  wall = time.perf_counter() - t
  with open(log, encoding="utf-8") as f:
    costliest = costliest_tests(f.read())
  if keep_log:           # every test's line, for a question the top 25 do not answer
    import shutil
    shutil.move(log, keep_log)
  else:
    os.unlink(log)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  load.append(os.getloadavg()[0])
  gauge.append(timing.matmul_peak(gauge_n))
  user, sys_ = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
  return {"run": pages.run_record(by or " ".join(command)), "measured": " ".join(command),
          "commit": commit,
          "status": r.returncode, "cpu_s": round(user + sys_, 1),
          "user_s": round(user, 1), "sys_s": round(sys_, 1), "wall_s": round(wall, 1),
          **outcome(r.stdout + r.stderr), "slowest": slowest(r.stdout + r.stderr),
          "costliest": costliest,
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
      f"{ld['after']:.2f} after (the suite itself loads 2 cores)."
      + (f" How it ran: {rec['note']}." if rec.get("note") else ""), "",
      "CPU seconds are those of every process the command starts (RUSAGE_CHILDREN, "
      "what `/usr/bin/time` reports), so they hold when the cores are shared; the wall "
      "time does not. What the suite covers, what `make test-all` adds and how it is "
      "kept cheap: [docs/testing.md](../../docs/testing.md). Rewritten from "
      "[results.json](results.json) (the latest run) and [history.json](history.json) "
      "(every run) by `python -m scripts.suite_cost --page_only`.", "",
      *costliest_section(rec), *slowest_section(rec)]
  return "\n".join(lines)


def costliest_section(rec: dict) -> list[str]:
  """The page's table of the run's costliest tests in CPU seconds (the per-test log of
  tests/conftest.py), where the record has them: where a trim would start."""
  xs = rec.get("costliest") or []
  tests = [x for x in xs if not x["test"].startswith("<all ")]
  if not tests:
    return []
  total = [x for x in xs if x["test"].startswith("<all ")]
  top = sum(x["cpu_s"] for x in tests)
  whole = total[0]["cpu_s"] if total else None
  return ["## The costliest tests", "",
          f"The {len(tests)} tests of most CPU seconds in this run ({top:.0f} s together"
          + (f", of {whole:.0f} s inside the tests; the rest is the workers' start-up, "
             "collection and `make`" if whole else "") +
          "): where a trim would start. Each is the user + system seconds of its "
          "worker process and of the processes it waited for, setup and teardown "
          "included, so a module fixture counts in the first test that uses it "
          "(`ATTNLAB_TEST_CPU_LOG`, tests/conftest.py).", "",
          *pages.table(["CPU seconds", "test"],
                       [[f"{x['cpu_s']:.1f}", f"`{x['test']}`"] for x in tests]), ""]


def slowest_section(rec: dict) -> list[str]:
  """The page's table of the run's slowest test phases (pytest --durations: wall
  seconds in one of the 2 workers, so about the CPU seconds of a compile-bound phase),
  where the record has them: where a trim would start."""
  xs = rec.get("slowest") or []
  if not xs:
    return []
  top = sum(x["s"] for x in xs)
  return ["## The slowest test phases", "",
          f"The {len(xs)} slowest phases of this run (pytest `--durations`, as the "
          f"Makefile asks; {top:.0f} s together, about {top / max(rec['cpu_s'], 1):.0%} "
          "of the CPU seconds above): where a trim would start. Each is the wall time of "
          "one phase in one worker; most of it is XLA compiling.", "",
          *pages.table(["seconds", "phase", "test"],
                       [[f"{x['s']:.1f}", x["when"], f"`{x['test']}`"] for x in xs]), ""]


def gauge(rec: dict) -> float:
  """A record's gauge: the mean of its before and after readings, in GFLOP/s."""
  g = rec["gauge_gflop_s"]
  return (g["before"] + g["after"]) / 2


def same_code_exponents(history: list[dict]) -> list[dict]:
  """For each commit measured at two gauges or more (the same code, so only the host's
  speed moved), the exponent b of cpu_s ∝ gauge^-b between its slowest and fastest
  readings: b = ln(cpu_slow / cpu_fast) / ln(gauge_fast / gauge_slow). b = 1: CPU
  seconds inversely proportional to the gauge. Pairs whose gauges differ by under 10%
  are left out (the noise of one reading would decide b)."""
  out = []
  for c in sorted({r["commit"] for r in history if r.get("status") == 0}):
    rs = sorted((r for r in history if r["commit"] == c and r.get("status") == 0), key=gauge)
    if len(rs) < 2 or gauge(rs[-1]) < 1.1 * gauge(rs[0]):
      continue
    slow, fast = rs[0], rs[-1]
    b = math.log(slow["cpu_s"] / fast["cpu_s"]) / math.log(gauge(fast) / gauge(slow))
    out.append({"commit": c, "gauges": [round(gauge(slow)), round(gauge(fast))],
                "cpu_s": [slow["cpu_s"], fast["cpu_s"]], "exponent": round(b, 2)})
  return out


def scaled(rec: dict, ref: float = REFERENCE_GAUGE) -> float:
  """rec's CPU seconds at the reference gauge if they were inversely proportional to
  the gauge (an estimate: `same_code_exponents` shows how near 1 the exponent is)."""
  return rec["cpu_s"] * gauge(rec) / ref


def history_section(history: list[dict]) -> list[str]:
  """The page's table of every measurement (oldest first) and what the same-code
  pairs say about scaling to the reference gauge."""
  rows = [[r["run"]["date"], f"`{r['commit']}`", f"{gauge(r):.0f}", f"{r['cpu_s']:.0f}",
           f"{r['wall_s']:.0f}", str(r.get("passed", "")) + (
               f" ({r['failed']} failed)" if r.get("failed") else ""), f"{scaled(r):.0f}"]
          for r in history]
  pairs = same_code_exponents(history)
  if pairs:
    said = "; ".join(
        f"`{p['commit']}` read {p['cpu_s'][0]:.0f} CPU-s at a gauge of {p['gauges'][0]} and "
        f"{p['cpu_s'][1]:.0f} at {p['gauges'][1]}: exponent {p['exponent']:.2f}"
        for p in pairs)
    bs = [p["exponent"] for p in pairs]
    how = ("the CPU seconds moved more than the gauge (b > 1), so the column's b = 1 "
           "overstates them at a faster gauge, if b stays above 1 there; the gauge is a "
           "rough proxy of the host's speed for this compile-bound suite"
           if min(bs) > 1 else
           "the CPU seconds moved less than the gauge (b < 1), so the column's b = 1 "
           "understates them at a faster gauge" if max(bs) < 1 else
           "the exponents straddle 1: the column is a rough estimate")
    why = (f"The same commit measured at different gauges (CPU seconds ∝ gauge^-b): "
           f"{said}; {how}.")
  else:
    why = ("No commit has yet been measured at two gauges 10% apart, so the scaled "
           "column's assumption (b = 1) is untested here.")
  return ["## Every measurement", "",
          *pages.table(["date", "commit", "gauge (GFLOP/s)", "CPU seconds", "wall seconds",
                        "passed", f"CPU seconds scaled to a gauge of {REFERENCE_GAUGE:.0f}"],
                       rows), "",
          f"The last column estimates the CPU seconds on the machine the budget was set "
          f"on (gauge {REFERENCE_GAUGE:.0f} GFLOP/s), as cpu_s × gauge / "
          f"{REFERENCE_GAUGE:.0f}: the CPU seconds of the same code move with the "
          f"host's speed. {why} The budget is held on the measured CPU seconds; the "
          "scaled figure says where a slow host, not the suite, put them.", ""]


def append(rec: dict, out: str = OUT) -> list[dict]:
  """Adds rec to out/history.json (every measurement; the same record twice is kept
  once) and returns the history, oldest first."""
  path = os.path.join(out, "history.json")
  hist = pages.read_json(path, [])
  key = lambda r: (r["commit"], r["run"]["date"], r["cpu_s"], r["wall_s"])
  if key(rec) not in {key(r) for r in hist}:
    hist.append(rec)
  os.makedirs(out, exist_ok=True)
  pages.write_json(path, hist)
  return hist


def write(rec: dict, out: str = OUT) -> None:
  """results.json (the latest record), history.json (every record, `append`) and
  README.md in `out`."""
  os.makedirs(out, exist_ok=True)
  hist = append(rec, out)
  pages.write_json(os.path.join(out, "results.json"), rec)
  pages.write_text(os.path.join(out, "README.md"),
                   page(rec) + "\n" + "\n".join(history_section(hist)))
