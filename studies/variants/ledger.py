"""A variants page's ledger and the rows a page keeps without their workdirs
(studies.variants.compare's sweep writes and reads them).

out/lr.json holds the lr sweep's runs, out/seeds.json the seeds' (each: variant, rate or
seed, quality, config fingerprint, CPU seconds, date, host; a protocol run adds its
validation figure, and a reporting seed's its whole row). A workdir lives on the machine
that trained it; the committed page (out/results.json) and the ledger are what a later
session, or another machine, has of the run: `published` keeps a finished row of the
page, `ledger_row` a protocol row whose run only the ledger holds.
"""
from __future__ import annotations

import json
import os

from studies.core import pages, protocol
from studies.core.sweep import fingerprints
from studies.variants.config import base_lr, make_config, with_lr
from studies.variants.measure import DECODE, METRIC, quality
from studies.variants.place import out_dir


def _record(out, name, res, key, value) -> None:
  """Adds one finished run to out/<name>.json (the lr sweep's, or the extra seeds'),
  keyed by variant, preset, config and `key` (lr or seed) = `value`."""
  entry = {"variant": res["variant"], "task": res["task"], "preset": res["preset"],
           key: value, "quality": quality(res), "config": res["config"],
           "cpu_seconds": res.get("cpu_seconds"), "date": res["date"],
           "host": res.get("eval", {}).get("host") or "host not recorded"}
  if res.get("protocol"):       # studies.core.protocol: the validation figure beside the test
    entry.update(validation=res.get("validation"), protocol=res["protocol"])
    if key == "seed":
      # the whole row (less its text sample): a page written on another machine, where
      # this run's workdir is not, shows it as trained (`ledger_row`)
      entry["row"] = {k: v for k, v in res.items() if k != "sample"}
  same = ("variant", key, "preset", "config")
  pages.update_json(os.path.join(out, name), lambda done: sorted(
      [r for r in done if any(r.get(k) != entry[k] for k in same)] + [entry],
      key=lambda r: (r["variant"], r[key])), [])


def record_lr(out, res, lr) -> None:
  """Adds one run of the lr sweep (a finished result, seed 0) to out/lr.json."""
  _record(out, "lr.json", res, "lr", lr)


def on_protocol(out) -> bool:
  """Whether the page in `out` follows studies.core.protocol (its protocol.json:
  `--protocol` marked it): rates chosen on validation, rows and seeds from the reporting seeds."""
  return protocol.follows(protocol.page_version(out))


def reporting(task, preset) -> tuple:
  """The reporting seeds of this task's preset page (studies.core.protocol.REPORTING)."""
  return protocol.reporting_seeds(os.path.basename(out_dir(task, preset)))




def recorded_seeds(task, preset, n, out, overrides=None) -> dict:
  """{seed: its entry} of variant n's protocol runs in out/seeds.json under the config
  it would train now at that seed (`overrides` with its rate): the reporting runs a
  page holds, trained on this machine or another, which a resumed study keeps."""
  got = {}
  for e in pages.read_json(os.path.join(out, "seeds.json"), []):
    if (e["variant"], e["task"], e["preset"]) != (n, task, preset) or \
        not protocol.follows(e.get("protocol")):
      continue
    if e["config"] in fingerprints(make_config(task, preset, n,
                                               {**(overrides or {}), "seed": e["seed"]})):
      got[e["seed"]] = e
  return got


def record_seed(out, res, seed) -> None:
  """Adds one extra-seed run (a finished result) to out/seeds.json."""
  _record(out, "seeds.json", res, "seed", seed)


