"""The zoology presets of studies.recall.mqar (issue 78): zoology_cpu's plan (every cell,
a rate per (variant, width) chosen on the selection seed, fresh reporting seeds), its
projected cost from the committed costs.json within the budget, resumability (a
finished run is never planned again, in a fresh clone too: the committed ledger),
the old presets unchanged, and the page
(studies.recall.zoology_page) from a synthetic fixture: no training."""
import json
import os

import pytest

from studies.core import protocol, sweep
from studies.recall import (mqar, costs as mqar_costs, ledger as mqar_ledger,
                            zoology_page as zp)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P = mqar.PRESETS["zoology_cpu"]
ALL = ("lr", "grid", "seeds")


def _lr_done(p, variant, best=1e-3):
  """Finished lr-stage records of `variant` at every lr cell: `best` wins."""
  return [dict(variant=variant, width=w, length=t, pairs=pp, lr=x, seed=0, stage="lr",
               status="ok", accuracy=1.0 if x == best else 0.5)
          for w, t, pp in mqar.lr_cells(p) for x in p["lrs"]]


def test_the_zoology_cpu_plan_tunes_per_width_and_reports_fresh_seeds():
  trained = mqar_costs.trained("zoology_cpu")
  assert "softmax" in trained and "linear" in trained and len(trained) >= 4
  assert {w for w, *_ in mqar.lr_cells(P)} == set(P["widths"])       # a rate per width
  assert len({tuple(x[:2]) for x in P["panels"]}) >= 2 and len(P["widths"]) >= 2
  plan = mqar.variant_plan(P, "linear", [], ALL)
  assert {(r.width, r.length, r.pairs) for r, _ in plan} == set(mqar.lr_cells(P))
  assert {s for _, s in plan} == {"lr"} and {r.seed for r, _ in plan} == {0}
  done = _lr_done(P, "linear")
  done[0]["accuracy"] = 1.0        # width 64's smallest rate ties 1e-3: the smaller wins
  lrs = mqar.choose_lr(P, done, "linear")
  assert lrs[64] == min(P["lrs"]) and all(lrs[w] == 1e-3 for w in P["widths"][1:])
  plan = mqar.variant_plan(P, "linear", done, ALL)
  grid = [r for r, s in plan if s == "grid"]
  assert {(r.width, r.length, r.pairs) for r in grid} == {
      (w, x[0], x[1]) for x in P["panels"] for w in P["widths"]}       # every cell
  assert all(r.lr == lrs[r.width] for r, s in plan if s != "lr")     # its width's rate
  reported = {r.seed for r, s in plan if s != "lr"}
  assert reported == set(protocol.reporting_seeds("variants_mqar"))
  assert not reported & set(protocol.SELECTION_SEEDS)
  assert len(plan) == len({r for r, _ in plan})
  c = mqar.make_config("zoology_cpu", grid[0])
  assert c.model.gated_layer == "published" and c.mqar.vocab_size == P["vocab"]
  assert c.batch_size == mqar.panel_batch(P, grid[0].length, grid[0].pairs)
  # the long panel's amended setup (2026-11-29): its training mixture, every run's
  # constant rate; the short panel trains on its own sequences
  long_ = max(P["panels"])
  lc = mqar.make_config("zoology_cpu", mqar.Run("softmax", 64, long_[0], long_[1], 3e-3))
  assert lc.mqar.train_mix == "64:4,128:8,256:16" and lc.schedule == "constant"
  assert lc.batch_size == 8
  short = min(P["panels"])
  sc_ = mqar.make_config("zoology_cpu", mqar.Run("softmax", 64, short[0], short[1], 3e-3))
  assert sc_.mqar.train_mix == "" and sc_.schedule == "constant" and sc_.batch_size == 32
  # the short preset: one rate per variant; its protocol re-run trains the papers'
  # layers (amended 2026-11-29); a preset that names none keeps the bare operators
  old = mqar.PRESETS["cpu"]
  assert mqar.lr_cells(old) == [tuple(old["lr_cell"])]
  assert mqar.make_config("cpu", mqar.Run("gla", 32, 64, 8, 1e-3)).model.gated_layer == \
      "published"
  assert "gated_layer" not in mqar.PRESETS["smoke"]
  assert mqar.make_config("smoke", mqar.Run("gla", 16, 16, 2, 1e-2)).model.gated_layer == \
      "bare"


def test_the_fixed_grid_fits_its_budget_by_the_committed_costs():
  costs = json.load(open(os.path.join(ROOT, mqar_costs.OUT)))
  assert costs["preset"] == "zoology_cpu" and costs["matmul_peak"]["flop_per_s"] > 0
  plan = mqar_costs.project(P, costs["probes"], mqar_costs.trained("zoology_cpu"),
                            costs["startup_cpu_seconds"])
  assert plan["cpu_minutes"] <= mqar_costs.BUDGET_CPU_MINUTES and plan["fits"]
  assert plan == costs["plan"]          # the grid is the one the probe priced


