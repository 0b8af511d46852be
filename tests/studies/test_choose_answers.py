"""studies.choose.answers (issue 103): each answer of the decision page from fixture JSON:
at most three choices, a row judged worse on the question's own evidence never among
them, at most 120 words before its table, every figure traced to the file it was read
from, and a GPU figure only in a GPU table."""
import json
import math
import os

from studies.choose import answers as A, answers_lm, page, sources as S
from studies.length import presets, results

CPU = presets.preset("cpu")
# the fixture's rows at each length: (gap to flash in bits/byte, train tokens/s, state KiB)
LM = {"flash": (0.0, 9000, 4096), "gated_deltanet": (-0.05, 12000, 64),
      "qwen3_next": (-0.001, 10000, 1024), "local128": (0.004, 20000, 512),
      "gpt_oss": (0.003, 11000, 2048), "linear": (0.2, 30000, 32)}
NOISE = {1: 0.0, 2: 0.01, 3: -0.01}
# the control row (flash inside gated_deltanet's layer), run only where a test asks
CONTROL = {"flash_gdn_layer": (-0.045, 8800, 4096)}


def _lm_entry(row, L, lr, seed, P=CPU, speed=1.0):
  gap, tps, kib = {**LM, **CONTROL}[row]
  tps *= speed
  c = presets.make_config(P, row, L, lr, seed)
  t = 2.0 + gap + NOISE.get(seed, 0.0)
  val = 2.0 + 0.1 * math.log10(lr / 1e-3) ** 2 + 0.01 * list({**LM, **CONTROL}).index(row)
  return dict(status="ok", preset=P.name, row=row, length=L, lr=lr, seed=seed,
              protocol=1, validation=val, config=presets.fingerprint(c, P),
              cpu_seconds=60.0, date="2026-12-07",
              test={"bits_per_byte": t, "recall_bits": 1.0 + 2 * gap,
                    "rest_bits": 3.0 + gap / 2, "recall_fraction": 0.4, "bytes": 131072},
              cost={"train_tokens_per_s": float(tps), "peak_bytes": 2 ** 27,
                    "decode_us_per_token": 500.0, "state_bytes": kib * 1024,
                    "params": 900000 if row == "gated_deltanet" else 860000})


def _lm_page(root, rows=tuple(LM), lengths=(1024, 4096)):
  got = {}
  for r in rows:
    for lr in CPU.grid:
      got[(r, 1024, lr, 0)] = _lm_entry(r, 1024, lr, 0)
    for L in lengths:
      for s in presets.SEEDS:
        got[(r, L, 1e-3, s)] = _lm_entry(r, L, 1e-3, s)
  d = json.loads(json.dumps(results.build(CPU, got)))
  d["run"] = {"host": "test host, 2 cores"}
  os.makedirs(os.path.join(root, A.LM_PAGE), exist_ok=True)
  with open(os.path.join(root, A.LM_PAGE, "results.json"), "w") as f:
    json.dump(d, f)
  return d


def _traces(a: A.Answer, quality=None):
  """Every Cite of `a` reads its value from its file (or, for a verdict cell, from the
  source page's cell) and shows in the answer's words."""
  words = a.lead + "\n".join(a.table)
  assert a.cites
  for c in a.cites:
    if c.keys[0] == A.VERDICT:
      assert quality[c.keys[1]][c.keys[2]].diff == c.value
    else:
      with open(c.path) as f:
        assert A._get(json.load(f), c.keys) == c.value, c
    assert c.text in words, c.text


def _rules(a: A.Answer):
  assert len(a.choices) <= A.MAX_CHOICES and a.words() <= A.WORDS, (a.words(), a.lead)
  assert not {c.row for c in a.choices} & set(a.worse)


