"""The committed ledger of an MQAR preset's finished runs (issue 78: a study resumable
across sessions, each of which starts from a fresh clone and loses workdirs/): for a
preset that asks for one (`ledger=True` in studies/recall/presets.py: zoology_cpu,
zoology_gpu), results/variants_mqar/<preset>_runs.json, one JSON object:

  runs         one entry per finished run: its result.json as written (the Run fields,
               stage, status, accuracy on validation, test_accuracy, cpu_seconds,
               config (the fingerprint), date, ...), plus "host" (the machine) and
               "process" (the id of the process that trained it), appended by that
               process the moment the run finishes; keyed by the Run and the config
               fingerprint (a run of another fingerprint is another entry, and is not
               taken as this config's)
  processes    one entry per child process that ran (id, variant, its whole CPU
               seconds, start-up and work lost to interruptions included, date, host)
  invocations  one entry per `study` call (id, its wall seconds so far, jobs, date),
               rewritten every minute while it runs (`LedgerClock`)

Every write goes through pages.update_json (an exclusive lock, a temporary file): the
children of --jobs=2 append at once and neither loses an entry. The CPU total (`totals`)
is, per process, the larger of its recorded CPU and the CPU of the runs it finished: a
process killed outright (no record) still counts its finished runs. `backfill` adds the
finished runs of a workdir root (those of code from before this ledger), their
processes' CPU from root/cpu_ledger.jsonl and the root's invocations.
"""
from __future__ import annotations

import json
import os
import time

from studies.core import pages, sweep

OUT = "results/variants_mqar"
NAME = "{preset}_runs.json"
RUN_KEYS = ("variant", "width", "length", "pairs", "lr", "seed")
LEDGER_ONLY = ("host", "process")       # what an entry adds to its result.json


def path_of(preset: str, ledger=True, out: str = OUT) -> str | None:
  """The ledger a study of `preset` keeps: ledger True: the preset's own
  (out/<preset>_runs.json) where it asks for one, else None; a path: that one; None or
  False: none. Absolute, so that a child process writes where its parent reads."""
  from studies.recall.presets import PRESETS
  if ledger is True:
    ledger = (os.path.join(out, NAME.format(preset=preset))
              if PRESETS[preset].get("ledger") else None)
  return os.path.abspath(ledger) if ledger else None


def read(path: str | None) -> dict:
  """The ledger at `path` ({"runs", "processes", "invocations"}; empty lists where
  there is none)."""
  d = (pages.read_json(path) if path else None) or {}
  return {k: list(d.get(k, [])) for k in ("runs", "processes", "invocations")}


def key(e: dict) -> tuple:
  """A run entry's identity: the Run and the config fingerprint."""
  return tuple(e[k] for k in RUN_KEYS) + (e.get("config"),)


def result_of(e: dict) -> dict:
  """The result.json of a ledger entry (the entry less `LEDGER_ONLY`)."""
  return {k: v for k, v in e.items() if k not in LEDGER_ONLY}


def _update(path: str, change, sort=None) -> dict:
  """`change` of the ledger at `path` under pages.update_json's lock, its runs sorted by
  `sort` (an entry -> its sort key; None: this ledger's own order). The length study's
  ledger (studies.length.ledger) shares it with its own key."""
  sort = sort or (lambda e: key(e)[:-1] + (str(e.get("config")),))

  def go(d):
    d = dict(d or {})
    for k in ("runs", "processes", "invocations"):
      d[k] = list(d.get(k, []))
    change(d)
    d["runs"].sort(key=sort)
    return d
  return pages.update_json(path, go, {})


def _put(entries: list, entry: dict, same) -> None:
  entries[:] = [e for e in entries if not same(e)] + [entry]


def host() -> str:
  """This machine in words, as run records name it ('AMD EPYC ..., 2 cores')."""
  from trainer.metrics import host_cpu
  return f"{host_cpu()}, {os.cpu_count()} cores"


def process_id() -> str:
  return f"{os.uname().nodename}-{os.getpid()}-{time.time_ns()}"


def record_run(path: str, res: dict, process: str | None, where: str | None = None):
  """Adds one finished run (its result.json `res`) to the ledger, replacing an entry of
  the same Run and fingerprint."""
  entry = dict(res, host=where or "host not recorded", process=process)
  _update(path, lambda d: _put(d["runs"], entry, lambda e: key(e) == key(entry)))


def record_process(path: str, root: str, process: str, variant: str, cpu: float,
                   where: str | None = None) -> None:
  """A process's whole CPU seconds: to the ledger, and (with its id, which `backfill`
  reads as already counted) to root/cpu_ledger.jsonl, whose page is the root's."""
  entry = {"id": process, "variant": variant, "cpu_seconds": float(cpu),
           "date": pages.today(), "host": where or "host not recorded"}
  _update(path, lambda d: _put(d["processes"], entry, lambda e: e["id"] == process))
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, sweep.CPU_LEDGER), "a") as f:
    f.write(json.dumps({"variant": variant, "cpu_seconds": float(cpu),
                        "date": pages.today(), "id": process}) + "\n")


