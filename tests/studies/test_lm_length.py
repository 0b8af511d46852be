"""The length study (studies/length/, issue 101): the plan's arithmetic, the recall split,
the page from fixture JSON, the runner's resumption from its ledger, the decision page's
loader. Cheap: synthetic step costs and ledgers, no training but the one slow run."""
import json
import math
import os

import numpy as np
import pytest

from studies.length import evaluate, ledger, page, plan, presets, results, runner

CPU = presets.preset("cpu")


def _costs(step=1.0, build=10.0, lengths=(256, 1024, 4096), rows=("flash",)):
  return {"cells": [{"row": r, "length": L, "cpu_s_per_step": step * L / 1024,
                     "compile_cpu_s": build} for r in rows for L in lengths]}


def test_plan_arithmetic():
  sc = _costs()
  # a run at 1,024: 368 steps x 1 s + 3 builds x 10 s + 2 x 16 eval batches x 1/3 s
  assert plan.run_cpu_s(CPU, sc, "flash", 1024) == pytest.approx(368 + 30 + 32 / 3)
  # unmeasured rows cost as the costliest measured row at that length
  assert plan.step_cpu(sc, "linear", 4096) == (4.0, 10.0, False)
  n = plan.row_runs(CPU, "flash", [256, 1024, 4096])
  assert n == {256: 3, 1024: 3 + 4 + 1, 4096: 3 + 3}        # seeds, sweep, check
  assert plan.row_runs(CPU, "linear", [1024, 4096]) == {1024: 8, 4096: 3}
  got = plan.plan(CPU, sc, [1024, 4096])
  want_flash = (8 * plan.run_cpu_s(CPU, sc, "flash", 1024)
                + 6 * plan.run_cpu_s(CPU, sc, "flash", 4096)) / 60
  assert sum(c["cpu_min"] for c in got["rows"]["flash"].values()) == pytest.approx(want_flash)
  assert got["tokens_per_run"] == 368 * 8192 >= plan.MIN_TOKENS
  assert plan.steps_for(8192) == 368
  # over the budget at every length: 256 is dropped before any row; under it: nothing
  assert plan.fix(CPU, _costs(step=3.0))["dropped"] == [256]
  assert plan.fix(CPU, _costs(step=0.1))["dropped"] == []


def test_recall_split_hand_example():
  y = np.array([[1, 2, 3, 1, 2, 3, 9, 0]])       # n=2: t=5 continues "1 2 -> 3"
  from data.recall import recall_mask
  m = recall_mask(y, 2)
  assert m.tolist() == [[False] * 5 + [True, False, False]]
  nll = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 0.5, 6.0, 9.0]])
  w = np.array([[1, 1, 1, 1, 1, 1, 1, 0]], np.float32)      # the last byte is padding
  s = evaluate.split_sums(nll, w, m)
  assert s["recall"] == [0.5, 1.0] and s["rest"] == [21.0, 6.0] and s["total"] == [21.5, 7.0]
  f = evaluate.from_sums(evaluate.add_sums(None, s))
  assert f["bits_per_byte"] == pytest.approx(21.5 / 7 / math.log(2))
  # recall and rest recombine to the total, weighted by their bytes
  r = f["recall_fraction"]
  assert r * f["recall_bits"] + (1 - r) * f["rest_bits"] == pytest.approx(f["bits_per_byte"])


def _val(row, lr):
  """A synthetic validation figure: best at 1e-3 (an interior rate), rows apart."""
  return 2.0 + 0.05 * ROWS.index(row) + 0.1 * math.log10(lr / 1e-3) ** 2


ROWS = list(CPU.rows)