def test_lm_answer_from_the_length_study(tmp_path):
  root = str(tmp_path)
  d = _lm_page(root)
  a = A.lm_answer(d, 1024, root)
  _rules(a)
  _traces(a)
  # 1. the better row with the lowest loss; 2. the fastest row not judged worse (linear,
  # the fastest of all, is worse); 3. the smallest state: gated_deltanet, already chosen
  assert [(c.row, c.when) for c in a.choices] == [
      ("gated_deltanet", "for the lowest loss"),
      ("local128", "when training throughput binds")]
  assert a.worse == ("linear",) and "Worse here: `linear`." in a.lead
  assert "layer pieces qkv_conv, qkv_silu, rms_norm, out_gate" in a.choices[0].says
  assert "+5% parameters" in a.choices[0].says
  assert a.choices[1].says.startswith("Δ +0.004 [") and "unresolved" in a.choices[1].says
  # local128 is chosen and unresolved: more seeds could judge it worse
  assert a.change.startswith("more seeds of `local128`") and "detects a gap of" in a.change
  assert "CPU (test host, 2 cores" in a.device
  assert "12,000 tokens/s (runs' median)" in a.lead
  # with an interleaved cost run over every candidate, its speeds decide and are cited
  cr = [{"row": r, "length": 1024, "tokens_per_step": 8192, "cpu_s_per_step": 1.0,
         "spread": [0.6, 0.65] if r == "flash" else [0.9, 1.1],
         "wall_s_per_step": 8192 / {"local128": 9000.0, "flash": 12000.0}.get(r, 11000.0)}
        for r in LM]
  d2 = dict(d, cost_run={"cells": cr, "rounds": 3})
  with open(os.path.join(root, A.LM_PAGE, "results.json"), "w") as f:
    json.dump(d2, f)
  b = A.lm_answer(d2, 1024, root)
  _traces(b)
  assert [c.row for c in b.choices][:2] == ["gated_deltanet", "flash"]
  assert "12,000 tokens/s (cost run)" in b.lead and "local128" not in [c.row for c in b.choices]
  assert any("| 1.00 (0.90–1.10) |" in x for x in b.table)
  # a faster median whose rounds overlap the chosen row's is no throughput choice
  for c in cr:
    c["spread"] = [0.9, 1.1]
  with open(os.path.join(root, A.LM_PAGE, "results.json"), "w") as f:
    json.dump(d2, f)
  assert [c.row for c in A.lm_answer(d2, 1024, root).choices] == ["gated_deltanet"]
  assert any("`qwen3_next`" in x and "gated_deltanet, flash" not in x for x in a.table)
  # runs that end still learning by more than the smallest judged gap: longer training
  # could reorder them (the rule after the chosen rows' own intervals); by less: silent
  from studies.choose import answers_lm
  judged = {r: by["1024"] for r, by in d["verdicts"]["by"].items()}
  d["cells"]["flash"]["1024"]["late_drop"] = 0.1
  assert answers_lm._late(d, 1024, judged) == (
      "longer training (the `gpu` preset): at 3,014,656 bytes a run, flash's train loss "
      "still fell 0.100 bits/byte over its last quarter, more than `gated_deltanet`'s gap "
      "of -0.050, so rows that learn at different speeds may reorder.")
  d["cells"]["flash"]["1024"]["late_drop"] = 0.04
  assert answers_lm._late(d, 1024, judged) == ""
  # a first choice better than flash with layer pieces flash lacks: its control row
  # (flash inside its layer), with the command that runs it
  assert answers_lm._control(d, 1024, judged, ["gated_deltanet", "local128"]) == (
      "its control row `flash_gdn_layer` (flash's model with `gated_deltanet`'s layer "
      "pieces (qkv_conv, qkv_silu, rms_norm, out_gate)), not run yet: `python -m "
      "scripts.lm_length --preset=cpu --rows=flash_gdn_layer --lengths=1024`; if it closes "
      "the gap, the gap is the layer's, not the attention's.")
  assert answers_lm._control(d, 1024, judged, ["local128"]) == ""   # not judged better
  assert answers_lm.lm_change(d, 1024, judged, ["gated_deltanet"], ()).startswith(
      "its control row ")
  assert any("`flash_gdn_layer` | control of `gated_deltanet` (flash inside its layer), "
             "not run" in x for x in a.table)
  # a study without the control row: the sentence says it is missing
  d0 = dict(d, controls={})
  assert answers_lm._control(d0, 1024, judged, ["gated_deltanet"]).startswith(
      "a control row: flash's model with `gated_deltanet`'s layer pieces")
  # the n-gram floors: flash above the best floor of its own bytes, so longer training
  # is what could reorder the rows (before the control row); below it, no such rule
  ref = d["cells"]["flash"]["1024"]["test"]
  fig = lambda b: {"bits_per_byte": b, "recall_bits": b, "rest_bits": b}
  d["floors"] = {"orders": [1, 2, 3], "cells": {"1024": {"1": {
      "1": fig(ref + 2), "2": fig(ref - 0.1), "3": fig(ref - 0.3)}}}}
  assert answers_lm.lm_change(d, 1024, judged, ["gated_deltanet"], ()) == (
      f"longer training (the `gpu` preset): at 3,014,656 bytes a run flash ({ref:.3f} "
      f"bits/byte) is above the 3-gram floor of its own training bytes ({ref - 0.3:.3f}), "
      "so this answer says which model learns byte statistics fastest, and may reorder "
      "once the rows learn past it.")
  # the exploratory longer runs at the selection length, where they ran
  lg = {"tokens_per_run": 4 * 3014656, "rows": {"flash": {"test": ref - 1.0}}}
  assert answers_lm._floor(dict(d, longer=lg, select_at=1024), 1024).endswith(
      f"learn past it (with 12.1M bytes, exploratory: `flash` {ref - 1.0:.3f}).")
  assert "12.1M" not in answers_lm._floor(dict(d, longer=lg, select_at=4096), 1024)
  row = answers_lm._floor_row(d, 1024, 1)[0]
  assert row[:2] == ["best n-gram floor (3-gram)", f"{ref - 0.3:.3f}: a count model of "
                     "the runs' own training bytes; flash beats the 1-gram floor, not the "
                     "2-gram's"] and len(row) == 10   # the table's 9 columns and the cost run's
  d["floors"]["cells"]["1024"]["1"]["3"] = fig(ref + 0.5)
  d["floors"]["cells"]["1024"]["1"]["2"] = fig(ref + 0.4)
  assert answers_lm._floor(d, 1024) == "" and answers_lm._floor(d, 4096) == ""
  assert answers_lm.lm_change(d, 1024, judged, ["gated_deltanet"], ()).startswith(
      "its control row ")