def published(task, preset, out, overrides=None, lrs=None) -> dict:
  """{variant: row} of the finished rows in out/results.json (the committed page) that
  this preset would train again: the same preset, and the same config fingerprint
  where the row records one (rows written before fingerprints existed were trained
  under the preset the page states). A workdir lives on the machine that trained it;
  the page is what a later session or another machine has of that run, so a variant
  finished there is kept from the page, not trained again (nor lost from it). `lrs`
  ({variant: rate}, chosen_lrs): a row counts at its variant's chosen rate."""
  p = os.path.join(out, "results.json")
  if not os.path.exists(p):
    return {}
  keep, base = {}, base_lr(task, preset, overrides)
  for r in json.load(open(p)):
    if r.get("status") != "ok" or r.get("preset") != preset or r.get("task") != task:
      continue
    if on_protocol(out) and not protocol.follows(r.get("protocol")):
      continue                  # a row from before the protocol is not this page's
    ov = with_lr(overrides, (lrs or {}).get(r["variant"]), base)
    if on_protocol(out):
      ov = {**(ov or {}), "seed": reporting(task, preset)[0]}      # its row's run
    want = fingerprints(make_config(task, preset, r["variant"], ov))
    if r.get("config", min(want)) in want:
      keep[r["variant"]] = r
  return keep


# The fields of a row that the rate and the seed do not change (the same model, batch
# and steps: a step's cost, the parameters, the decode state and its speed)
COST_FIELDS = ("run", "train_seconds", "steps_per_s", "params", "decode_mode",
               "peak_bytes", "memory_kind", "jax", "device")


def ledger_row(task, preset, variant, out, overrides=None, rate=None) -> dict | None:
  """A protocol page's row whose run (the first reporting seed at the variant's chosen
  `rate`) is in out/seeds.json but whose workdir is not on this machine, nor its row on
  the committed page (a re-run that several sessions, on several machines, carried out).

  The entry's whole row where the ledger kept it (`_record` does, since 2026-12-07).
  Else it is built: the quality, validation figure, config and date from the entry; the
  cost columns (`COST_FIELDS`, with the eval's decode speed) from the variant's row on
  the page from before the protocol, the same model, batch and steps at another rate,
  with that row's run (so its speeds compare within that run only); no training curve
  (the plot leaves the row out). The row says so ("ledger"). None where the ledger has
  no such run, or there is nothing to take the costs from."""
  base = base_lr(task, preset, overrides)
  s = reporting(task, preset)[0]
  e = recorded_seeds(task, preset, variant, out, with_lr(overrides, rate, base)).get(s)
  if e is None:
    return None
  if e.get("row"):
    return dict(e["row"], ledger={"seed": s, "trained": e["date"], "host": e["host"]})
  old = next((r for r in pages.read_json(os.path.join(out, "results.json"), [])
              if (r.get("variant"), r.get("task"), r.get("preset"), r.get("status"))
              == (variant, task, preset, "ok") and not protocol.follows(r.get("protocol"))),
             None)
  if old is None:
    return None
  dk = DECODE[task][0]
  ev = {k: v for k, v in old["eval"].items() if k in (dk, "decode_mode", "device",
                                                       "backend", "host")}
  ev[METRIC[task][0]] = e["quality"]
  row = {k: old[k] for k in COST_FIELDS if k in old}
  row.update(variant=variant, task=task, preset=preset, status="ok", config=e["config"],
             date=e["date"], eval=ev, validation=e["validation"], protocol=e["protocol"],
             cpu_seconds=e.get("cpu_seconds"), curve=[],
             ledger={"seed": s, "trained": e["date"], "host": e["host"],
                     "cost_from": {"date": old["date"], "config": old["config"]}})
  return row


def ledger_lines(results) -> list[str]:
  """The line under the table of a page whose rows include some kept from its ledger
  (`compare_variants.ledger_row`, marked "(ledger)"): what they are and where their
  figures come from. [] where the page has none."""
  led = [r for r in results if r.get("ledger")]
  if not led:
    return []
  built = [r for r in led if r["ledger"].get("cost_from")]
  said = (f"\"(ledger)\": the row's run (reporting seed {led[0]['ledger']['seed']}) trained "
          "on another machine, whose workdir is not here; the row is its entry in "
          "seeds.json")
  if built:
    said += ("; for " + ", ".join(f"`{r['variant']}`" for r in built) + " that entry holds "
             "the quality, validation figure and config only, so the speed, memory, "
             "parameter and decode cells are the variant's row from before the protocol "
             "(trained " + ", ".join(sorted({r['ledger']['cost_from']['date'] for r in built}))
             + "): the same model, batch and steps at another rate, which changes no "
             "step's cost; its run letter says which run timed it, and the plot has no "
             "curve for it")
  return ["", said + "."]