def _entry(p, r, seed=None, **over):
  """A ledger entry of run `r` with synthetic figures."""
  s = r["seed"] if seed is None else seed
  v = _val(r["row"], r["lr"]) + 0.002 * s
  gap = 0.05 * ROWS.index(r["row"]) * (1 + r["length"] / 4096)
  t = 2.0 + gap + 0.003 * s
  c = presets.make_config(p, r["row"], r["length"], r["lr"], s)
  return {**dict(status="ok", preset=p.name, row=r["row"], length=r["length"], lr=r["lr"],
                seed=s, protocol=1, validation=v, config=presets.fingerprint(c, p),
                cpu_seconds=60.0, date="2026-12-07",
                test={"bits_per_byte": t, "recall_bits": 1.0 + 2 * gap,
                      "rest_bits": 3.0 + gap / 2, "recall_fraction": 0.4, "bytes": 131072},
                cost={"train_tokens_per_s": 9000.0 / (1 + ROWS.index(r["row"])),
                      "peak_bytes": 2 ** 27, "decode_us_per_token": 500.0,
                      "state_bytes": 2 ** 20 * (1 + ROWS.index(r["row"]))},
                # train bits/byte falling by 0.5 over the run: 0.125 over its last quarter
                curve=[[st, t + 0.5 * (1 - st / p.steps)]
                       for st in range(23, p.steps + 1, 23)]), **over}


def _fake_launcher(calls):
  def launch(p, batch, *, root, path, jobs, data_dir=None, log=print):
    calls.extend(batch)
    for r in batch:
      ledger.record_run(path, _entry(p, r), "fake", "test host")
  return launch


def test_runner_order_and_resume_from_ledger(tmp_path):
  calls = []
  kw = dict(rows=["flash", "gated_deltanet"], lengths=[1024, 4096], jobs=8,
            root=str(tmp_path / "wd"), out=str(tmp_path), launcher=_fake_launcher(calls))
  n = runner.study(CPU, **kw)
  # flash's sweep first (seed 0 at 1,024, the grid), before any other row's extension
  assert [(c["row"], c["seed"], c["length"]) for c in calls[:4]] == [("flash", 0, 1024)] * 4
  # what is due once flash has its rate and seeds at 1,024: every row's selection-length
  # runs (gated_deltanet's grid) before flash's seeds at 4,096, its rate checks last
  part = {}
  for lr, s in [(lr, 0) for lr in CPU.grid] + [(1e-3, s) for s in presets.SEEDS]:
    part[("flash", 1024, lr, s)] = _entry(CPU, dict(row="flash", length=1024, lr=lr, seed=s))
  order = [(w["row"], w["length"], w["seed"]) for w in runner.due(
      CPU, part, rows=["flash", "gated_deltanet"], lengths=[1024, 4096])]
  assert order == [("gated_deltanet", 1024, 0)] * 4 + [
      ("flash", 4096, s) for s in presets.SEEDS] + [("flash", 4096, 0)] * 3
  got = ledger.runs_of(ledger.path_of("cpu", str(tmp_path)), "cpu")
  st = runner.rate_state(CPU, got, "gated_deltanet")
  assert st["chosen"] == 1e-3 and st["tie_from"] == "flash's seeds"
  # each row: 4 rates, 3 seeds at 1,024 and 4,096, the check's 3 runs at 4,096
  assert n == len(calls) == 2 * (4 + 6 + 3) == len(got)
  calls.clear()
  assert runner.study(CPU, **kw) == 0 and calls == []      # nothing retrained
  # the ledger's other writers, beside runs keyed by this study's run
  path = ledger.path_of("cpu", str(tmp_path))
  ledger.record_process(path, str(tmp_path / "wd"), "p1", "flash", 12.0, "test host")
  ledger.LedgerClock(str(tmp_path / "wd"), 1, path, every=3600).stop()
  t = ledger.totals(path)
  assert t["invocations"] == 1 and t["cpu_seconds"] == pytest.approx(12.0 + 60.0 * n)
  # the ledger alone is the page's source: a fresh out/ with only the ledger
  d = page.collect(CPU, str(tmp_path))
  assert d["cells"]["gated_deltanet"]["4096"]["test"] is not None