def test_the_control_row_stays_out_of_the_family_and_its_pair_reaches_the_answer(tmp_path):
  """flash inside gated_deltanet's layer (the length study's control row): its seeds
  do not change the family (Holm's count, gated_deltanet's adjusted p); gated_deltanet
  against it is an exploratory pair that the answer's choice states, and the control
  is no longer the measurement that could change the answer."""
  root = str(tmp_path)
  base = _lm_page(root)
  d = _lm_page(root, rows=tuple(LM) + tuple(CONTROL))
  assert d["verdicts"]["family"] == base["verdicts"]["family"]
  assert d["verdicts"]["by"] == base["verdicts"]["by"]
  x = d["verdicts"]["controls"]["flash_gdn_layer"]["1024"]
  assert x["row"] == "gated_deltanet" and "exploratory" in x["words"]
  assert abs(x["diff"] - (LM["gated_deltanet"][0] - CONTROL["flash_gdn_layer"][0])) < 1e-9
  a = A.lm_answer(d, 1024, root)
  _rules(a)
  _traces(a)
  assert a.choices[0].row == "gated_deltanet"
  assert "against flash inside its own layer (`flash_gdn_layer`): " in a.choices[0].says
  assert "flash_gdn_layer" not in [c.row for c in a.choices]
  assert not a.change.startswith("its control row")
  assert any(x.startswith("| `flash_gdn_layer` | 1.955, 3 seeds; control of "
                          "`gated_deltanet`: `gated_deltanet` against it ") for x in a.table)
  # the control against flash: exploratory too, in its page cell and on the gap plot
  f = d["verdicts"]["controls_vs_reference"]["flash_gdn_layer"]["1024"]
  assert f["row"] == "flash" and "exploratory" in f["words"] and f["diff"] < 0
  from studies.length import page as lm_page
  assert lm_page._cell_text(d, "flash_gdn_layer", "1024").startswith(
      "1.955 (3 seeds); against flash better (Δ −0.045 [")
  assert "gap_length.png" in lm_page.plots(d, root)
  # the length page's reading: the share of the gap the layer alone carries
  assert any(s.startswith("`flash_gdn_layer` (flash inside `gated_deltanet`'s layer) at "
                          "4,096 bytes: 1.955 bits/byte against flash's 2.000 and "
                          "`gated_deltanet`'s 1.950, so the layer alone carries 90% of")
             for s in d["reading"])


