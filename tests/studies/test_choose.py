"""studies.choose.page (results/choose/): the decision page renders from fixture JSON,
each quality cell equal to its source JSON's and under a column naming its source, a
missing page reads "not run" and a refusal "cannot" (never a blank), and a tiny cost run
records every cell it was asked for (the answers' rules: test_choose_answers.py)."""
import json
import os

import pytest

from studies.choose import cells, page as choose, cost as choose_cost, sources as S


def small_gauge(monkeypatch):
  """The study's matmul gauge (timing.matmul_peak, 8 products of 1024-square: ~2 GFLOP
  each, at the start and at the end) at 128: the test checks that the gauge is
  recorded and paged, not this machine's speed."""
  from studies.core import timing
  real = timing.matmul_peak
  monkeypatch.setattr(timing, "matmul_peak", lambda n=None, *a, **k: real(128, *a, **k))

NAMES = ["softmax", "flash", "linear", "linformer", "flash_pallas", "gla"]
SHAKE = next(s for s in S.SOURCES if s.key == "shakespeare")
MQAR = next(s for s in S.SOURCES if s.key == "mqar 512")


def _row(v, q=None, status="ok", reason=""):
  r = {"variant": v, "task": "shakespeare", "preset": "cpu", "status": status}
  if status == "ok":
    r["eval"] = {"eval_loss": q}
  else:
    r["reason"] = reason
  return r


def _fixture(root, linear=(1.95, 1.94, 1.96), gla=(1.70, 1.71, 1.69)):
  """results/variants_shakespeare (softmax, flash, linear, gla over 3 seeds; linformer
  refused; flash_pallas skipped) and results/variants_mqar at (64, 512, 64); no other
  page."""
  d = root / "variants_shakespeare"
  d.mkdir(parents=True)
  figs = {"softmax": (1.83, 1.84, 1.82), "flash": (1.83, 1.84, 1.82), "linear": linear,
          "gla": gla}
  rows = [_row(v, q[0]) for v, q in figs.items()]
  rows += [_row("linformer", status="refused", reason="cannot be causal"),
           _row("flash_pallas", status="skipped", reason="interpret mode off a GPU")]
  (d / "results.json").write_text(json.dumps(rows))
  (d / "seeds.json").write_text(json.dumps(
      [{"variant": v, "task": "shakespeare", "preset": "cpu", "seed": i, "quality": x}
       for v, q in figs.items() for i, x in enumerate(q) if i]))
  acc = {"softmax": (0.99, 1.0, 0.995), "linear": (0.93, 0.95, 0.94),
         "gla": (0.3, 0.35, 0.32)}
  _mqar_page(root / "variants_mqar", (64, 512, 64), acc)
  return figs, acc


def _mqar_page(m, cell, acc):
  """An MQAR page's results.json in folder `m`: {variant: seed accuracies} at one
  (width, tokens, pairs) cell, flash softmax's own math, linformer refused."""
  m.mkdir()
  w, t, P = cell
  res = [{"variant": v, "width": w, "length": t, "pairs": P, "lr": 0.001, "seed": i,
          "stage": "seeds", "status": "ok", "accuracy": x}
         for v, q in acc.items() for i, x in enumerate(q)]
  (m / "results.json").write_text(json.dumps({
      "settings": {"widths": [w], "panels": [[t, P, 1500]], "seeded": list(acc),
                   "seed_cells": [[w, t, P]], "seeds": [0, 1, 2]},
      "treatment": dict({v: "train" for v in acc}, flash=["same", "blockwise softmax"],
                        linformer=["refused", "cannot be causal"]),
      "lrs": {v: 0.001 for v in acc}, "results": res,
      "protocol": {"version": 0}}))


def _group(task, preset, rows, out):
  """The fixture's seed table: seeds.json beside each row's own run (seed 0), no
  config fingerprints."""
  by = {}
  for s in json.load(open(os.path.join(out, "seeds.json"))):
    by.setdefault(s["variant"], {0: rows[s["variant"]]["eval"]["eval_loss"]})[
        s["seed"]] = s["quality"]
  return by


