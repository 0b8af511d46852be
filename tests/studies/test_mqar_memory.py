"""'Recall at equal memory' (issue 102: studies.recall.memory, memory_budget, memory_page):
each point's x is the model-level decode-state count, the plan's arithmetic, version 2's
did-not-train / split-row / edge rules on synthetic seeds, the runner resuming from a
ledger without retraining (run_one monkeypatched), the decision page's loader of the
page's JSON, and the decode through a cache. No training."""
import json
import os

import pytest

from studies.core import protocol, sweep
from studies.recall import memory, memory_budget as mb, memory_page as mp, mqar
from studies.recall.mqar import Run
from trainer.config import validate

P = mqar.PRESETS["memory_cpu"]
T, PAIRS = memory.panel(P)
RUN = {"command": "python -m scripts.mqar --preset=memory_cpu", "date": "2026-12-07",
       "host": "test host", "jax_version": "0.11.2"}


def _model_count(row, width):
  """The model-level count, computed here from the run's config directly."""
  from models.config import ModelConfig
  from models.count import decode_state_bytes
  from trainer.config import model_dict
  c = mqar.make_config("memory_cpu", Run(row, width, T, PAIRS, 1e-3, 1))
  return decode_state_bytes(ModelConfig.from_dict(model_dict(c)), T,
                            cache_dtype=memory.row_spec(P, row).get("cache_dtype"))


def _run(row, w, lr, seed, acc, test=None, cpu=100.0, **kw):
  """A finished run's record (the ledger's shape) under memory_cpu's config."""
  c = mqar.make_config("memory_cpu", Run(row, w, T, PAIRS, lr, seed))
  return dict(variant=row, width=w, length=T, pairs=PAIRS, lr=lr, seed=seed,
              stage="lr" if seed == 0 else "seeds", status="ok", accuracy=acc,
              test_accuracy=acc if test is None else test, cpu_seconds=cpu,
              config=sweep.config_fingerprint(c), steps=1500, curve=[[750, acc], [1500, acc]],
              **kw)


def _sweep(row, w, best=1e-3, acc=0.9, other=0.3):
  return [_run(row, w, lr, 0, acc if lr == best else other) for lr in P["lrs"]]


def _seeds(row, w, lr, vals, **kw):
  return [_run(row, w, lr, s, v, **kw) for s, v in enumerate(vals, start=1)]