def record_invocation(path: str, invocation: str, wall: float, jobs: int) -> None:
  """An invocation's wall seconds so far (its largest figure is kept)."""
  def change(d):
    old = [e for e in d["invocations"] if e["id"] == invocation]
    w = max([float(wall)] + [e["wall_seconds"] for e in old])
    _put(d["invocations"], {"id": invocation, "wall_seconds": w, "jobs": int(jobs),
                            "date": pages.today()}, lambda e: e["id"] == invocation)
  _update(path, change)


class LedgerClock(sweep.WallClock):
  """sweep.WallClock (root/wall_ledger.jsonl) that also writes each line's figure to
  the ledger under the same invocation id."""

  def __init__(self, root: str, jobs: int, path: str, every: float = 60.0):
    self.ledger = path
    super().__init__(root, jobs, every)

  def write(self):
    super().write()
    record_invocation(self.ledger, self.id, time.time() - self.t0, self.jobs)


def totals(path: str | None) -> dict:
  """What the ledger adds up to, as sweep.ledger_totals' keys: cpu_seconds (per
  process, the larger of its recorded CPU and its finished runs' CPU), runs_cpu_seconds
  (the runs' alone), wall_seconds (every invocation's), invocations, jobs (the most at
  once)."""
  d = read(path)
  by = {}
  for e in d["runs"]:
    by[e.get("process")] = by.get(e.get("process"), 0.0) + float(e.get("cpu_seconds", 0))
  cpu = {p["id"]: float(p["cpu_seconds"]) for p in d["processes"]}
  return {"cpu_seconds": sum(max(cpu.get(p, 0.0), by.get(p, 0.0))
                             for p in set(by) | set(cpu)),
          "runs_cpu_seconds": sum(by.values()),
          "wall_seconds": sum(e["wall_seconds"] for e in d["invocations"]),
          "invocations": len(d["invocations"]),
          "jobs": max([e["jobs"] for e in d["invocations"]] or [1])}


def counted() -> str:
  """What `totals`' CPU figure counts, in words for the page."""
  return ("from the committed ledger: each finished run's CPU (user + system), and "
          "each child process's whole CPU time (start-up, and work lost to an "
          "interruption, included) where the process recorded it; a process killed "
          "outright counts its finished runs only")


def backfill(root: str, path: str, results: list[dict], name_of) -> int:
  """Adds to the ledger the finished runs `results` (studies.recall.mqar.collect's of
  `root`, result.json files only: a run in progress has none; name_of(result): its workdir
  under root) it lacks, attributed to the
  processes of root/cpu_ledger.jsonl that carry no id (code from before the ledger;
  their CPU is recorded as one process, "jsonl:<root>:<its first invocation>"), and the
  invocations of
  root/wall_ledger.jsonl. Returns how many runs it added."""
  def lines(name):
    p = os.path.join(root, name)
    out = []
    for l in open(p) if os.path.exists(p) else []:
      try:
        out.append(json.loads(l))
      except ValueError:          # a line cut by a kill
        pass
    return out

  wall_lines = lines(sweep.WALL_LEDGER)
  # this root's: its path and its first invocation (a root of that name in another
  # session, a fresh clone, is another)
  tag = f"jsonl:{os.path.relpath(root)}:" + str(
      wall_lines[0].get("invocation", "") if wall_lines else "")
  old_cpu = sum(l["cpu_seconds"] for l in lines(sweep.CPU_LEDGER) if "id" not in l)
  walls = {}
  for i, w in enumerate(wall_lines):
    k = w.get("invocation", f"{tag}:{i}")
    walls[k] = (max(walls.get(k, (0.0,))[0], w["wall_seconds"]), w.get("jobs", 1),
                w.get("date", ""))
  added = []

  def change(d):
    have = {key(e) for e in d["runs"]}
    for r in results:
      if key(r) not in have:
        rt = pages.read_json(os.path.join(root, name_of(r), "runtime.json")) or {}
        d["runs"].append(dict(r, host=rt.get("host", "host not recorded"), process=tag))
        added.append(r)
    if old_cpu:
      _put(d["processes"], {"id": tag, "variant": "(before the ledger)",
                            "cpu_seconds": float(old_cpu), "date": pages.today(),
                            "host": "host not recorded"}, lambda e: e["id"] == tag)
    for k, (w, jobs, date) in walls.items():
      old = [e["wall_seconds"] for e in d["invocations"] if e["id"] == k]
      _put(d["invocations"], {"id": k, "wall_seconds": max([w] + old), "jobs": jobs,
                              "date": date}, lambda e: e["id"] == k)
  _update(path, change)
  return len(added)