def _quality(root):
  rates = lambda src, rows, out: dict(lrs=None, base=None, unlike={})
  q = {s.key: S.variants_cells(s, str(root), NAMES, _group, rates)
       for s in S.SOURCES if s.kind == S.VARIANTS}
  q.update({s.key: S.mqar_cells(s, str(root), NAMES) for s in S.SOURCES
            if s.kind == S.RECALL_PAGE})
  return q


def _cost():
  cell = lambda t, b: {"status": "ok", "tokens_per_s": t, "peak_bytes": b}
  skip = {"status": "skipped (time)", "why": "predicted too long"}
  return {
      "run": {"command": "python -m scripts.choose", "date": "2026-01-01",
              "host": "test host", "jax_version": "0"},
      "setup": {"batch": 1, "heads": 2, "head_dim": 32, "lens": [1024, 4096],
                "long_len": 8192, "rounds": 3, "cell_limit_s": 60, "mem_budget_gib": 6,
                "decode_context": 4096, "decode_steps": 16, "decode_rounds": 3},
      "peak": [{"flop_per_s": 1e11, "n": 1024, "dtype": "float32", "runs": 7,
                "statistic": "median"}, {"flop_per_s": 1.2e11}],
      "seconds": 60.0,
      "train": {
          "softmax": {"causal": True, "cells": {"1024": cell(1000.0, 2 ** 24),
                                                "4096": skip}},
          "flash": {"causal": True, "cells": {"1024": cell(3000.0, 2 ** 22),
                                              "4096": cell(700.0, 2 ** 23)}},
          "linear": {"causal": True, "cells": {"1024": cell(9000.0, 2 ** 21),
                                               "4096": cell(8000.0, 2 ** 22),
                                               "8192": cell(7000.0, 2 ** 23)}},
          "gla": {"causal": True, "cells": {"1024": cell(5000.0, 2 ** 21),
                                            "4096": cell(4000.0, 2 ** 22),
                                            "8192": cell(3500.0, 2 ** 22)}}},
      "decode": {
          "softmax": {"status": "ok", "us_per_token": 50.0,
                      "state_bytes": {"1024": 2 ** 19, "4096": 2 ** 21}},
          "linear": {"status": "ok", "us_per_token": 10.0,
                     "state_bytes": {"1024": 8448, "4096": 8448}},
          "gla": {"status": "ok", "us_per_token": 12.0,
                  "state_bytes": {"1024": 8192, "4096": 8192}},
          "linformer": {"status": "cannot", "why": "no decode state"}},
  }


def _table(lines, heading):
  i = lines.index(heading)
  rows = [l for l in lines[i:] if l.startswith("| ")]
  body, end = [], False
  for l in lines[i + 1:]:
    if l.startswith("|"):
      body.append(l)
      end = True
    elif end:
      break
  return body


def _cells(line):
  return [c.strip() for c in line.strip().strip("|").split("|")]