def test_rows_reuse_the_zoology_runs_and_each_point_is_the_model_level_count(tmp_path):
  # the Zoology rows train zoology_cpu's configs exactly: its ledger's runs are theirs
  for n in ("softmax", "gated_deltanet", "local"):
    r = Run(n, 64, T, PAIRS, 3e-3, 1)
    assert sweep.config_fingerprint(mqar.make_config("memory_cpu", r)) == \
        sweep.config_fingerprint(mqar.make_config("zoology_cpu", r))
  c = mqar.make_config("memory_cpu", Run("hybrid_qwen3_next", 64, T, PAIRS, 1e-3, 1))
  assert c.model.layer_attention == "gated_deltanet,softmax+attn_gate"
  # every preset's page folder is where its page is (the short grid's: archived); the
  # GPU grid's is written on a lent GPU
  for k in mqar.OUTS:
    assert k == "zoology_gpu" or os.path.exists(os.path.join(mqar.out_of(k), "README.md")), k
  # every planned row's config passes the trainer's checks (a hybrid sets no global swap)
  for _, n, w in memory.PRESETS["memory_cpu"]["order"]:
    validate(mqar.make_config("memory_cpu", Run(n, w, T, PAIRS, 1e-3, 1)))
  # local's window matched to gla's whole state: exactly D / 2 here, and the closest
  assert memory.matched_window("memory_cpu", 64, "gla") == 32
  assert memory.state_bytes("memory_cpu", "local_state", 128) == \
      memory.state_bytes("memory_cpu", "gla", 128)
  # the page from a fixture: every point of the plan, x by memory.state_bytes
  results = _sweep("softmax", 64, 3e-3, 0.999) + _seeds("softmax", 64, 3e-3, [.999] * 3) \
      + _sweep("hybrid_qwen3_next", 64) + _seeds("hybrid_qwen3_next", 64, 1e-3,
                                                  [0.9, 0.92, 0.95])
  data = dict(preset="memory_cpu", settings={k: v for k, v in P.items() if k != "rows"},
              rows=P["rows"], protocol=protocol.record(memory.PAGE, 2), results=results,
              softmax_step={64: 1500}, cpu_seconds=0.0, ledger="x.json", plan=None,
              points=[mp.point(P, results, n, w, memory.state_bytes("memory_cpu", n, w), {})
                      for _, n, w in P["order"]])
  from studies.choose import sources
  root = tmp_path / "results"
  assert sources.memory_points(str(root)) == []              # no page written yet
  out = root / sources.MEMORY_PAGE
  mp.write_page(json.loads(json.dumps(data)), str(out), RUN)
  saved = json.loads((out / "results.json").read_text())
  text = (out / "README.md").read_text()
  assert len(saved["points"]) == len(P["order"]) and (out / "memory.png").exists()
  for q in saved["points"]:
    assert q["state_bytes"] == _model_count(q["row"], q["width"]), q
    assert mp.kib(q["state_bytes"]) in text
  soft = next(q for q in saved["points"] if (q["row"], q["width"]) == ("softmax", 64))
  assert soft["status"] == "v2" and soft["mean"] == pytest.approx(0.999)
  iv = soft["interval"]
  assert f"| 99.9% | [{iv[0]:.1%}, {iv[1]:.1%}] |" in text and 0 <= iv[0] <= iv[1] <= 1
  int8 = {q["width"]: q["state_bytes"] for q in saved["points"] if q["row"] == "softmax_int8"}
  assert int8[64] < soft["state_bytes"] / 3          # 1 byte + a scale, not 4 bytes
  assert "every seed at or over 99% on validation by step 1500" in text
  # the band of both judged points: softmax best, the hybrid next, a bounded interval
  band = next(l for l in text.splitlines() if l.startswith("| 256-1,024 KiB"))
  assert "`softmax` w64 (99.9%)" in band and "`hybrid_qwen3_next` w64 (92.3%)" in band
  assert "exploratory" in band and "pts" in band
  assert "| `hybrid_qwen3_next` | 275.8 KiB (w64) | not reached |" in text   # 90%, 99%
  assert "not run: `nice -n 10 python -m scripts.mqar --preset=memory_cpu" in text
  # the decision page reads the page's JSON
  pts = sources.memory_points(str(root))
  assert [(x.row, x.width, x.state_bytes) for x in pts] == [
      (q["row"], q["width"], q["state_bytes"]) for q in saved["points"]]
  assert [x.row for x in pts if x.judged] == ["softmax", "hybrid_qwen3_next"]
  bad = dict(saved, points=[{"row": "x"}])
  (out / "results.json").write_text(json.dumps(bad))
  with pytest.raises(ValueError, match="lacks width"):
    sources.memory_points(str(root))