def test_a_finished_run_is_not_planned_again(tmp_path):
  root = str(tmp_path)
  run = mqar.Run("linear", 64, *mqar.lr_cells(P)[0][1:], P["lrs"][0])
  todo = mqar._unfinished("zoology_cpu", "linear", root, ALL, None, ledger=None)
  assert (run, "lr") in todo
  config = mqar.make_config("zoology_cpu", run)
  wd = os.path.join(root, run.name)
  os.makedirs(wd)
  sweep.write_result(dict(run.__dict__, stage="lr", status="ok", accuracy=0.5,
                          config=sweep.config_fingerprint(config)), wd)
  left = mqar._unfinished("zoology_cpu", "linear", root, ALL, None, ledger=None)
  assert (run, "lr") not in left and len(left) == len(todo) - 1


def _entry(run, config, **kw):
  return dict(run.__dict__, stage="lr", status="ok", accuracy=0.5, test_accuracy=0.4,
              cpu_seconds=10.0, config=config, date="2026-12-01", **kw)


def test_a_run_in_the_ledger_is_not_planned_again_without_its_workdir(tmp_path):
  """A fresh clone: no workdir, the committed ledger alone. An entry of the run's
  config fingerprint is finished (never planned, nor trained); one of another
  fingerprint (the settings changed since) is not."""
  root, ledger = str(tmp_path / "root"), str(tmp_path / "zoology_cpu_runs.json")
  assert mqar_ledger.path_of("zoology_cpu") == os.path.abspath(
      "results/variants_mqar/zoology_cpu_runs.json")
  assert mqar_ledger.path_of("cpu") == os.path.abspath("results/variants_mqar/cpu_runs.json")
  assert mqar_ledger.path_of("smoke") is None
  run = mqar.Run("linear", 64, *mqar.lr_cells(P)[0][1:], P["lrs"][0])
  todo = mqar._unfinished("zoology_cpu", "linear", root, ALL, None, ledger=ledger)
  assert (run, "lr") in todo
  mqar_ledger.record_run(ledger, _entry(run, "another-fingerprint"), "p1", "here")
  assert mqar._unfinished("zoology_cpu", "linear", root, ALL, None, ledger=ledger) == todo
  fp = sweep.config_fingerprint(mqar.make_config("zoology_cpu", run))
  mqar_ledger.record_run(ledger, _entry(run, fp), "p1", "here")
  left = mqar._unfinished("zoology_cpu", "linear", root, ALL, None, ledger=ledger)
  assert (run, "lr") not in left and len(left) == len(todo) - 1
  assert not os.path.exists(root)
  got = mqar.collect("zoology_cpu", root, ledger=ledger)
  assert got == [_entry(run, fp)]                 # as its result.json: no host, process
  assert len(mqar_ledger.read(ledger)["runs"]) == 2    # both fingerprints kept
  # the budget's total from the ledger: per process, its CPU or its runs' if more
  mqar_ledger.record_process(ledger, root, "p1", "linear", 25.0)
  mqar_ledger.record_run(ledger, _entry(mqar.Run("gla", 64, 512, 64, 1e-3), fp), None)
  t = mqar_ledger.totals(ledger)
  assert t["cpu_seconds"] == 25.0 + 10.0 and t["runs_cpu_seconds"] == 30.0


def test_concurrent_appends_keep_every_entry(tmp_path):
  """--jobs=2: two children append at once (pages.update_json's lock)."""
  import threading
  ledger = str(tmp_path / "runs.json")

  def append(variant):
    for s in range(15):
      mqar_ledger.record_run(ledger, _entry(mqar.Run(variant, 64, 64, 4, 1e-3, s), "f"),
                             variant)

  threads = [threading.Thread(target=append, args=(n,)) for n in ("softmax", "linear")]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  runs = mqar_ledger.read(ledger)["runs"]
  assert len(runs) == 30 and len({mqar_ledger.key(e) for e in runs}) == 30


