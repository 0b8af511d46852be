"""data/mqar.py's sequences, the token_accuracy metric on the queried values only, and
studies.recall.mqar: its plan (the learning-rate stage chooses each rate the same way,
then the grid and the seeds, whole cells first) and, on its smoke preset (one 2-step run),
that finished runs are never trained again, refused and same-math variants get rows
that say why, and the page (studies.recall.page) is written from its JSON."""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

import trainer
from data import mqar as data_mqar
from studies.recall import mqar, page as mqar_page, stats as mqar_stats

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("studies_mqar")

TINY = {"batch_size": 4, "eval_batch_size": 4, "eval_batches": 1, "log_every": 2,
        "warmup_steps": 1, "mqar.vocab_size": 16, "model.vocab_size": 16}


def test_sequences_follow_zoology():
  V, P, T = 20, 3, 16
  y, w = data_mqar.mqar_batch(np.random.default_rng(0), 64, vocab_size=V, num_pairs=P,
                              seq_len=T)
  y2, _ = data_mqar.mqar_batch(np.random.default_rng(0), 64, vocab_size=V, num_pairs=P,
                               seq_len=T)
  np.testing.assert_array_equal(y, y2)                 # deterministic per seed
  assert y.shape == w.shape == (64, T) and y.dtype == np.int32
  keys, vals = y[:, 0:2 * P:2], y[:, 1:2 * P:2]
  assert ((1 <= keys) & (keys < V // 2)).all() and ((V // 2 <= vals) & (vals < V)).all()
  assert all(len(set(k)) == P and len(set(v)) == P for k, v in zip(keys, vals))
  assert (w.sum(1) == P).all() and not w[:, :2 * P].any()
  for b in range(64):
    lookup = dict(zip(keys[b], vals[b]))
    at = np.nonzero(w[b])[0]
    assert sorted(y[b, at - 1]) == sorted(keys[b])       # every key queried once
    assert all(lookup[y[b, i - 1]] == y[b, i] for i in at)   # the target is its value
    rest = np.ones(T, bool)
    rest[:2 * P], rest[at], rest[at - 1] = False, False, False
    assert (y[b, rest] == data_mqar.FILLER).all()
  # the power law puts most queries soon after the pairs
  first = (np.nonzero(w)[1] - 2 * P - 1) // 2
  assert np.mean(first < 2) > np.mean(first >= (T - 2 * P) // 2 - 2)
  with pytest.raises(ValueError, match="'mqar.seq_len'.*>= 4 \\* num_pairs"):
    data_mqar.check(V, 5, 16)
  with pytest.raises(ValueError, match="'mqar.vocab_size'"):
    data_mqar.check(8, 4, 16)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("mqar"))
  data = mqar.study("smoke", root, names=["softmax"], overrides=TINY,
                    subprocess_run=False, log=lambda s: None)
  return root, data


def test_accuracy_counts_only_the_queried_values(smoke):
  """token_accuracy is the share of the weighted targets (the queried values) that are
  the argmax of the teacher-forced prediction, with any weights."""
  from data.pipeline import create
  from trainer.step import evaluate
  root, data = smoke
  r = data["results"][0]
  config, model, _ = trainer.load_model(os.path.join(root, mqar.run_of(r).name))
  task = create(config)
  base = evaluate(model, task, config)["token_accuracy"]
  assert base == pytest.approx(r["accuracy"])
  batches = list(task.eval_batches())
  from flax import nnx
  from models.transformer import shift_right
  logp = nnx.jit(lambda m, y: m.forward_logp(shift_right(y, m.cfg.start_id)))
  preds = [np.asarray(jnp.argmax(logp(model, b["y"]), -1)) for b in batches]

  def by_hand(ws):        # argmax == target at the weighted positions
    hit = sum(np.sum((p == b["y"]) & (w > 0)) for p, b, w in zip(preds, batches, ws))
    return hit / sum(np.sum(w > 0) for w in ws)

  assert base == pytest.approx(by_hand([b["w"] for b in batches]))
  # only the first query of each row counted: the metric follows the weights
  firsts = [np.where(np.cumsum(b["w"], 1) == 1, b["w"], 0) for b in batches]

  class Reweighted:
    metric = task.metric

    def eval_batches(self):
      return iter([dict(b, w=w) for b, w in zip(batches, firsts)])

  assert evaluate(model, Reweighted(), config)["token_accuracy"] == pytest.approx(
      by_hand(firsts))


def test_stages_rates_and_resume(smoke, monkeypatch):
  root, data = smoke
  p = mqar.PRESETS["smoke"]
  rs = data["results"]
  lr_rows = [r for r in rs if r["stage"] == "lr"]
  assert sorted(r["lr"] for r in lr_rows) == sorted(p["lrs"])
  assert data["lrs"]["softmax"] == p["lrs"][0]     # choose_lr: test_a_variants_plan
  # the grid's one cell at the chosen rate is the lr stage's run: nothing more trained
  assert len(rs) == len(p["lrs"])
  assert all(0.0 <= r["accuracy"] <= 1.0 and r["cpu_seconds"] > 0 for r in rs)
  assert data["cpu_seconds"] >= sum(r["cpu_seconds"] for r in rs) * 0.99

  def boom(*a, **k):
    raise AssertionError("a finished run was trained again")

  monkeypatch.setattr(trainer, "train_and_evaluate", boom)
  again = mqar.study("smoke", root, names=["softmax"], overrides=TINY,
                     subprocess_run=False, log=lambda s: None)
  assert again["results"] == json.loads(json.dumps(rs))


def test_page_rows_and_missing(smoke, tmp_path):
  root, data = smoke
  out = tmp_path / "page"
  mqar_page.write_page(data, str(out), {"command": "python -m scripts.mqar (test)",
                                   "date": "2026-11-25", "host": "test host",
                                   "jax_version": "0", "preset": "smoke"})
  text = (out / "README.md").read_text()
  assert (out / "mqar.png").stat().st_size > 0
  assert json.loads((out / "results.json").read_text())["lrs"]["softmax"] == \
      data["lrs"]["softmax"]
  assert "| `linformer` |  | cannot: config 'model.attention'" in text or \
      "cannot:" in text.split("`linformer`")[1].split("\n")[0]
  assert "represented by softmax" in text.split("`flash` |")[1].split("\n")[0]
  assert "`linear`: lr stage at 0.01; the whole grid" in text   # missing, said
  assert "Zoology" in text and "Total CPU time" in text
  jobs = max(1, data["jobs"])
  assert f"at least {data['cpu_seconds'] / 60 / jobs:.0f} minutes of wall time" in text


def test_the_time_target_is_judged_by_one_whole_invocation(smoke, monkeypatch):
  """Met or missed by the wall time of one invocation that ran the whole plan; a plan
  with runs missing, or spread over invocations, is missed only by its CPU floor."""
  _, data = smoke
  gauge = {"flop_per_s": 3e11, "n": 1024, "dtype": "float32", "runs": 7,
           "statistic": "median"}
  d = dict(data, wall_seconds=1800.0, invocations=1, jobs=2, cpu_seconds=3000.0,
           matmul_peak=gauge)
  assert mqar_page.missing_cells(d)                    # the smoke plan leaves linear's runs
  assert "not judged on this machine (its matmul gauge" in mqar_stats.time_verdict(d)
  monkeypatch.setattr(mqar_stats, "missing_cells", lambda data: [])
  assert "met on this machine" in mqar_stats.time_verdict(d)
  assert "took 30.0 minutes" in mqar_stats.time_verdict(d) and "300 GFLOP/s" in mqar_stats.time_verdict(d)
  assert "missed" in mqar_stats.time_verdict(dict(d, wall_seconds=3700.0))
  two = dict(d, invocations=2)
  assert "not judged" in mqar_stats.time_verdict(two)
  assert "missed on this machine, by its CPU-time floor" in mqar_stats.time_verdict(
      dict(two, cpu_seconds=7300.0, matmul_peak=None))


def test_a_variants_plan_puts_whole_cells_first():
  """lr stage; after it, the first panel's grid, the seeds, then the other panels; a
  seed cell may be seeded for some variants only."""
  p = mqar.PRESETS["cpu"]
  assert [s for _, s in mqar.variant_plan(p, "gla", [], ("lr", "grid", "seeds"))] == \
      ["lr"] * len(p["lrs"])
  done = [dict(variant=v, stage="lr", status="ok", lr=x, accuracy=a)
          for v in ("gla", "linear") for x, a in zip(p["lrs"], (0.2, 0.6, 0.6))]
  assert mqar.choose_lr(p, done[:2], "gla") is None          # until every rate ran
  near = [dict(variant="dot", stage="lr", status="ok", lr=x, accuracy=a)
          for x, a in zip(p["lrs"], (0.2, 0.995, 1.0))]
  assert mqar.choose_lr(p, near, "dot") == p["lrs"][1]      # within 1 point: a tie
  near[1]["accuracy"] = 0.98
  # the best is the grid's top and beats the next rate by 2 points: the sweep goes on
  assert mqar.lr_rule(p).ladder == [2.7e-05, 9e-05, 3e-4, 1e-3, 3e-3, 9e-3, 0.027]
  assert mqar.choose_lr(p, near, "dot") is None
  assert [r.lr for r in mqar.lr_runs(p, ["dot"], near)] == [3e-4, 1e-3, 3e-3, 9e-3]
  near.append(dict(variant="dot", stage="lr", status="ok", lr=9e-3, accuracy=1.0))
  assert mqar.choose_lr(p, near, "dot") == p["lrs"][2]      # 9e-3 ties: it stops there
  near[-1]["accuracy"] = float("nan")                         # diverged: never chosen
  assert mqar.choose_lr(p, near, "dot") == p["lrs"][2]
  near[2]["accuracy"], near[-1]["accuracy"] = 0.9, 1.0       # 9e-3 better: 0.027 next
  assert mqar.lr_rates(p, near, "dot")[-1] == 0.027 and mqar.choose_lr(p, near, "dot") is None
  near.append(dict(variant="dot", stage="lr", status="ok", lr=0.027, accuracy=1.0))
  assert mqar.choose_lr(p, near, "dot") == 9e-3
  low = [dict(variant="gla", stage="lr", status="ok", lr=x, accuracy=a)
         for x, a in zip(mqar.lr_rule(p).ladder[:5], (0.9, 0.8, 0.5, 0.4, 0.3))]
  assert mqar.choose_lr(p, low, "gla") == 2.7e-05     # the ladder's end: the sweep stops
  assert mqar.choose_lr(dict(p, lr_extend=0), near[:3], "dot") == 1e-3   # a grid alone
  near[2]["accuracy"] = 1.0
  first = tuple(p["panels"][0][:2])
  n = len(p["widths"])
  for v in ("gla", "linear"):
    plan = mqar.variant_plan(p, v, done, ("lr", "grid", "seeds"))
    assert {r.lr for r, s in plan if s != "lr"} == {p["lrs"][1]}     # a tie: the smaller
    cells = mqar.seed_cells(p, v)
    assert len(cells) == 2                               # each once
    extra = sum(len(mqar.cell_seeds(p, v, c)) - 1 for c in cells)
    assert extra == 4 + 4            # the protocol's 5 reporting seeds at 2 cells
    kinds = [(s, s == "seeds" or (r.length, r.pairs) == first) for r, s in plan
             if s != "lr"]
    assert kinds == [("grid", True)] * n + [("seeds", True)] * extra \
        + [("grid", False)] * n * (len(p["panels"]) - 1)
    # no run twice, and (studies.core.protocol) no reported run is a run that chose the
    # rate
    assert len(plan) == len({r for r, _ in plan})
    assert {r.seed for r, s in plan if s == "lr"} == {0}
    assert {r.seed for r, s in plan if s != "lr"} == set(p["seeds"]) == {1, 2, 3, 4, 5}
    parts = [mqar.variant_plan(p, v, done, ("lr", "grid", "seeds"), x) for x in mqar.PARTS]
    assert parts[0] + parts[1] == plan
    assert all((r.length, r.pairs) != first and s == "grid" for r, s in parts[1])
  assert not [r for r, s in mqar.variant_plan(p, "local", done, ("lr",)) if s != "lr"]
  assert mqar.seed_cells(dict(p, seeded=("softmax",)), "local") == []
  # a cell seeded for some variants only, one with seeds of its own
  q = dict(p, seed_cells=((32, 64, 8), (64, 64, 8, ("softmax", "linear")),
                          (32, 64, 8, ("linear",), (0, 1, 2, 3, 4))))
  assert mqar.seed_cells(q, "gla") == [(32, 64, 8)]
  assert mqar.seed_cells(q, "linear") == [(32, 64, 8), (64, 64, 8)]
  assert mqar.cell_seeds(q, "linear", (32, 64, 8)) == [0, 1, 2, 3, 4, 5]
  assert mqar.cell_seeds(q, "softmax", (32, 64, 8)) == [1, 2, 3, 4, 5]
  assert 0 not in {r.seed for r in mqar.seed_runs(q, {"linear": 1e-3})}  # selection's


def test_verdicts_are_welch_with_holm_over_the_page():
  """mqar_stats.page_verdicts: studies.core.protocol.verdicts over every comparison the
  page states (the seeded variants at the seed cells, linear at the other cells)."""
  rs = [dict(variant=v, width=16, length=64, pairs=4, lr=1e-3, seed=s, accuracy=a)
        for v, accs in (("softmax", (0.9, 0.92, 0.88)), ("linear", (0.5, 0.52, 0.48)),
                        ("gla", (0.85, 0.95, 0.9)), ("dot", (1.0, 1.0, 1.0)))
        for s, a in enumerate(accs)]
  rs += [dict(variant="dot", width=16, length=64, pairs=8, lr=1e-3, seed=0, accuracy=1.0)]
  st = mqar_stats.cell_stats(rs, {"softmax": 1e-3, "linear": 1e-3, "gla": 1e-3})
  m, se, n = st[("softmax", 16, 64, 4)]
  assert (m, n) == (pytest.approx(0.9), 3) and se == pytest.approx(0.02 / 3 ** 0.5)
  data = {"settings": {"seeded": ("softmax", "linear", "gla"), "seed_cells": ((16, 64, 4),),
                       "panels": ((64, 4, 10), (64, 8, 10)), "widths": (16,)},
          "lrs": {"softmax": 1e-3, "linear": 1e-3, "gla": 1e-3}, "results": rs}
  v = mqar_stats.page_verdicts(data)
  assert set(v) == {("linear", (16, 64, 4)), ("gla", (16, 64, 4))}  # 64/8: no softmax
  assert v[("linear", (16, 64, 4))].word == "worse"
  assert v[("gla", (16, 64, 4))].word == "unresolved"
  assert v[("linear", (16, 64, 4))].text("{:.1%}").startswith("worse (Δ −40.0 pts [")
  # the seeds that reach SOLVED (0.9), counted from the page's data
  assert mqar_stats.recalled(data, "softmax", 16, 64, 4) == "2 of 3"
  assert mqar_stats.recalled(data, "gla", 16, 64, 4) == "2 of 3"     # 0.85 falls short
  one = dict(data, results=rs[:1] + rs[3:4])
  assert mqar_stats.page_verdicts(one)[("linear", (16, 64, 4))].word == "few"
  lines = mqar_page.verdict_lines(data, st)
  assert any("| `gla` |" in x and "unresolved (Δ" in x and "p_adj" in x for x in lines)


def test_a_page_under_the_protocol_reports_fresh_seeds_on_test():
  """Under the protocol the page's figures are the reporting seeds' test accuracies;
  the selection run (seed 0) is not among them; old data carries the warning."""
  from studies.core import protocol
  rs = [dict(variant="softmax", width=16, length=64, pairs=4, lr=1e-3, seed=s, stage=st,
             accuracy=0.5, test_accuracy=t)
        for s, st, t in ((0, "lr", 0.99), (1, "grid", 0.6), (2, "seeds", 0.7))]
  data = {"lrs": {"softmax": 1e-3}, "results": rs,
          "protocol": protocol.record("variants_mqar")}
  shown = mqar_page.reported(data)
  assert [r["accuracy"] for r in shown["results"]] == [0.6, 0.7]
  assert mqar_page.reported(dict(data, protocol=protocol.record(None, 0))) ["results"] == rs
  assert protocol.top_line(protocol.record(None, 0)).startswith("**Old protocol")


def test_width_drops_name_a_wider_cell_far_below_a_narrower_one():
  st = {("dot", 16, 64, 4): (1.0, None, 1), ("dot", 32, 64, 4): (0.9, None, 1),
        ("dot", 64, 64, 4): (0.25, None, 1), ("softmax", 16, 64, 4): (0.2, None, 1),
        ("softmax", 64, 64, 4): (1.0, None, 1), ("dot", 64, 64, 8): (0.1, None, 1)}
  assert mqar_page.width_drops(st) == [("dot", 64, 4, 16, 1.0, 64, 0.25)]
  st[("dot", 64, 64, 4)] = (1.0 - mqar_page.DROP + 0.01, None, 1)
  assert mqar_page.width_drops(st) == []


def test_collect_from_the_ledger_alone_gives_the_workdirs_page(smoke, tmp_path):
  """A fresh clone has the committed ledger and no workdirs: the backfill of the smoke
  run's workdirs, read alone, gives the page data the workdirs give (the runs, rates,
  CPU and wall totals); no training."""
  root, _ = smoke
  ledger = str(tmp_path / "smoke_runs.json")
  assert mqar.backfill("smoke", root, TINY, ledger=ledger) == len(mqar.PRESETS["smoke"]["lrs"])
  assert mqar.backfill("smoke", root, TINY, ledger=ledger) == 0      # idempotent
  from_workdirs = mqar.page_data("smoke", root, TINY, ledger=None)
  alone = mqar.page_data("smoke", str(tmp_path / "fresh_clone"), TINY, ledger=ledger)
  for k in ("results", "lrs", "treatment", "settings", "config", "invocations", "jobs"):
    assert alone[k] == from_workdirs[k], k
  for k in ("cpu_seconds", "wall_seconds"):
    assert alone[k] == pytest.approx(from_workdirs[k]), k
  assert alone["runs_cpu_seconds"] == pytest.approx(
      sum(r["cpu_seconds"] for r in alone["results"]))
  assert "ledger" in alone["cpu_counted"]


def test_a_study_with_a_ledger_records_each_run_and_resumes_from_it(tmp_path, monkeypatch):
  """Each finished run goes to the ledger with its process and host; a later study
  with no workdirs (another session) trains nothing the ledger holds."""
  ledger = str(tmp_path / "runs.json")
  trained = []

  def fake(preset, run, stage, root, overrides=None):
    trained.append(run)
    config = mqar.make_config(preset, run, overrides)
    return dict(run.__dict__, stage=stage, status="ok", accuracy=0.75, cpu_seconds=2.0,
                config=mqar.sweep.config_fingerprint(config), date="2026-12-01",
                pairs=run.pairs)

  monkeypatch.setattr(mqar, "run_one", fake)
  monkeypatch.setattr(mqar.sweep, "gauge", lambda: None)
  kw = dict(names=["softmax"], overrides=TINY, subprocess_run=False, log=lambda s: None,
            ledger=ledger)
  data = mqar.study("smoke", str(tmp_path / "a"), **kw)
  book = mqar.mqar_ledger.read(ledger)
  assert len(trained) == len(book["runs"]) == len(data["results"]) >= 1
  assert {e["process"] for e in book["runs"]} == {p["id"] for p in book["processes"]}
  assert all(e["host"] and e["cpu_seconds"] == 2.0 for e in book["runs"])
  assert len(book["invocations"]) == 1 and data["invocations"] == 1
  assert data["cpu_seconds"] >= data["runs_cpu_seconds"] == 2.0 * len(trained)
  again = mqar.study("smoke", str(tmp_path / "b"), **kw)       # a fresh clone
  assert len(trained) == len(book["runs"])                   # nothing trained again
  assert again["results"] == data["results"] and again["invocations"] == 2


def test_the_plot_legend_names_a_variant_that_ran_in_a_later_panel_only(monkeypatch, tmp_path):
  """The legend gathers every panel's lines: a variant whose runs so far are all in the
  second panel is still named (it once read the first panel's lines alone)."""
  from studies.core import plots
  from studies.recall import page as mqar_page
  got = {}
  monkeypatch.setattr(plots, "save", lambda fig, path, **kw: got.setdefault("fig", fig))
  row = lambda v, t, P: {"variant": v, "width": 64, "length": t, "pairs": P, "lr": 1e-3,
                         "seed": 1, "accuracy": 0.5}
  data = {"settings": {"panels": [[64, 4], [512, 64]], "widths": [64, 128]},
          "treatment": {"softmax": "train", "gla": "train"},
          "lrs": {"softmax": 1e-3, "gla": 1e-3},
          "results": [row("softmax", 64, 4), row("gla", 512, 64)]}
  mqar_page.plot(data, str(tmp_path / "mqar.png"))
  try:
    (legend,) = got["fig"].legends
    assert [t.get_text() for t in legend.get_texts()] == ["softmax", "gla"]
  finally:                      # the stand-in save did not close it: no figure left open
    plots.pyplot().close(got["fig"])


def test_a_stop_file_ends_a_variant_at_a_run_boundary(tmp_path, monkeypatch):
  """`touch workdirs/STOP`: a variant's child process starts no other run."""
  from studies.core import runs
  stop = tmp_path / "STOP"
  stop.touch()
  monkeypatch.setenv("ATTNLAB_STOP_FILE", str(stop))
  called = []
  monkeypatch.setattr(mqar, "run_one", lambda *a, **k: called.append(a))
  with pytest.raises(runs.StopRequested):
    mqar.run_variant("smoke", "softmax", str(tmp_path / "root"), ("lr",), ledger=None)
  assert called == []