def test_version_2_rules_on_synthetic_seeds(tmp_path):
  g = memory.rule(P)
  assert len(g.grid) >= protocol.MIN_RATES and g.chance == pytest.approx(1 / 128)
  # did not train: every rate within 2x chance -> no extension, no seeds, its status
  flat = [_run("gla", 64, lr, 0, 0.008) for lr in P["lrs"]]
  assert not memory.trained(P, flat, "gla", 64)
  plan = memory.row_plan(P, "gla", flat, ("lr", "grid", "seeds", "g1"))
  assert [(r.lr, s) for r, s in plan if r.width == 64] == [     # its finished sweep alone
      (lr, "lr") for lr in sorted(P["lrs"])]
  assert mp.point(P, flat, "gla", 64, 1, {})["status"] == "did not train"
  # a best at the top end extends the grid past it (the end's own ratio)
  top = _sweep("linear", 64, max(P["lrs"]))
  nxt = [r.lr for r, s in memory.row_plan(P, "linear", top, ("lr", "g1")) if r.width == 64]
  assert nxt == sorted(P["lrs"]) + [pytest.approx(max(P["lrs"]) * 3)]
  assert memory.chosen(P, top, "linear", 64) is None
  # split seeds: 3 spread past 10 points -> seeds up to 8; at 8 still split: unstable
  done = _sweep("linear", 64) + _seeds("linear", 64, 1e-3, [0.05, 0.5, 0.9])
  assert memory.reporting_seeds(P, done, "linear", 64) == list(range(1, 9))
  todo = [r.seed for r, s in memory.row_plan(P, "linear", done, ("lr", "grid", "seeds", "g1"))
          if r.width == 64 and s != "lr"]
  assert todo == list(range(1, 9))       # the runner skips the finished ones
  assert mp.point(P, done, "linear", 64, 1, {})["status"] == "more seeds"
  eight = _sweep("linear", 64) + _seeds("linear", 64, 1e-3, [0.05, 0.9] * 4)
  split = mp.point(P, eight, "linear", 64, 1, {})
  assert split["status"] == "unstable"
  # the reading names it as unstable with its seeds' range, never as awaiting runs
  data = {"points": [split], "softmax_step": {}}
  text = "\n".join(mp.reading_lines(data, mp.bands(data["points"])))
  assert "unstable, so not judged: `linear` at width 64" in text and "5.0% to 90.0%" in text
  assert "awaiting runs" not in text and "best `linear`" not in text
  # every status the plot draws, in one figure
  pts = [split, dict(mp.point(P, done, "linear", 64, 1, {}), row="gla", state_bytes=2048),
         dict(mp.point(P, _sweep("linear", 64) + _seeds("linear", 64, 1e-3, [0.5, 0.52, 0.55]),
                       "linear", 64, 1, {}), state_bytes=4096),
         {"row": "local", "width": 64, "state_bytes": 512, "status": "v1 ledger",
          "seeds": {1: 0.01}, "mean": 0.01},
         {"row": "gla", "width": 128, "state_bytes": 8192, "status": "did not train",
          "seeds": {}, "mean": None}]
  mp.plot({"points": pts, "settings": {"chance": 1 / 128}}, str(tmp_path / "m.png"))
  assert (tmp_path / "m.png").stat().st_size > 10_000
  tight = _sweep("linear", 64) + _seeds("linear", 64, 1e-3, [0.5, 0.52, 0.55])
  q = mp.point(P, tight, "linear", 64, 1, {})
  assert q["status"] == "v2" and q["mean"] == pytest.approx(0.5233, abs=1e-3)
  # its mean's interval: a bootstrap of observed seeds, so inside [min, max] of them
  lo, hi = q["interval"]
  assert 0.5 <= lo < q["mean"] < hi <= 0.55
  # width 256 only while still rising at 128
  up = tight + _sweep("linear", 128) + _seeds("linear", 128, 1e-3, [0.8, 0.82, 0.85])
  assert memory.rising(P, up, "linear", 256) is True
  flat128 = tight + _sweep("linear", 128) + _seeds("linear", 128, 1e-3, [0.5, 0.5, 0.55])
  assert memory.rising(P, flat128, "linear", 256) is False
  assert memory.row_plan(P, "linear", flat128, ("lr", "grid", "seeds", "g6")) == []
  # ... so its width-256 point is settled ("not rising"), never awaited: the reading says
  # why, and the decision page neither waits for it nor counts the row worse for it
  wide = mp.point(P, flat128, "linear", 256, 3, {})
  assert wide["status"] == mp.NOT_RISING and wide["status"] in mp.SETTLED
  data = {"points": [q, wide], "softmax_step": {}}
  text = "\n".join(mp.reading_lines(data, mp.bands(data["points"])))
  assert "not run, by the plan's rule" in text and "`linear` w256" in text
  assert "awaiting runs" not in text
  from studies.choose import answers as A
  assert A.settled([q, wide]) == ("2 of 2 points settled (1 judged, 1 not run as no "
                                  "longer rising)")
  assert mp.point(P, tight, "linear", 256, 3, {})["status"] == "not run"   # not yet known
  assert memory.rising(P, tight, "linear", 256) is None       # 128 not measured yet
  # a rate_of row: the source's rate, no lr stage, its own figure (the int8 decode)
  soft = _sweep("softmax", 64, 3e-3)
  plan = memory.row_plan(P, "softmax_int8", soft, ("lr", "grid", "seeds", "g4"))
  assert {(r.width, r.lr) for r, _ in plan} == {(64, 3e-3)} and {s for _, s in plan} != {"lr"}
  r = _run("softmax_int8", 64, 3e-3, 1, 0.99, test_accuracy_int8=0.42)
  assert memory.figure(r, P) == 0.42