def _fixture():
  """A finished zoology_cpu page's data: softmax solves all but one cell, linear
  falls behind at the long panel; 5 reporting seeds at the seeded cells."""
  p = json.loads(json.dumps(P))
  long_ = max(tuple(x[:2]) for x in p["panels"])
  seeded = {tuple(c[:3]) for c in p["seed_cells"]}
  rs = []
  for n in ("softmax", "linear"):
    for x in p["panels"]:
      for w in p["widths"]:
        acc = 1.0 if n == "softmax" or (x[0], x[1]) != long_ else 0.3 + w / 1000
        if n == "softmax" and w == p["widths"][0] and (x[0], x[1]) != long_:
          acc = 0.9                                  # the fault the page must flag
        seeds = p["seeds"] if (w, x[0], x[1]) in seeded else p["seeds"][:1]
        rs += [dict(variant=n, width=w, length=x[0], pairs=x[1], lr=1e-3, seed=s,
                    stage="grid", status="ok", accuracy=acc, cpu_seconds=1.0,
                    test_accuracy=min(1.0, acc + 0.001 * (s - 1) * (acc < 1)))
               for s in seeds]
  treat = {"softmax": "train", "linear": "train", "flash": ["same", "flash's"],
           "mla": ["left out", "not in this preset's grid"]}
  return {"preset": "zoology_cpu", "settings": p, "treatment": treat,
          "lrs": {n: {str(w): 1e-3 for w in p["widths"]} for n in ("softmax", "linear")},
          "results": rs, "protocol": protocol.record("variants_mqar"),
          "cpu_seconds": 600.0, "wall_seconds": 300.0, "invocations": 1, "jobs": 2,
          "config": {"vocab_size": p["vocab"], "power_a": 0.01, "batch_size": 32,
                     "steps": 1500, "warmup_steps": 50, "schedule": "cosine",
                     "weight_decay": 0.1, "num_layers": 2, "num_heads": 1,
                     "positions": "sinusoidal", "short_conv": 4,
                     "gated_layer": "published", "eval_sequences": 512,
                     "attention_options": {"local": {"window": 16}}}}


def test_the_page_flags_a_softmax_cell_under_99_and_states_the_trade_off(tmp_path):
  data = _fixture()
  lines = zp.page_lines(data, {"command": "python -m scripts.mqar (test)",
                               "date": "2026-12-01", "host": "test host",
                               "jax_version": "0", "preset": "zoology_cpu"}, None)
  text = "\n".join(lines)
  w0 = P["widths"][0]
  short = min(tuple(x[:2]) for x in P["panels"])
  assert f"**setup fault to investigate**: softmax 90.0% at width {w0}, " \
         f"{short[0]} tokens, {short[1]} pairs" in text
  assert "90.0% (setup fault?)" in text                    # kept in the table
  reading = text.split("## Reading")[1].split("\n## ")[0]
  assert "softmax is under 99% in 1 of its 4 cells" in reading
  assert "(the seeded cell), against softmax by Welch + Holm: worse `linear`." in reading
  assert f"At {short[0]} tokens, {short[1]} pairs, 99% within widths" in reading
  assert text.index("## Reading") < text.index("## The grid, and why")
  # the smallest width reaching 99% and its state: softmax's KV cache, linear's state
  t, pp = short
  kv = zp.state_bytes("softmax", P["widths"][1], t)
  assert f"{P['widths'][1]} ({kv / 1024:,.1f} KiB)" in text
  table = text.split("## The smallest width")[1].split("##")[0]
  assert "not reached" in table.split("| `linear` |")[1].split("\n")[0]
  # the seeded cells: linear worse than softmax, by Welch + Holm
  row = text.split("## Against softmax")[1].split("| `linear` |")[1].split("\n")[0]
  assert "worse (Δ" in row and "p_adj" in row
  assert "Left out of this grid: `mla`" in text and "`flash` same" in text
  assert "every child process, start-up included" in text and "committed ledger" not in text
  book = dict(data, ledger="results/variants_mqar/zoology_cpu_runs.json",
              cpu_counted=mqar_ledger.counted(), runs_cpu_seconds=540.0)
  text = "\n".join(zp.page_lines(book, {"command": "c", "date": "d", "preset": "p"}, None))
  assert "CPU time spent: 10.0 CPU-minutes (from the committed ledger: each " in text
  assert "9.0 CPU-minutes of it in the runs themselves" in text
  assert "committed ledger `results/variants_mqar/zoology_cpu_runs.json`" in text


def test_state_bytes_grow_with_length_for_softmax_only():
  kv = zp.state_bytes("softmax", 64, 512)       # 2 layers x (K and V) x 512 x 64 x 4 B
  assert kv == pytest.approx(2 * 2 * 512 * 64 * 4, rel=1e-3)
  assert kv == pytest.approx(4 * zp.state_bytes("softmax", 64, 128), rel=1e-3)
  assert zp.state_bytes("linear", 64, 512) == zp.state_bytes("linear", 64, 128)
  assert zp.state_bytes("linear", 128, 64) > zp.state_bytes("linear", 64, 64)


@pytest.mark.parametrize("preset", ["zoology_gpu"])
def test_the_gpu_preset_is_zoologys_grid(preset):
  from studies.recall import presets as mp
  g = mqar.PRESETS[preset]
  assert g["widths"] == mp.ZOOLOGY_WIDTHS and g["vocab"] == 8192
  assert [tuple(x[:2]) for x in g["panels"]] == [x[:2] for x in mp.ZOOLOGY_PANELS]
  assert all(x[2] * x[3] == mp.ZOOLOGY_SEQUENCES for x in g["panels"])
  assert {w for w, *_ in mqar.lr_cells(g)} == set(g["widths"])