def test_every_cell_traces_to_its_source_and_none_is_blank(tmp_path):
  figs, acc = _fixture(tmp_path)
  q = _quality(tmp_path)
  mean = lambda xs: sum(xs) / len(xs)
  for n, xs in figs.items():                         # values equal the source JSON's
    c = q["shakespeare"][n]
    assert c.source == str(tmp_path / "variants_shakespeare" / "results.json")
    assert c.value == pytest.approx(mean(xs)) and c.seeds == 3
    if n != "softmax":
      assert c.diff == pytest.approx(mean(xs) - mean(figs["softmax"]))
  assert q["mqar 512"]["linear"].value == pytest.approx(mean(acc["linear"]))
  assert q["shakespeare"]["linformer"].status == "cannot"
  assert q["shakespeare"]["flash_pallas"].status == "not run"
  assert q["mqar 512"]["flash"].status == "not run"         # softmax's own math
  assert q["mqar 512"]["linformer"].status == "cannot"
  for s in S.SOURCES:                                # no page: every cell "not run"
    if s.page not in ("variants_shakespeare", "variants_mqar"):
      assert {c.status for c in q[s.key].values()} == {"not run"}
  status = {s.key: S.protocol_status(s, str(tmp_path))[1] for s in S.SOURCES}
  lines = choose.page_lines(q, _cost(), status, NAMES, answers=[])
  table = _table(lines, "## Short sequences: quality against the exact reference")
  head = _cells(table[0])
  col = {s.key: i for i, s in enumerate(choose.short_sources(), start=2)}
  assert "mqar 512" not in col and len(head) == 2 + len(col)   # superseded for the decision
  assert "[shakespeare](../variants_shakespeare/README.md)" in head[col["shakespeare"]]
  rows = {_cells(l)[1]: _cells(l) for l in table[2:]}
  assert set(rows) == {f"`{n}`" for n in NAMES}
  for cells in rows.values():
    assert all(cells), cells                         # never a blank
    assert cells[col["copy"]] == "not run"
  lin = rows["`linear`"][col["shakespeare"]]
  assert lin.startswith(f"Δ {S.fmt_diff(SHAKE, mean(figs['linear']) - mean(figs['softmax']))}")
  assert lin.endswith("3 seeds, worse")
  assert rows["`linformer`"][col["shakespeare"]] == "cannot"
  assert rows["`softmax`"][col["shakespeare"]] == "reference: 1.830 (3 seeds)"
  cost = _table(lines, "## Appendix: one attention op, not a model (CPU)")
  crow = {_cells(l)[1]: _cells(l) for l in cost[2:]}
  assert crow["`flash`"][2:4] == ["3,000", "700"]
  assert crow["`softmax`"][3] == "skipped (time)"
  assert all(all(c) for c in crow.values())
  assert "variants_mqar/" not in "\n".join(lines)
  assert "- [copy](../variants_copy/README.md): no page" in "\n".join(lines)
  # no archived page is a column (results/archive/README.md)
  assert not any(x in "\n".join(lines) for x in ("variants_mqar_short",
                                                   "variants_listops_cpu_long"))


def test_write_page_reads_the_json_and_drops_the_old_plots(tmp_path, monkeypatch):
  """The page answers each question under its own heading; the old page's Pareto plots
  (64-token quality against one attention op's CPU speed) leave with it."""
  _fixture(tmp_path)
  out = tmp_path / "choose"
  out.mkdir()
  (out / "cost.json").write_text(json.dumps(_cost()))
  (out / "pareto_1k.png").write_bytes(b"old")
  monkeypatch.setattr(S, "seed_runs", _group)
  monkeypatch.setattr(S, "_unlike", lambda src, rows, o: dict(lrs=None, base=None,
                                                              unlike={}))
  choose.write_page(str(out), str(tmp_path), NAMES)
  page = (out / "README.md").read_text()
  assert not (out / "pareto_1k.png").exists() and "pareto" not in page
  for h in ("### A causal LM at 1,024 tokens", "### A causal LM at 4,096 tokens",
            "### Recall at a fixed decode budget", "### Short sequences (≤ 258 tokens)"):
    assert h in page
  assert page.count("*What would change this answer:*") == 4


def test_a_tiny_cost_run_records_every_cell(monkeypatch):
  """Two variants cover every kind of cell: softmax (quadratic memory: the short
  length only; a decode state: timed) and linformer (linear memory: the long length
  too; no decode state: "cannot"). Each more variant compiles a training program per
  length and a decode program."""
  small_gauge(monkeypatch)     # here and in the decode costs' kv_cache run
  s = choose_cost.CostSetup(heads=1, head_dim=8, lens=(32,), long_len=64, rounds=1,
                            decode_context=32, decode_steps=2, decode_rounds=1)
  rec = choose_cost.cost_run(s, "test", names=["softmax", "linformer"], log=lambda m: None)
  t = rec["train"]
  assert set(t["softmax"]["cells"]) == {32} and set(t["linformer"]["cells"]) == {32, 64}
  assert all(c["status"] == "ok" and c["tokens_per_s"] > 0 and c["peak_bytes"] > 0
             for v in t.values() for c in v["cells"].values())
  assert rec["decode"]["linformer"]["status"] == "cannot"
  assert rec["decode"]["softmax"]["status"] == "ok"
  assert rec["decode"]["softmax"]["us_per_token"] > 0
  assert rec["peak"][0]["flop_per_s"] > 0