def test_the_gpu_presets_page_stays_apart_and_the_decision_page_reads_it(tmp_path):
  """The gpu preset (a lent GPU: issue 105 item 3) writes its own folder; the decision
  page shows its model-level figures in a GPU table of their own, never in a CPU
  column, and the CPU page points to it."""
  from studies.length import page as lm_page
  root = str(tmp_path)
  d = _lm_page(root)
  assert lm_page.gpu_pointer(d)[1].endswith("none has run yet.")
  assert presets.out_of("cpu") == "results/lm_length"
  assert presets.out_of("gpu") == "results/lm_length/gpu"
  G = presets.preset("gpu")
  got = {}
  for r in ("flash", "gated_deltanet", "qwen3_next"):
    for lr in G.grid:
      got[(r, G.select_at, lr, 0)] = _lm_entry(r, G.select_at, lr, 0, G, speed=100)
    for L in (4096, 16384):
      for s in presets.SEEDS:
        got[(r, L, 1e-3, s)] = _lm_entry(r, L, 1e-3, s, G, speed=100)
  g = json.loads(json.dumps(results.build(G, got)))
  g["run"] = {"device_kind": "NVIDIA H100 80GB HBM3", "host": "gpu host"}
  folder = os.path.join(root, A.LM_PAGE, "gpu")
  os.makedirs(folder)
  with open(os.path.join(folder, "results.json"), "w") as f:
    json.dump(g, f)
  a = A.lm_answer(d, 4096, root)
  gpu, table = "\n".join(a.gpu), "\n".join(a.table)
  assert "`gpu` preset on NVIDIA H100 80GB HBM3" in gpu and "(../lm_length/gpu/README.md)" in gpu
  assert "| `gated_deltanet` | 1.950 |" in gpu and "| 1,200,000 |" in gpu   # the GPU's speed
  assert "1,200,000" not in table and "H100" not in table and "CPU" in a.device
  assert answers_lm.gpu_model_lines(root, 1024) == []       # no gpu run at 1,024
  # the CPU page points to the gpu page once it has runs
  d["gpu_page"] = {"runs": g["runs"], "lengths": g["lengths"], "device": "H100"}
  assert lm_page.gpu_pointer(d)[1].startswith("On a GPU: [the `gpu` preset's page](gpu/README.md)")


def test_lm_answer_waits_for_its_evidence(tmp_path):
  root = str(tmp_path)
  a = A.lm_answer(None, 4096, root)
  assert a.choices == () and a.lead.startswith("Not answered yet")
  assert "64 tokens need not hold at 4,096" in a.lead
  # rows without verdicts at a length are pending, never choices
  d = _lm_page(root, rows=("flash", "gated_deltanet", "linear"), lengths=(1024,))
  a = A.lm_answer(d, 4096, root)
  assert a.choices == () and a.lead.startswith("Not answered yet")
  b = A.lm_answer(d, 1024, root)
  assert set(b.pending) >= {"qwen3_next", "local128"} and b.change.startswith(
      "the rows not judged yet at 1,024")
  assert b.lead.startswith("Provisional (2 of 5 rows judged against flash here): 1. ")
  # a planned row's cell says where it stands: rate chosen, rate being chosen, or nothing
  assert answers_lm._not_yet(d, "gated_deltanet", 4096) == \
      "rate 0.001 chosen at 1,024: seeds to run"
  assert answers_lm._not_yet(d, "qwen3_next", 4096) == "not run yet"
  d["rates"]["qwen3_next"] = {"grid": {"0.001": 3.1, "0.003": 3.0}, "chosen": None,
                              "next": 0.009}
  assert answers_lm._not_yet(d, "qwen3_next", 1024) == \
      "choosing its rate at 1,024 (2 rates run, 0.009 next)"


def _point(row, width, kib, mean, status="v2"):
  seeds = {} if status == "did not train" else {
      str(s): min(1.0, max(0.0, mean + e)) for s, e in zip((1, 2, 3), (0.0, 0.004, -0.004))}
  p = {"row": row, "width": width, "state_bytes": int(kib * 1024), "status": status,
       "seeds": seeds, "mean": None if status == "did not train" else mean}
  if seeds:        # the mean's interval (memory_page.point: a bootstrap over the seeds)
    p["interval"] = [min(seeds.values()), max(seeds.values())]
  return p