def test_the_script_writes_each_page_with_its_module():
  from scripts import mqar as script
  from studies.recall import page as mqar_page
  assert script.page_module(_fixture()) is zp
  assert script.page_module({"settings": mqar.PRESETS["cpu"]}) is mqar_page


def test_a_panel_at_another_batch_than_its_probe_costs_in_proportion():
  probe = [{"variant": "softmax", "width": 64, "length": 512, "pairs": 64, "batch": 4,
            "cpu_per_step": 0.2, "fixed_cpu_seconds": 10.0}]
  at = lambda batch: mqar_costs.run_cpu(
      probe, {"panels": ((512, 64, 100, batch),)}, "softmax", 64, 512, 64)
  assert at(4) == 10.0 + 100 * 0.2 and at(8) == 10.0 + 100 * 0.4


def test_the_page_carries_the_diagnostics_of_its_setup():
  diag = {"what": "a string, not a block", "mix": {"why": "does a mixture help?",
                                                   "reading": ["line one", "line two"]},
          "old": {"why": "an older question", "reading": "a sentence"}}
  text = "\n".join(zp.diagnostic_lines(diag, "zoology_cpu"))
  assert "## How the setup was diagnosed" in text
  assert "**`mix`**: does a mixture help? **Reading:** line one; line two" in text
  assert "**`old`**: an older question **Reading:** a sentence" in text
  assert "zoology_cpu_diagnostics.json" in text and "what" not in text.split("\n", 3)[3]
  assert zp.diagnostic_lines(None, "zoology_cpu") == []


def test_a_replanned_budget_names_its_earlier_plan():
  plan = lambda m, n: {"cpu_minutes": m, "runs": n, "budget_cpu_minutes": 720, "fits": True}
  costs = {"preset": "zoology_cpu", "date": "2026-11-28", "command": "probe",
           "plan": plan(620.0, 70), "planned": "2026-11-29",
           "earlier_plans": [{"planned": "2026-11-28", "plan": plan(664.5, 95)}]}
  line = zp.budget_lines({"preset": "zoology_cpu", "cpu_seconds": 60.0}, costs)[0]
  assert "620 CPU-minutes for 70 runs" in line
  assert "re-projected on 2026-11-29" in line and "before: 664 CPU-minutes for 95 runs" in line


def test_a_rate_every_rate_tied_on_is_named_on_the_page():
  data = _fixture()
  w0, cell = P["widths"][0], mqar.lr_cells(P)[0]
  data["results"] += [dict(variant="linear", width=cell[0], length=cell[1], pairs=cell[2],
                           lr=x, seed=0, stage="lr", status="ok", accuracy=0.008 + i * 0.001)
                      for i, x in enumerate(P["lrs"])]
  text = "\n".join(zp.rate_lines(data, ["softmax", "linear"]))
  assert f"**No rate preferred**: `linear` at width {w0}:" in text
  assert "`softmax`" not in text.split("No rate preferred")[1]
  data["results"][-1]["accuracy"] = 0.5                      # one rate stands out
  assert "No rate preferred" not in "\n".join(zp.rate_lines(data, ["softmax", "linear"]))


def test_a_grid_with_runs_missing_says_partway_here_and_on_the_decision_page(tmp_path):
  from studies.choose import sources as S
  data = _fixture()                   # grid runs only: every lr stage is missing
  text = "\n".join(zp.page_lines(data, {"command": "c", "date": "d", "preset": "p"}, None))
  assert "**Partway through its grid**: 2 of the 2 variants have runs still" in text
  src = next(s for s in S.SOURCES if s.page == "variants_mqar")
  (tmp_path / src.page).mkdir()
  (tmp_path / src.page / "results.json").write_text(json.dumps(data))
  words = S.protocol_status(src, str(tmp_path))[1]
  assert "2 variant(s) with runs still to finish (`softmax`, `linear`)" in words


def test_the_page_states_the_spend_against_the_budget():
  data = dict(_fixture(), cpu_seconds=600.0 * 60)
  costs = {"preset": "zoology_cpu", "date": "d", "command": "c",
           "plan": {"cpu_minutes": 620, "runs": 70, "budget_cpu_minutes": 720, "fits": True}}
  text = "\n".join(zp.budget_lines(data, costs))
  assert "**Budget: 600 of 720 CPU-minutes spent so far, within it, with runs still" in text
  data = dict(data, cpu_seconds=800.0 * 60)
  assert "spent so far, over it" in "\n".join(zp.budget_lines(data, costs))
