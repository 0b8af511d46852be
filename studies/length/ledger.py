"""The length study's committed ledger: results/lm_length/<preset>_runs.json, the shape
and the writers of the MQAR study's (studies.recall.ledger: {"runs", "processes",
"invocations"}, every write under pages.update_json's lock, `totals`, `LedgerClock`),
keyed here by this study's run: (row, length, lr, seed) and the config fingerprint.

A run entry is the run's result.json as its child process wrote it (row, length, lr,
seed, preset, validation, test, cost, config, cpu_seconds, date, protocol) plus host
and process, added the moment the run finishes: a fresh clone resumes from it (a run in
the ledger is never trained again) and the page is written from it alone.
"""
from __future__ import annotations

import os

import json
import time

from studies.core import pages, sweep
# the MQAR ledger's readers, whose shape this ledger keeps (its writers sort by the MQAR
# run's keys: this ledger's own below sort by RUN_KEYS)
from studies.recall import ledger as recall_ledger
from studies.recall.ledger import counted, host, process_id, read, totals  # noqa: F401

NAME = "{preset}_runs.json"
RUN_KEYS = ("row", "length", "lr", "seed")


def path_of(preset: str, out: str) -> str:
  """out/<preset>_runs.json, absolute (a child process writes where its parent reads)."""
  return os.path.abspath(os.path.join(out, NAME.format(preset=preset)))


def key(e: dict) -> tuple:
  """A run entry's identity: its run (RUN_KEYS) and its config fingerprint."""
  return tuple(e[k] for k in RUN_KEYS) + (e.get("config"),)


def record_run(path: str, res: dict, process: str | None, where: str | None = None):
  """Adds one finished run (its result.json `res`) to the ledger, replacing an entry of
  the same run and fingerprint."""
  entry = dict(res, host=where or "host not recorded", process=process)
  _update(path, lambda d: _put(d["runs"], entry, lambda e: key(e) == key(entry)))


def _put(entries: list, entry: dict, same) -> None:
  entries[:] = [e for e in entries if not same(e)] + [entry]


def _update(path: str, change) -> dict:
  """`change` of the ledger at `path` under its lock, its runs sorted by `key`
  (studies.recall.ledger's update, with this study's key)."""
  return recall_ledger._update(path, change, lambda e: tuple(str(x) for x in key(e)))


def record_process(path: str, root: str, process: str, name: str, cpu: float,
                   where: str | None = None) -> None:
  """A child process's whole CPU seconds: to the ledger, and to root/cpu_ledger.jsonl
  (studies.recall.ledger.record_process's entries)."""
  entry = {"id": process, "variant": name, "cpu_seconds": float(cpu),
           "date": pages.today(), "host": where or "host not recorded"}
  _update(path, lambda d: _put(d["processes"], entry, lambda e: e["id"] == process))
  os.makedirs(root, exist_ok=True)
  with open(os.path.join(root, sweep.CPU_LEDGER), "a") as f:
    f.write(json.dumps({"variant": name, "cpu_seconds": float(cpu),
                        "date": pages.today(), "id": process}) + "\n")


class LedgerClock(sweep.WallClock):
  """sweep.WallClock that also keeps each invocation's wall seconds in the ledger (its
  largest figure), as studies.recall.ledger.LedgerClock does."""

  def __init__(self, root: str, jobs: int, path: str, every: float = 60.0):
    self.ledger = path
    super().__init__(root, jobs, every)

  def write(self):
    super().write()
    wall, inv = time.time() - self.t0, self.id

    def change(d):
      old = [e["wall_seconds"] for e in d["invocations"] if e["id"] == inv]
      _put(d["invocations"], {"id": inv, "wall_seconds": max([wall] + old),
                              "jobs": self.jobs, "date": pages.today()},
           lambda e: e["id"] == inv)
    _update(self.ledger, change)


def runs_of(path: str, preset: str) -> dict:
  """{(row, length, lr, seed): entry} of the ledger's runs of `preset` whose config
  fingerprint is the one the preset trains now (a run of another budget is not this
  preset's)."""
  from studies.length import presets
  p = presets.preset(preset)
  out = {}
  for e in read(path)["runs"]:
    if e.get("preset") != preset or e.get("status") != "ok":
      continue
    if e.get("config") == _fingerprint(p, e["row"], int(e["length"]), float(e["lr"]),
                                       int(e["seed"])):
      out[(e["row"], int(e["length"]), float(e["lr"]), int(e["seed"]))] = e
  return out


def _fingerprint(p, row: str, length: int, lr: float, seed: int) -> str:
  """presets.fingerprint of a run's config (cached: a ledger is read at every step of
  the runner)."""
  key = (p, row, length, lr, seed)
  if key not in _FP:
    from studies.length import presets
    _FP[key] = presets.fingerprint(presets.make_config(p, row, length, lr, seed), p)
  return _FP[key]


_FP: dict = {}
