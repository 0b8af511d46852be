"""The length study's n-gram floors (studies/length/floors.py): Witten-Bell is a
distribution over the 256 bytes at every order, the context ends at the window's
start, padding is never counted, a hand example's figure; the floors of a tiny
corpus through the runs' own batches; the page's section and the reading's rule."""
import dataclasses
import os

import numpy as np
import pytest

from studies.length import floors, presets, results

CPU = presets.preset("cpu")


def _batches(seed=0, n=3, B=4, T=64):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    y = rng.integers(0, 8, size=(B, T))            # a small alphabet: contexts repeat
    w = np.ones((B, T), np.float32)
    w[0, T // 2:] = 0                               # a padded tail, as a short document's
    out.append({"y": np.where(w > 0, y, 0), "w": w})
  return out


def test_witten_bell_is_a_distribution_cut_at_the_window_start():
  tables = floors.fit(_batches())
  prefix = _batches()[1]["y"][2, :5]                # a context seen in training
  y = np.concatenate([np.tile(prefix, (256, 1)), np.arange(256)[:, None]], axis=1)
  p = floors.probs(tables, y)
  for n in floors.ORDERS:                           # P_n(. | prefix) sums to 1
    assert p[n][:, 5].sum() == pytest.approx(1.0, abs=1e-12)
    assert (p[n] > 0).all()
    # the first byte of a window has no context: every order gives the 1-gram's figure
    assert p[n][:, 0] == pytest.approx(p[1][:, 0])
  # a seen context makes its continuation likelier at the higher order
  seen = int(_batches()[1]["y"][2, 5])
  assert p[6][seen, 5] > p[1][seen, 5]
  # padding (weight 0) is never counted: an all-padding batch changes nothing
  pad = {"y": np.full((2, 64), 7), "w": np.zeros((2, 64), np.float32)}
  again = floors.fit(_batches() + [pad])
  for n in floors.ORDERS:
    for a, b in zip(tables[n], again[n]):
      np.testing.assert_array_equal(a, b)


def test_witten_bell_hand_example():
  # "ab" repeated: 1-gram a, b at 1/2 (T = 2 distinct, N bytes); 2-gram P(b | a):
  # c(ab) = N/2, T(a) = 1, so (N/2 + P1(b)) / (N/2 + 1)
  N = 64
  y = np.array([[0, 1] * (N // 2)])
  t = floors.fit([{"y": y, "w": np.ones(y.shape)}], orders=(1, 2))
  p1b = (N / 2 + 2 / 256) / (N + 2)
  assert floors.probs(t, np.array([[0, 1]]))[1][0, 1] == pytest.approx(p1b)
  p2 = floors.probs(t, np.array([[0, 1]]))[2][0, 1]
  assert p2 == pytest.approx((N / 2 - 0 + p1b) / (N / 2 + 1))


def test_floors_of_a_tiny_corpus_through_the_runs_batches(tmp_path, monkeypatch):
  root = tmp_path / "data" / "pycode"
  root.mkdir(parents=True)
  for i in range(6):
    (root / f"f{i}.py").write_text("x = 1\n" * 60)     # one 6-byte period in every file
  tiny = dataclasses.replace(CPU, name="tiny", lengths=(32,), tokens_per_step=64, steps=4,
                             warmup=1, eval_tokens=128)
  monkeypatch.setitem(presets.PRESETS, "tiny", tiny)
  f = floors.measure(tiny, seeds=[1, 2], data_dir=str(tmp_path / "data"),
                     log=lambda m: None)
  s = floors.summary(f, 32)
  assert sorted(s) == list(floors.ORDERS) and s[1]["seeds"] == 2
  # periodic text: each order is no worse than the one below it, the 1-gram far above
  assert s[1]["bits"] > s[2]["bits"] >= s[6]["bits"] - 1e-9 and s[1]["bits"] > 2
  assert all(v["lo"] <= v["bits"] <= v["hi"] for v in s.values())
  k, best, b = floors.place(f, 32, s[3]["bits"] - 1e-6)
  assert k >= 3 and b == min(v["bits"] for v in s.values())
  assert floors.place(f, 32, 99.0)[0] == 0 and floors.place(f, 4096, 1.0) is None


def _fixture(best: float, L="1024"):
  """Floors at L of one seed, the 6-gram's the best."""
  fig = lambda b: {"bits_per_byte": b, "recall_bits": b - 0.5, "rest_bits": b + 0.5,
                   "recall_fraction": 0.4, "bytes": 100}
  return {"preset": "cpu", "orders": list(floors.ORDERS), "seeds": [1],
          "tokens_per_run": CPU.tokens_per_run, "recall_n": 4,
          "run": {"command": "python -m scripts.lm_length --floors", "date": "2026-12-08"},
          "cells": {L: {"1": {str(n): fig(best + 0.4 * (6 - n)) for n in floors.ORDERS}}}}


def test_the_page_places_each_row_and_the_reading_says_what_a_gap_measures():
  ref = {"test": 2.05, "recall_bits": 1.5, "rest_bits": 2.5, "seeds": {}}
  d = {"preset": "cpu", "lengths": [1024, 4096], "rows": ["flash", "gated_deltanet"],
       "cells": {"flash": {"1024": ref, "4096": {}},
                 "gated_deltanet": {"1024": {"test": 1.1}, "4096": {}}},
       "verdicts": {"by": {}, "controls": {}}, "rates": {}, "split": {}}
  d["floors"] = _fixture(best=1.2)        # floors 1.2 (6-gram) ... 3.2 (1-gram)
  text = "\n".join(floors.floor_lines(d))
  assert "| 6-gram | 1.200 (1.200–1.200); 0.700 / 1.700 |" in text
  assert "At 1,024: `flash` (2.050) beats the 3-gram floor, not the 4-gram's; " \
         "`gated_deltanet` (1.100) beats the 6-gram floor." in text
  said = " ".join(results.reading(CPU, d))
  assert "At 1,024 bytes flash (2.050 bits/byte) beats the 3-gram floor, not the " \
         "4-gram's" in said and "below that floor: `gated_deltanet`" in said
  assert "not yet what attention does with a 1,024-byte window" in said
  d["floors"] = _fixture(best=2.1)
  said = " ".join(results.reading(CPU, d))
  assert "At 1,024 bytes flash (2.050 bits/byte) is below every n-gram floor of its own " \
         "training bytes (the best, the 6-gram's, 2.100)" in said
  assert "learning speed" not in said and "not yet what attention" not in said
  d["floors"] = None
  assert "Not measured yet" in "\n".join(floors.floor_lines(d))
  assert "n-gram" not in " ".join(results.reading(CPU, d))


def test_longer_runs_carry_the_cpu_rates_seed_major_and_the_page_compares(tmp_path,
                                                                          monkeypatch):
  from studies.length import ledger, longer, page, runner
  x4 = presets.preset("cpu_x4")
  assert (x4.steps, x4.lengths, x4.tokens_per_run) == (4 * CPU.steps, (1024,),
                                                      4 * CPU.tokens_per_run)
  # the cpu sweeps: flash and gated_deltanet chosen, the control's still open
  cpu_rates = {"flash": 3e-3, "gated_deltanet": 9e-3}
  monkeypatch.setattr(runner, "rate_state", lambda p, got, r: {
      "chosen": cpu_rates.get(r)})
  assert longer.carried({}) == cpu_rates
  want = [("flash", 3e-3, 1), ("gated_deltanet", 9e-3, 1), ("flash", 3e-3, 2),
          ("gated_deltanet", 9e-3, 2)]
  got = longer.due({}, {}, seeds=(1, 2))
  assert [(r["row"], r["lr"], r["seed"]) for r in got] == want
  assert {r["length"] for r in got} == {1024}
  done = {("flash", 1024, 3e-3, 1): {}}
  assert [(r["row"], r["seed"]) for r in longer.due({}, done)] == [("gated_deltanet", 1)]
  # the runner trains them under cpu_x4 (its own ledger and folder), one at a time,
  # and stops at a failed run rather than retrying it
  calls = []
  monkeypatch.setattr(ledger, "runs_of", lambda path, preset: {})
  n = longer.run(str(tmp_path / "wd"), str(tmp_path), seeds=(1,), log=lambda m: None,
                 launcher=lambda p, batch, **k: calls.append((p.name, batch, k["path"])))
  assert n == 1 and calls[0][0] == "cpu_x4" and calls[0][1][0]["row"] == "flash"
  assert calls[0][2].endswith(os.path.join("cpu_x4", "cpu_x4_runs.json"))
  # the page's section: each row at both budgets (same seeds), among its floors, and
  # the gap's change by rule
  d = {"select_at": 1024, "tokens_per_run": CPU.tokens_per_run,
       "cells": {"flash": {"1024": {"seeds": {"1": {"test": 3.5}}}},
                 "gated_deltanet": {"1024": {"seeds": {"1": {"test": 2.0}}}}}}
  assert "Not run yet: `python -m scripts.lm_length --longer`" in "\n".join(longer.lines(
      dict(d, longer={"rows": {}, "steps": x4.steps, "tokens_per_run": x4.tokens_per_run})))
  row = lambda lr, t: {"lr": lr, "seeds": {"1": t}, "test": t, "recall_bits": t,
                       "rest_bits": t, "late_drop": 0.02}
  fl = _fixture(best=1.2)
  d["longer"] = {"rows": {"flash": row(3e-3, 1.9), "gated_deltanet": row(9e-3, 1.7)},
                 "floors": fl, "steps": x4.steps, "tokens_per_run": x4.tokens_per_run}
  d["longer"].update(runs=2, cpu_seconds=3000.0)
  text = "\n".join(longer.lines(d))
  assert "Spent: 50 CPU-minutes over 2 runs (cpu_x4/cpu_x4_runs.json)" in text
  assert "| `flash` | 0.003 | 1 | 3.500 | 1.900 | +0.020 | beats the 4-gram floor, not " \
         "the 5-gram's |" in text
  assert "`gated_deltanet`'s gap to flash (seed 1) shrinks with 4x the bytes: -1.500 → " \
         "-0.200 bits/byte (exploratory)." in text
  # the control's share of gated_deltanet's gap, at both budgets
  d["cells"]["flash_gdn_layer"] = {"1024": {"seeds": {"1": {"test": 2.75}}}}
  d["longer"]["rows"]["flash_gdn_layer"] = row(9e-3, 1.8)
  assert "`flash_gdn_layer` (flash inside `gated_deltanet`'s layer) carries 50% of " \
         "`gated_deltanet`'s gap to flash with 4x the bytes, against 50% at 3,014,656" \
      in "\n".join(longer.lines(d))
  del d["longer"]["rows"]["flash_gdn_layer"]
  d["longer"]["rows"]["gated_deltanet"] = row(9e-3, 2.0)
  assert "turns with 4x the bytes: -1.500 → +0.100" in "\n".join(longer.lines(d))
  assert "longer" in dir(page)