MEMORY_ROWS = {"softmax": {"attention": "softmax"}, "gated_deltanet": {"attention":
               "gated_deltanet"}, "deltanet": {"attention": "deltanet"},
               "gla": {"attention": "gla"}, "linear": {"attention": "linear"},
               "softmax_int8": {"attention": "softmax", "cache_dtype": "int8"},
               "hybrid_qwen3_next": {"attention": "softmax",
                                     "layer_attention": "gated_deltanet,softmax+attn_gate"}}


def _memory_page(root, points):
  os.makedirs(os.path.join(root, A.MEMORY_PAGE), exist_ok=True)
  with open(os.path.join(root, A.MEMORY_PAGE, "results.json"), "w") as f:
    json.dump({"rows": MEMORY_ROWS, "points": points, "protocol": {"version": 2}}, f)


def test_recall_answer_walks_the_frontier_of_state_bytes(tmp_path):
  root = str(tmp_path)
  _memory_page(root, [
      _point("softmax", 64, 513.5, 0.999), _point("gated_deltanet", 64, 38, 0.3),
      _point("gated_deltanet", 128, 140, 0.92), _point("deltanet", 64, 38, 0.6),
      _point("gla", 64, 33.5, None, "did not train"), _point("linear", 128, 132, 0.5),
      _point("softmax_int8", 128, 267, 0.995)])
  a = A.recall_answer(root)
  _rules(a)
  _traces(a)
  assert [(c.row, c.when) for c in a.choices] == [
      ("deltanet", "under 64 KiB a sequence"),
      ("gated_deltanet", "for ≥ 90% recall, the smallest state"),
      ("softmax_int8", "for ≥ 99% recall, the smallest state")]
  assert "int8 KV cache" in a.choices[2].says and "267.0 KiB" in a.choices[2].says
  assert a.choices[0].says.startswith("60.0% [59.6%, 60.4%] at 38.0 KiB (width 64, ")
  # gla did not train, linear is beaten by deltanet at fewer bytes: worse here, never a
  # choice; gated_deltanet's w64 point is beaten too, but its w128 point is a choice
  assert set(a.worse) == {"gla", "linear"}
  assert "Did not train at any rate: `gla`. Beaten at no more bytes: `linear`." in a.lead
  # a wider point the plan leaves out (not rising below it) is settled: the answer is
  # not provisional for it, nor the row pending, nor beaten rows spared for it
  from studies.recall.memory_page import NOT_RISING
  _memory_page(root, [
      _point("softmax", 64, 513.5, 0.999), _point("deltanet", 64, 38, 0.6),
      _point("linear", 128, 132, 0.5), {"row": "linear", "width": 256, "state_bytes": 520 * 1024,
                                         "status": NOT_RISING, "seeds": {}, "mean": None}])
  c = A.recall_answer(root)
  assert not c.lead.startswith("Provisional") and c.pending == () and "linear" in c.worse
  table = "\n".join(a.table)
  assert "beaten by `deltanet` w64" in table and "did not train" in table
  assert any("results/kv_cache" in n for n in a.notes)
  # at 256-1,024 KiB the int8 cache and full softmax meet no fixed state; at 64-256 KiB
  # the int8 cache is absent and gated_deltanet (fixed) leads linear (fixed): no line;
  # a cache against a fixed state in one band: its line
  assert not any(n.startswith("At ") for n in a.notes)
  _memory_page(root, [_point("softmax_int8", 128, 140, 0.97),
                      _point("gated_deltanet", 128, 140, 0.92)])
  b = A.recall_answer(root)
  assert b.notes[0].startswith("At 64–256 KiB a sequence, `softmax_int8` (int8 KV cache, "
                               "97.0%) is ahead of `gated_deltanet` (fixed state, 92.0%): ")