def test_page_from_fixture(tmp_path):
  got = {}
  for r in ("flash", "gated_deltanet", "linear"):
    for lr in CPU.grid:
      e = _entry(CPU, dict(row=r, length=1024, lr=lr, seed=0))
      got[(r, 1024, lr, 0)] = e
    for L in (1024, 4096):
      for s in presets.SEEDS:
        got[(r, L, 1e-3, s)] = _entry(CPU, dict(row=r, length=L, lr=1e-3, seed=s))
  # local128: seeds in the ledger but an incomplete sweep (2 of 4 rates): not reported
  for lr in CPU.grid[:2]:
    got[("local128", 1024, lr, 0)] = _entry(CPU, dict(row="local128", length=1024, lr=lr,
                                                      seed=0))
  for s in presets.SEEDS:
    got[("local128", 1024, 1e-3, s)] = _entry(CPU, dict(row="local128", length=1024,
                                                        lr=1e-3, seed=s))
  # gpt_oss: its sweep and its seeds at 1,024, none at 4,096 yet
  for lr in CPU.grid:
    got[("gpt_oss", 1024, lr, 0)] = _entry(CPU, dict(row="gpt_oss", length=1024, lr=lr,
                                                     seed=0))
  for s in presets.SEEDS:
    got[("gpt_oss", 1024, 1e-3, s)] = _entry(CPU, dict(row="gpt_oss", length=1024,
                                                       lr=1e-3, seed=s))
  sc = _costs(step=3.0)
  g = {"flop_per_s": 2.4e10, "n": 1024}
  for c in sc["cells"]:
    c.update(batch=CPU.batch(c["length"]), spread=[2.9, 3.1], wall_s_per_step=9.0)
  sc.update(gauge={"before": g, "after": g}, rounds=3, steps_per_round=2, threads="one core",
            run={"command": "python -m scripts.lm_length --measure_steps",
                 "date": "2026-12-07", "host": "AMD EPYC, 2 cores"})
  d = json.loads(json.dumps(results.build(CPU, got, sc, plan.fix(CPU, sc),
                                          spend={"cpu_seconds": 600})))
  V = d["verdicts"]["by"]
  for r in ("gated_deltanet", "linear"):
    for L in ("1024", "4096"):
      v = V[r][L]
      assert v["lo"] < v["diff"] < v["hi"] and v["word"] == "worse"
  assert "local128" not in V and d["cells"]["local128"]["1024"]["seeds"] == {}
  assert d["verdicts"]["family"] == 5        # 2 rows x 2 lengths + gpt_oss at 1,024
  # the split: linear's gap at 4,096, its recall part and share
  s = d["split"]["linear"]["4096"]
  assert s["gap"] == pytest.approx(0.05 * 5 * 2)
  assert s["recall_share"] == pytest.approx(2 * s["gap"] * 0.4 / s["gap"])
  # the interleaved cost run's table: tokens/s from the median wall time, their range
  # from each round's CPU seconds
  cr = dict(sc, cells=[dict(c, tokens_per_step=CPU.tokens_per_step, cpu_s_rounds=[2.9, 3.0, 3.1],
                            decode_us_per_token=400.0, decode_spread=[390.0, 420.0])
                       for c in sc["cells"]], run=dict(sc["run"], command="--cost_run"))
  costed = "\n".join(page.cost_lines(dict(d, cost_run=cr)))
  assert "| `flash` | 1,024 | 910 | 2,643–2,825 | 3.00 | 2.90–3.10 | 400 | 390–420 |" in costed
  lines = page.render(d, page.plots(d, str(tmp_path)))
  text = "\n".join(lines)
  # the rate sweeps: every rate's validation, the chosen one in bold; an open sweep
  # names its next rate
  rate = {l.split(" | ")[0]: l for l in lines if l.startswith("| `")
          and "validation by rate" not in l and ": " in l.split(" | ")[1]}
  assert "## Rates chosen on validation at 1,024" in text
  # flash's rate, chosen under the provisional tie, re-read under its own seeds' tie
  rc = d["rates"]["flash"]["recheck"]
  assert rc["chosen"] == 1e-3 and rc["tie"] == d["rates"]["linear"]["tie"]
  assert "**0.001: " in rate["| `flash`"] and rate["| `flash`"].endswith(
      f"| chosen 0.001; 0.001 under flash's seeds' tie {rc['tie']:.4f}, the same |")
  assert "**" not in rate["| `local128`"] and "| next " in rate["| `local128`"]
  assert "not run yet (rate sweep incomplete: 2 of ≥ 4 rates): `python -m scripts." \
         "lm_length --preset=cpu --rows=local128`" in text
  edge = dict(d, rates=dict(d["rates"], local128=dict(d["rates"]["local128"], next=0.027,
                                                      grid=dict.fromkeys(CPU.grid, 3.0))))
  assert "(rate sweep incomplete: its best of 4 rates is at the grid's edge, 0.027 next)" \
      in page._cell_text(edge, "local128", "1024")
  assert "not run yet: `python -m scripts.lm_length --preset=cpu --rows=gpt_oss " \
         "--lengths=4096`" in text
  assert "outside the budget (plan.json): `python -m scripts.lm_length --preset=cpu " \
         "--rows=gla --lengths=1024`" in text
  # the plan: 256 dropped before any row, the measured step costs with their gauge
  assert "length 256 is dropped before any row (issue 101)" in text
  assert "| `flash` | 4,096 | 2 | 12.00 | 2.90–3.10 | 9.00 | 10 |" in text
  assert "`python -m scripts.lm_length --measure_steps` on 2026-12-07, AMD EPYC, 2 cores, " \
         "one core; gauge 24 GFLOP/s before, 24 after" in text
  # the reading, by its rules: a verdict, a growing gap, recall's share, the costs
  assert "`linear`: its gap from 1,024 to 4,096 bytes grows" in text
  assert "`linear` at 4,096: 80% of its gap is on the recall positions" in text
  assert "`linear` at 4,096: 0.17× flash's train tokens/s, 6.00× its decode-state" in text
  assert os.path.getsize(tmp_path / "gap_length.png") > 1000
  assert os.path.getsize(tmp_path / "gap_speed.png") > 1000
  # still learning at the end: the curves' last-quarter drop, by its rule
  assert d["cells"]["flash"]["1024"]["late_drop"] == pytest.approx(0.125)
  assert "At 4,096 bytes the runs end still learning: flash's train loss fell 0.125 " \
         "bits/byte over the last quarter of its 368 steps" in text
  assert "| `linear` | 4,096 | +0.125 | +0.125 to +0.125 | 3 |" in text
  # the reference across lengths: the fixture's flash is alike at both, so no sentence;
  # worse at 4,096 on the same bytes: said, with both parts
  assert "flash itself is worse" not in text
  d["cells"]["flash"]["4096"].update(test=2.5, recall_bits=2.0, rest_bits=3.5)
  said = " ".join(results.reading(CPU, d))
  assert "flash itself is worse at 4,096 bytes than at 1,024 on the same 3,014,656 " \
         f"training bytes (2.500 against {d['cells']['flash']['1024']['test']:.3f} " \
         "bits/byte, 3 and 3 seeds), on the recall positions (2.000 against 1.000) and on " \
         "the rest (3.500 against 3.000)" in said
  assert os.path.getsize(tmp_path / "curves.png") > 1000