def test_the_plans_arithmetic(monkeypatch, tmp_path):
  monkeypatch.setattr(mb.mqar.mqar_ledger, "totals", lambda path: {"cpu_seconds": 600.0})
  probes = {f"{n}@{w}": 60.0 for _, n, w in P["order"]}
  probes.update({f"softmax_int8@{w}:decode": 30.0 for w in (64, 128)})
  results = _sweep("softmax", 64, 1e-3) + _seeds("softmax", 64, 1e-3, [0.99] * 3)
  plan = mb.plan("memory_cpu", results, {"probes": []}, probes, budget=200)
  items = {(i["row"], i["width"]): i for i in plan["items"]}
  assert plan["spent_cpu_minutes"] == 10.0
  assert items[("softmax", 64)]["runs"] == 0                  # complete, seeds there
  # a fresh row: 4 rates + 1 in reserve + 3 seeds, at 1 CPU-minute, and one start-up
  assert items[("linear", 64)]["runs"] == 8 and items[("linear", 64)]["cpu_minutes"] == \
      pytest.approx(8 + mb.STARTUP_CPU_S / 60, abs=0.01)
  assert items[("linear", 128)]["cpu_minutes"] == 8.0         # same (group, row): no start
  # the int8 row: 3 seeds retrained at softmax's price plus the decode's
  assert items[("softmax_int8", 64)]["runs"] == 3
  assert items[("softmax_int8", 64)]["cpu_s_per_run"] == 90.0
  assert items[("linear", 256)]["conditional"]
  fit = [i for i in plan["items"] if i["fits"]]
  assert fit[-1]["total_cpu_minutes"] == plan["planned_cpu_minutes"] <= 200
  assert plan["planned_cpu_minutes"] == pytest.approx(
      10 + sum(i["cpu_minutes"] for i in fit), abs=0.2)
  # in order: each item fits where the total before it plus its own stays within the
  # budget; one that would pass it is dropped and a later, cheaper one keeps its place
  total = 10.0
  for i in plan["items"]:
    assert i["fits"] == (total + i["cpu_minutes"] <= 200 + 0.01), i
    total += i["cpu_minutes"] if i["fits"] else 0
  nxt = next(i for i in plan["items"] if not i["fits"])
  assert plan["dropped"][0] == f"{nxt['row']} w{nxt['width']}"
  assert all(g not in plan["fits_groups"] for g in {i["group"] for i in plan["items"]
                                                    if not i["fits"]})
  # a dear item dropped, then a cheap one after it that fits: kept
  dear = dict(probes, **{"hybrid_qwen3_next@128": 6000.0})
  every = {(i["row"], i["width"]): i for i in mb.plan(
      "memory_cpu", results, {"probes": []}, dear, budget=1e9)["items"]}
  room = every[("hybrid_qwen3_next", 64)]["total_cpu_minutes"] + every[
      ("hybrid_gpt_oss", 64)]["cpu_minutes"] + 1
  assert every[("hybrid_qwen3_next", 128)]["cpu_minutes"] > 2
  by = {(i["row"], i["width"]): i for i in mb.plan(
      "memory_cpu", results, {"probes": []}, dear, budget=room)["items"]}
  assert not by[("hybrid_qwen3_next", 128)]["fits"] and by[("hybrid_gpt_oss", 64)]["fits"]
  # the runner's default: the items that fit, by group and row (a group in part)
  (tmp_path / "plan.json").write_text(json.dumps(plan))
  fit = memory.fitting("memory_cpu", str(tmp_path))
  assert sum(len(ws) for by in fit.values() for ws in by.values()) == len(
      [i for i in plan["items"] if i["fits"]])
  assert nxt["width"] not in fit.get(nxt["group"], {}).get(nxt["row"], [])
  plan6 = memory.row_plan(P, "hybrid_gpt_oss", [], ("lr", "grid", "seeds", "g5", "w64"))
  assert {r.width for r, _ in plan6} == {64}