def test_recall_answer_waits_for_version_2_points(tmp_path):
  root = str(tmp_path)
  _memory_page(root, [_point("softmax", 64, 513.5, 0.999, "v1 ledger")])
  a = A.recall_answer(root)
  assert a.choices == () and a.lead.startswith("Not answered yet") and a.pending == ("softmax",)
  # one point judged, another waiting: an answer, said to be provisional
  _memory_page(root, [_point("softmax", 64, 513.5, 0.999),
                      _point("linear", 64, 34, 0.05, "awaits seeds")])
  b = A.recall_answer(root)
  assert b.lead.startswith("Provisional, 1 of 2 points settled (1 judged): 1. `softmax`")
  # a point whose seeds split for good is settled (not "provisional"), never worse, never
  # a choice, and named with its seeds' range
  split = dict(_point("gated_deltanet", 64, 38, 0.1, "unstable"),
               seeds={"1": 0.007, "2": 0.515, "3": 0.04})
  _memory_page(root, [_point("softmax", 64, 513.5, 0.999), split])
  c = A.recall_answer(root)
  assert not c.lead.startswith("Provisional") and "gated_deltanet" not in c.worse
  assert "Seeds split, so neither chosen nor worse: `gated_deltanet` w64 (1% to 52%)." \
      in c.lead and "Not judged yet" not in c.lead
  assert [ch.row for ch in c.choices] == ["softmax"]
  # the count by kind, as the page's list of sources says it too
  pts = [_point("softmax", 64, 513.5, 0.999), split,
         _point("gla", 64, 33.5, None, "did not train"),
         _point("linear", 64, 34, 0.05, "awaits seeds")]
  assert A.settled(pts) == "3 of 4 points settled (1 judged, 1 did not train, 1 with split seeds)"


def _src(key, higher=True):
  return S.Source(key, f"variants_{key}", S.VARIANTS, "copy" if higher else "mnist",
                  "cpu", "100", S.SHORT)


def test_short_answer_never_chooses_a_row_judged_worse(tmp_path):
  a_, b_ = _src("copy"), _src("mnist", higher=False)
  cell = lambda diff, word, lo=None, hi=None, ref=1.0: S.Cell(
      "ok", "x.json", value=ref + diff, ref=ref, ref_name="softmax", diff=diff, lo=lo,
      hi=hi, seeds=3, word=word)
  q = {"copy": {"softmax": S.Cell("reference", "x.json", value=1.0, seeds=3),
                "flash": cell(0.0, "equal"), "gla": cell(-0.2, "unresolved", -0.3, -0.1),
                "deltanet": cell(0.01, "better", 0.005, 0.02),
                "linear": cell(0.05, "better", 0.01, 0.1)},
       "mnist": {"softmax": S.Cell("reference", "y.json", value=2.0, seeds=3),
                 "gla": cell(-0.2, "better", -0.3, -0.1, 2.0),
                 "linear": cell(0.3, "worse", 0.2, 0.4, 2.0),
                 "deltanet": cell(-0.1, "better", -0.2, -0.05, 2.0)}}
  a = A.short_answer(q, [a_, b_], str(tmp_path))
  _rules(a)
  _traces(a, q)
  # deltanet better on two tasks, gla on one (and wholly worse on copy); linear worse
  assert [c.row for c in a.choices] == ["deltanet", "gla", "flash"]
  assert a.worse == ("linear",)
  assert "not for copy (interval wholly worse there)" in a.choices[1].when
  assert a.change.startswith("more seeds of `gla` on copy")


def test_the_page_keeps_gpu_figures_apart_and_answers_each_question(tmp_path):
  root = str(tmp_path)
  d = _lm_page(root)
  gpu = {"device": "NVIDIA H100 80GB HBM3 (gpu)", "cases": {"D128_causal": {
      "D": 128, "causal": True, "speed": {"4096": {
          "flash_pallas": {"fwd": 0.0014, "fwd_bwd": 0.005},
          "cudnn": {"fwd": 0.0009, "fwd_bwd": 0.0025}, "B": 4, "H": 16}}}}}
  os.makedirs(tmp_path / "benchmarks")
  (tmp_path / "benchmarks" / "gpu_h100.json").write_text(json.dumps(gpu))
  _memory_page(root, [_point("softmax", 64, 513.5, 0.999)])
  a1, a4 = A.lm_answer(d, 1024, root), A.lm_answer(d, 4096, root)
  assert a1.gpu == () and a4.gpu
  gpu_rows = [x for x in a4.gpu if x.startswith("| NVIDIA")]
  assert gpu_rows and "0.50×" in gpu_rows[0]
  assert not any("NVIDIA" in x or "gpu" in x.lower() for x in a4.table)   # CPU table
  assert "GPU" not in a4.device
  q = {}
  lines = page.page_lines(q, None, {}, ["softmax", "flash"], sources=(), root=root,
                          answers=[a1, a4, A.recall_answer(root)])
  text = "\n".join(lines)
  assert text.count("*What would change this answer:*") == 3
  assert "### A causal LM at 4,096 tokens" in text and "flash_pallas speed / cuDNN's" in text
  assert "pareto" not in text