def test_late_drop_and_curves_from_a_workdir(tmp_path):
  """evaluate.train_curve reads a run's metrics.jsonl (a step logged twice, by a resumed
  run, keeps its last record; nats -> bits); late_drop compares the third quarter's log
  intervals with the fourth's; runner.add_curves gives an entry recorded without a
  curve the one its workdir holds."""
  e = dict(status="ok", preset="cpu", row="flash", length=1024, lr=3e-3, seed=1)
  wd = tmp_path / "wd" / "cpu" / runner.run_name(e)
  wd.mkdir(parents=True)
  ln2 = math.log(2)
  recs = [{"step": 0, "params": 1}] + [{"step": s, "train_loss": 2.0 * ln2}
                                       for s in (2, 4, 6, 8)] + [{"step": 8, "train_loss": ln2}]
  (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
  assert evaluate.train_curve(str(wd)) == [[2, 2.0], [4, 2.0], [6, 2.0], [8, 1.0]]
  assert results.late_drop([[2, 2.0], [4, 2.0], [6, 2.0], [8, 1.0]], 8) == 1.0
  assert results.late_drop([[s, 2.0] for s in (2, 4, 6, 8)], 8) == 0.0
  assert results.late_drop([[8, 1.0]], 8) is None and results.late_drop(None, 8) is None
  path = str(tmp_path / "ledger.json")
  ledger.record_run(path, e, "p")
  ledger.record_run(path, dict(e, seed=2), "p")        # no workdir here: keeps no curve
  assert runner.add_curves(path, str(tmp_path / "wd")) == [runner.run_name(e)]
  runs = {x["seed"]: x for x in ledger.read(path)["runs"]}
  assert runs[1]["curve"][-1] == [8, 1.0] and "curve" not in runs[2]


def test_decision_page_reads_the_json(tmp_path):
  from studies.choose import sources
  got = {}
  for r in ("flash", "gated_deltanet"):
    for lr in CPU.grid:
      got[(r, 1024, lr, 0)] = _entry(CPU, dict(row=r, length=1024, lr=lr, seed=0))
    for s in presets.SEEDS:
      got[(r, 1024, 1e-3, s)] = _entry(CPU, dict(row=r, length=1024, lr=1e-3, seed=s))
  d = results.build(CPU, got)
  with open(tmp_path / page.JSON, "w") as f:
    json.dump(d, f)
  cells = sources.length_cells(str(tmp_path))
  c = cells[("gated_deltanet", 1024)]
  assert c["verdict"] == "worse" and c["gap"] == pytest.approx(0.05 * 1.25)
  assert c["state_bytes"] == 2 ** 21 and ("flash", 4096) not in cells
  assert sources.length_cells(str(tmp_path / "none")) == {}


def test_presets_and_module_sizes():
  import trainer
  # hybrids are layer patterns over the same model, never new variants
  for r in CPU.rows:
    c = presets.make_config(CPU, r, 1024, 1e-3, 1)
    m = trainer.validate(c)
    assert (c.batch_size, c.seq_len, m.max_len, m.d_model, m.num_layers) == (8, 1024, 1024,
                                                                           128, 4)
  assert presets.make_config(CPU, "qwen3_next", 4096, 1e-3, 1).model.layer_attention
  assert {CPU.batch(L) * L for L in CPU.lengths} == {CPU.tokens_per_step}
  here = os.path.join(os.path.dirname(__file__), "..", "..", "studies", "length")
  for f in os.listdir(here):
    if f.endswith(".py"):
      assert sum(1 for _ in open(os.path.join(here, f))) < 500, f


@pytest.mark.slow
def test_one_run_end_to_end(tmp_path, monkeypatch):
  """A tiny run through the child's work (training loop, measure, ledger)."""
  import dataclasses
  root = tmp_path / "data" / "pycode"
  for i in range(6):
    (root / f"f{i}.py").parent.mkdir(parents=True, exist_ok=True)
    (root / f"f{i}.py").write_text(f"x{i} = {i}\n" * 60)     # a 7-byte period: recalls
  tiny = dataclasses.replace(CPU, name="tiny", lengths=(32,), tokens_per_step=64, steps=4,
                             warmup=1, eval_tokens=128,
                             model=(("d_model", 16), ("num_heads", 2), ("d_ff", 32),
                                    ("num_layers", 4)))
  monkeypatch.setitem(presets.PRESETS, "tiny", tiny)
  path = ledger.path_of("tiny", str(tmp_path))
  # through the runner's launch, its child's job run in this process (the child process
  # would not see the monkeypatched preset)
  from studies.core import sweep
  done = []
  monkeypatch.setattr(sweep, "spawn", lambda module, job, log: (
      done.append(runner.work(job)) or (0, "ok", 0.0)))
  runner.launch(tiny, [dict(row="qwen3_next", length=32, lr=1e-3, seed=1)],
                root=str(tmp_path / "wd"), path=path, jobs=1,
                data_dir=str(tmp_path / "data"))
  res = done[0]
  assert os.path.exists(tmp_path / "wd" / "tiny" / runner.run_name(res) / "result.json")
  # the interleaved cost run (--cost_run) times each round's train step and decode
  from studies.length import costs
  cr = costs.measure(tiny, ["qwen3_next"], [32], rounds=2, steps=1, log=lambda m: None,
                     data_dir=str(tmp_path / "data"), decode=True)
  (c,) = cr["cells"]
  assert len(c["cpu_s_rounds"]) == len(c["decode_us_rounds"]) == 2 and cr["complete"]
  assert 0 < c["decode_spread"][0] <= c["decode_us_per_token"] <= c["decode_spread"][1]
  t = res["test"]
  assert 0 < t["recall_fraction"] < 1 and t["bytes"] > 0
  assert t["recall_fraction"] * t["recall_bits"] + (1 - t["recall_fraction"]) * \
      t["rest_bits"] == pytest.approx(t["bits_per_byte"])
  assert res["validation"] > 0 and res["cost"]["state_bytes"] > 0
  assert [st for st, _ in res["curve"]] == sorted({st for st, _ in res["curve"]}) and \
      all(0 < st <= tiny.steps and b > 0 for st, b in res["curve"])
  assert res["cost"]["decode_us_per_token"] > 0 and res["cost"]["peak_bytes"] > 0
  assert list(ledger.runs_of(path, "tiny")) == [("qwen3_next", 32, 1e-3, 1)]


def test_tie_is_declared_before_the_reference_noise():
  """flash chooses under the provisional tie (Shakespeare's, in bits); another row's grid
  rates run at once, but its extension and choice wait for flash's seeds' tie."""
  got = {}
  for lr in CPU.grid:
    got[("flash", 1024, lr, 0)] = _entry(CPU, dict(row="flash", length=1024, lr=lr, seed=0))
    # gated_deltanet best at the top of the grid: rule 11 extends it
    got[("gated_deltanet", 1024, lr, 0)] = _entry(
        CPU, dict(row="gated_deltanet", length=1024, lr=lr, seed=0), validation=3 - lr * 10)
  st = runner.rate_state(CPU, got, "flash")
  assert st["tie"] == pytest.approx(0.017 / math.log(2)) and st["chosen"] == 1e-3
  g = runner.rate_state(CPU, got, "gated_deltanet")
  assert g["tie"] is None and g["next"] == 0.027 and g["waits_for_tie"]
  due = runner.due(CPU, got, rows=["flash", "gated_deltanet"], lengths=[1024])
  assert [(r["row"], r["seed"]) for r in due] == [("flash", s) for s in presets.SEEDS]
  for s in presets.SEEDS:
    got[("flash", 1024, 1e-3, s)] = _entry(CPU, dict(row="flash", length=1024, lr=1e-3,
                                                     seed=s))
  g = runner.rate_state(CPU, got, "gated_deltanet")
  # flash's seeds' validation figures 2.002, 2.004, 2.006: sd 0.002, tie sqrt(2) x that
  assert g["tie"] == pytest.approx(math.sqrt(2) * 0.002) and g["tie_from"] == "flash's seeds"
  assert runner.due(CPU, got, rows=["gated_deltanet"])[0]["lr"] == 0.027
  # rule 10: a row whose seeds spread wider than 10% of flash's mean runs one more
  for r in ("flash", "gated_deltanet"):
    for s in presets.SEEDS:
      e = _entry(CPU, dict(row=r, length=4096, lr=1e-3, seed=s))
      if r == "gated_deltanet" and s == 3:
        e["test"] = dict(e["test"], bits_per_byte=9.0)
      got[(r, 4096, 1e-3, s)] = e
  assert runner.seeds_for(CPU, got, "gated_deltanet", 4096, 1e-3) == [1, 2, 3, 4]
  assert runner.seeds_for(CPU, got, "flash", 4096, 1e-3) == [1, 2, 3]
  gpu = presets.preset("gpu")
  c = presets.make_config(gpu, "flash", 16384, 1e-3, 1, data_dir="/d")
  assert (c.batch_size, c.text.files) == (2, "/d/pycode/[np]*/**/*.py")


def test_step_cost_parts_merge():
  from studies.length import costs
  a = dict(_costs(lengths=(256,)), gauge={"before": 1}, threads="one core", run={"c": 1})
  b = dict(_costs(lengths=(4096,)), gauge={"before": 2}, threads="one core", run={"c": 2},
           complete=False)
  m = costs.merge([a, b])
  assert [c["length"] for c in m["cells"]] == [256, 4096] and not m["complete"]
  assert [(p["lengths"], p["gauge"]) for p in m["parts"]] == [([256], {"before": 1}),
                                                              ([4096], {"before": 2})]
  assert costs.cell(m, "flash", 4096)["cpu_s_per_step"] == 4.0


def test_the_cpu_preset_is_the_committed_plan():
  """The cpu preset's lengths and steps are the ones the committed plan (from the step
  costs measured before any run) keeps: >= 3M bytes a run, the named rows in budget."""
  from studies.core import pages
  here = os.path.join(os.path.dirname(__file__), "..", "..", "results", "lm_length")
  sc = pages.read_json(os.path.join(here, "step_costs.json"))
  fixed = plan.fix(CPU, sc)
  assert fixed["chosen"]["lengths"] == list(CPU.lengths)
  assert [L for L, _ in CPU.dropped] == fixed["dropped"]
  assert fixed["chosen"]["fits"] and CPU.tokens_per_run >= plan.MIN_TOKENS
  assert CPU.steps == plan.steps_for(CPU.tokens_per_step)
  assert CPU.rows[:CPU.trained] == CPU.rows[:presets.NAMED] + tuple(
      fixed["chosen"]["extra_rows"])
  assert pages.read_json(os.path.join(here, "plan.json")) == json.loads(json.dumps(fixed))


def test_the_control_row_is_flash_inside_gated_deltanets_layer():
  """The control row (issue 101's gated_deltanet verdict, read as its attention's or its
  layer's): flash's model with every piece of gated_deltanet's published layer, listed
  after the six named rows (as the budget allows), out of the family."""
  import attention
  from studies.choose import answers_lm
  assert presets.controls() == {"flash_gdn_layer": "gated_deltanet"}
  c = presets.make_config(CPU, "flash_gdn_layer", 1024, 1e-3, 0)
  assert c.attention == "flash"
  assert answers_lm.layer_pieces("cpu", "flash_gdn_layer") == list(
      attention.variant("gated_deltanet").layer)
  assert answers_lm.layer_pieces("cpu", "flash") == []
  assert CPU.rows.index("flash_gdn_layer") == presets.NAMED
  assert "flash_gdn_layer" not in CPU.rows[:CPU.trained]


def test_named_with_the_control_its_selection_runs_come_before_any_4096_run():
  """Run with its control row named (--rows=...,flash_gdn_layer), the length study
  trains the control's sweep and seeds at 1,024 after the six rows' runs there and
  before any seed at 4,096: the 1,024 answer and its control are complete first."""
  rows = list(CPU.rows[:presets.NAMED]) + ["flash_gdn_layer"]
  got = {}
  for r in rows:
    if r == "flash_gdn_layer":
      continue
    for lr in CPU.grid:
      got[(r, 1024, lr, 0)] = _entry(CPU, dict(row=r, length=1024, lr=lr, seed=0))
    for s in presets.SEEDS:
      got[(r, 1024, 1e-3, s)] = _entry(CPU, dict(row=r, length=1024, lr=1e-3, seed=s))
  order = [(w["row"], w["length"]) for w in runner.due(CPU, got, rows=rows,
                                                        lengths=[1024, 4096])]
  first4096 = next(i for i, x in enumerate(order) if x[1] == 4096)
  assert order[:first4096] == [("flash_gdn_layer", 1024)] * len(CPU.grid)
  assert ("flash_gdn_layer", 4096) not in order[:first4096]