def test_the_runner_resumes_from_the_ledger_without_retraining(tmp_path, monkeypatch):
  ours, zoo = str(tmp_path / "memory_cpu_runs.json"), str(tmp_path / "zoology_cpu_runs.json")
  with open(zoo, "w") as f:       # the reused ledger: softmax's v1 runs at width 64
    json.dump({"runs": [dict(r, host="h", process="p") for r in
                        _sweep("softmax", 64, 3e-3, 0.999)[:3]
                        + _seeds("softmax", 64, 3e-3, [0.999] * 3)]}, f)
  real = mqar.mqar_ledger.path_of
  monkeypatch.setattr(mqar.mqar_ledger, "path_of", lambda preset, ledger=True, out=None: (
      real(preset, ledger) if ledger not in (True,) else
      {"memory_cpu": ours, "zoology_cpu": zoo}[preset]))
  trained = []

  def fake(preset, run, stage, root, overrides=None):
    trained.append((run.variant, run.width, run.lr, run.seed))
    best = run.seed > 0 or (run.width, run.lr) == (128, 1e-3)
    return _run(run.variant, run.width, run.lr, run.seed, 0.999 if best else 0.5)
  monkeypatch.setattr(mqar, "run_one", fake)
  monkeypatch.setattr(mqar.runs, "cpu_seconds", lambda: 0.0)
  kw = dict(groups=[1], rows=["softmax"], log=lambda s: None, subprocess_run=False)
  memory.study("memory_cpu", str(tmp_path / "wd"), **kw)
  big = max(P["lrs"])
  assert (("softmax", 64, big, 0) in trained and
          not any(w == 64 and s > 0 for _, w, _, s in trained))  # the ledger's seeds kept
  assert [x for x in trained if x[1] == 128] == [
      ("softmax", 128, lr, 0) for lr in sorted(P["lrs"])] + [
      ("softmax", 128, 1e-3, s) for s in P["seeds"]]
  first = list(trained)
  memory.study("memory_cpu", str(tmp_path / "fresh_clone"), **kw)   # no workdirs at all
  assert trained == first                                      # nothing trained again
  assert len(json.load(open(ours))["runs"]) == len(first)
  # no group starts once the ledger's spend reaches the budget
  monkeypatch.setattr(mqar.mqar_ledger, "totals",
                      lambda path: {"cpu_seconds": 60.0 * P["budget"]})
  memory.study("memory_cpu", str(tmp_path / "wd"), **dict(kw, groups=[2], rows=None))
  assert trained == first
  monkeypatch.setattr(mqar.mqar_ledger, "totals", lambda path: {"cpu_seconds": 0.0})
  # without --groups: the plan is re-priced before each group, and a group runs what the
  # fresh plan fits (CPU an earlier group freed buys a dropped item in the same run)
  fit, calls = {}, []

  def replan():
    calls.append(len(trained))
    fit.update({2: {"deltanet": [64]}})
  monkeypatch.setattr(memory, "fitting", lambda preset, out=None: fit)
  memory.study("memory_cpu", str(tmp_path / "wd"), **dict(kw, groups=None, rows=None),
               replan=replan)
  groups = sorted({g for g, _, _ in P["order"]})
  assert len(calls) == len(groups)
  new = trained[len(first):]
  assert new and {(v, w) for v, w, _, _ in new} == {("deltanet", 64)}
  # the stop file: no group starts
  stop = tmp_path / "STOP"
  stop.write_text("")
  monkeypatch.setenv("ATTNLAB_STOP_FILE", str(stop))
  with pytest.raises(SystemExit):
    memory.study("memory_cpu", str(tmp_path / "wd2"), **dict(kw, groups=None, rows=None),
                 replan=replan)
  assert len(calls) == len(groups)