def test_a_page_partway_through_its_rerun_is_provisional_on_the_decision_page(tmp_path):
  """A source page under the protocol with variants still to train says so on the
  decision page (they will add comparisons to Holm's correction); complete, it does
  not."""
  from studies.core import protocol
  src = next(s for s in S.SOURCES if s.key == "listops")
  page = tmp_path / src.page
  page.mkdir()
  (page / "protocol.json").write_text(json.dumps({"version": protocol.VERSION}))
  rows = [{"variant": "softmax", "status": "ok"},
          {"variant": "mla", "status": "skipped", "pending": True}]
  (page / "results.json").write_text(json.dumps(rows))
  v, words = S.protocol_status(src, str(tmp_path))
  assert v == protocol.VERSION and "partway through its re-run: 1 variant(s)" in words
  assert "(`mla`)" in words
  (page / "results.json").write_text(json.dumps(rows[:1]))
  assert S.protocol_status(src, str(tmp_path))[1] == f"protocol version {protocol.VERSION}"


def test_a_protocol_page_is_read_under_the_protocols_overrides(tmp_path):
  """The copy page's protocol runs were trained under protocol.with_overrides (the
  gated variants' layers): the decision page reads its seed table under the same
  config, so each cell has the page's 5 reporting seeds and its verdict, not the row's
  single run."""
  from studies.core import protocol
  from studies.variants import seeds as vs
  out = tmp_path / "variants_copy"
  out.mkdir()
  protocol.write_page_record(str(out), "variants_copy", protocol.VERSION)
  ov = protocol.with_overrides("copy", None)
  seeds = protocol.reporting_seeds("variants_copy")
  figs = {"softmax": [1.0] * len(seeds), "gla": [0.70, 0.72, 0.69, 0.71, 0.70]}
  runs = [{"variant": v, "task": "copy", "preset": "cpu", "seed": s, "quality": q,
           "config": min(vs.fingerprints(vs.make_config("copy", "cpu", v,
                                                        {**ov, "seed": s}))),
           "protocol": protocol.VERSION}
          for v, qs in figs.items() for s, q in zip(seeds, qs)]
  (out / "seeds.json").write_text(json.dumps(runs))
  key = vs.METRIC["copy"][0]
  rows = [dict(r, status="ok", eval={key: r["quality"]}) for r in runs
          if r["seed"] == seeds[0]]
  (out / "results.json").write_text(json.dumps(rows))
  src = next(s for s in S.SOURCES if s.page == "variants_copy")
  cells = S.variants_cells(src, str(tmp_path), ["softmax", "gla"])
  assert cells["gla"].seeds == len(seeds) and cells["softmax"].seeds == len(seeds), cells
  assert cells["gla"].word == "worse", cells["gla"]


def test_a_verdict_on_a_model_that_differs_besides_its_attention_says_how(tmp_path):
  """A better or worse cell of a row with more parameters than softmax's says so in
  brackets (mnist's mla: +35% parameters and its own RoPE); the page and its summary
  cite it with the cell."""
  _fixture(tmp_path)
  path = tmp_path / "variants_shakespeare" / "results.json"
  rows = json.loads(path.read_text())
  for r in rows:
    r["params"] = {"gla": 1200, "linear": 1000}.get(r["variant"], 1000)
  path.write_text(json.dumps(rows))
  q = _quality(tmp_path)
  gla, lin = q["shakespeare"]["gla"], q["shakespeare"]["linear"]
  assert (gla.word, gla.differs, lin.differs) == ("better", "+20% parameters", "")
  assert cells.quality_text(SHAKE, gla).endswith("3 seeds, better (+20% parameters)")
  assert cells.quality_text(SHAKE, lin).endswith("3 seeds, worse")
  said = choose.A.short_answer(q, choose.short_sources(), str(tmp_path)).lead
  assert "`gla` on tasks like shakespeare: [shakespeare: Δ" in said
  assert "better (+20% parameters" in said