def test_the_float_cache_decode_is_the_forward_pass():
  """decode_logp through the model's float decode state gives the forward pass's log
  probabilities; through an int8 cache close to them, not equal (its keys and values
  rounded). decode_accuracy counts its argmax on the queried values (a thin loop over
  the eval batches: not compiled again here)."""
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from data import pipeline
  from models.config import ModelConfig
  from models.transformer import build, shift_right
  from trainer.config import model_dict
  c = mqar.make_config("smoke", Run("softmax", 16, 16, 2, 1e-2),
                       {"eval_batches": 1, "eval_batch_size": 4})
  model = build(ModelConfig.from_dict(model_dict(c)), rngs=nnx.Rngs(0))
  model.eval()
  task = pipeline.create(c)
  y = jnp.asarray(next(iter(task.eval_batches()))["y"])
  want = nnx.jit(lambda m, y: m.head.log_probs(m(shift_right(y, m.cfg.start_id))))(model, y)
  got = memory.decode_logp(model, y)
  np.testing.assert_allclose(got, want, atol=1e-5)
  q = memory.decode_logp(model, y, "int8")
  assert 0 < float(jnp.max(jnp.abs(q - want))) < 0.05


def test_the_multi_head_panel_shares_key_value_heads_and_is_priced_and_named():
  """Group 8 (issue 102 item 1: GQA, MQA and MLA "only if the budget allows"): 4 heads
  at width 128 sharing 1, 2 or 4 key/value heads, or one latent a token (mla); each
  point's x is its model's count, the KV part shrinking with the kv heads; a row with
  no runs is priced as one-head softmax at that width; the decision page names the
  cache each keeps."""
  from studies.choose.answers import row_kind
  cfg = {r: memory.model_config("memory_cpu", r, 128) for r in ("mqa_h4", "gqa_h4",
                                                                   "mha_h4", "mla_h4")}
  assert [(cfg[r].num_heads, cfg[r].kv_heads) for r in ("mqa_h4", "gqa_h4", "mha_h4")] == [
      (4, 1), (4, 2), (4, 4)]
  assert cfg["mla_h4"].attention == "mla" and cfg["mla_h4"].kv_heads == 1
  b = {r: memory.state_bytes("memory_cpu", r, 128) for r in cfg}
  assert b["mha_h4"] == memory.state_bytes("memory_cpu", "softmax", 128)  # same bytes
  kv = b["mha_h4"] - b["mqa_h4"]           # what 3 of 4 kv heads cost: 3/4 of MHA's
  assert b["mha_h4"] - b["gqa_h4"] == kv * 2 // 3
  assert [g for g, n, w in P["order"] if n in cfg] == [8] * 4
  soft = [_run("softmax", 128, 1e-3, s, 0.99, cpu=400.0) for s in (1, 2, 3)]
  cpu, how = mb.run_cpu(P, "mla_h4", 128, soft, {"probes": []})
  assert cpu == 400.0 and how.startswith("one-head softmax at this width")
  rows = P["rows"]
  assert [row_kind(rows[r]) for r in ("mqa_h4", "gqa_h4", "mha_h4", "mla_h4")] == [
      "MQA KV cache (4 heads, 1 kv)", "GQA KV cache (4 heads, 2 kv)", "full KV cache",
      "latent KV cache"]
  assert row_kind(rows["softmax"]) == "full KV cache" and row_kind(rows["linear"]) == \
      "fixed state"
  line = mp.multi_head_line({"rows": rows, "plan": {"items": [
      {"row": r, "group": 8, "width": 128, "state_bytes": b[r], "fits": r != "mha_h4",
       "cpu_minutes": 50.0} for r in ("mqa_h4", "mla_h4", "gqa_h4", "mha_h4")]}})
  assert "Group 8, a multi-head panel at width 128 (heads of 32: `mqa_h4` (259.0 KiB)" in line
  assert line.endswith("3 of its 4 rows fit the budget, the others dropped (the plan below).")
