"""scripts/benchmark.py and scripts/benchmark_gpu.py: the measuring logic and a smoke run.

Timings are never asserted (the CI machine is shared); what is tested is that cases
are recorded or refused for the right reason and that every section reaches the page.
"""
import json
import math
import statistics

import jax
import jax.numpy as jnp
import pytest

from scripts import benchmark as B


def test_slope_recovers_the_power_law():
  pts = {N: 3e-6 * N ** 1.5 for N in (256, 1024, 4096, 16384)}
  assert B.slope(pts) == pytest.approx(1.5, abs=1e-9)
  assert B.slope(pts, lo=1024, hi=4096) == pytest.approx(1.5, abs=1e-9)
  assert math.isnan(B.slope(pts, lo=16384))      # one point: no slope
  assert math.isnan(B.slope({256: 1.0, 512: None}))


def test_cases_over_the_memory_budget_or_time_limit_are_recorded_not_run():
  p = B.PRESETS["smoke"]
  f = jax.jit(lambda x: jnp.sin(x) @ x)
  x = jnp.ones((64, 64))
  c = B.measure_case(f, (x,), p, budget_bytes=1, limit_s=60, predicted_s=None)
  assert c["status"] == "oom" and "XLA plans" in c["why"]
  assert c["memory"]["argument_bytes"] == 64 * 64 * 4
  c = B.measure_case(f, (x,), p, budget_bytes=2 ** 30, limit_s=60, predicted_s=20.0)
  assert c["status"] == "time limit" and "predicted 20.0 s" in c["why"]
  c = B.measure_case(f, (x,), p, budget_bytes=2 ** 30, limit_s=60, predicted_s=None)
  assert c["status"] == "ok" and len(c["times"]) == p.runs
  assert c["seconds"] == sorted(c["times"])[p.runs // 2]


def test_smoke_run_writes_every_section(tmp_path):
  out = str(tmp_path)
  B.main(["--preset=smoke", "--variants=linear", f"--out={out}"])
  sweep = json.load(open(tmp_path / "sweep.json"))
  assert set(sweep) == {"linear"}
  for mode in ("fwd", "fwd_bwd"):
    cases = sweep["linear"][mode]
    assert all(c["status"] == "ok" and c["flops"] > 0 for c in cases.values())
    assert math.isfinite(sweep["linear"][mode + "_slope"])
  dec = json.load(open(tmp_path / "decode.json"))
  assert set(dec) == set(B.DECODE_MODES)
  assert all(isinstance(t, float) and t > 0 for m in dec.values() for t in m.values())
  tg = json.load(open(tmp_path / "targets.json"))
  assert tg["exact"]["flash_vs_xla"] > 0
  assert tg["memory"]["flash"]["temp_bytes"] < tg["memory"]["softmax"]["temp_bytes"]
  assert set(tg["tiles"]["seconds"]) == {c[0] for c in B.TILE_CHOICES}
  gen = json.load(open(tmp_path / "generation.json"))
  assert gen["ratio"] > 1   # even a one-layer 7x7 model: RNN form beats recompute
  page = (tmp_path / "README.md").read_text()
  for want in ("## The CPU targets", "(a) flash forward", "(e) MNIST generation",
               "### What bounds these figures", "### flash tile choices",
               "## Every variant against N", "| linear | yes |", "## Decode",
               "## MNIST generation", "smoke preset"):
    assert want in page, want
  (tmp_path / "README.md").unlink()
  B.main(["--page_only", f"--out={out}"])     # the page comes back from the JSONs alone
  assert (tmp_path / "README.md").read_text() == page


def test_unknown_variant_or_section_is_refused(tmp_path):
  with pytest.raises(Exception, match="valid names are"):
    B.main(["--preset=smoke", "--variants=nope", f"--out={tmp_path}"])
  with pytest.raises(SystemExit, match="unknown"):
    B.main(["--preset=smoke", "--sections=sweep,bogus", f"--out={tmp_path}"])


def test_gpu_benchmark_dry_run_on_cpu(tmp_path):
  """The GPU script's whole path (tuning, error check, speed table, page) in Pallas
  interpret mode on tiny shapes; it refuses to run on a CPU without --dry."""
  from scripts import benchmark_gpu as G
  with pytest.raises(SystemExit, match="no GPU"):
    G.main([f"--out={tmp_path}"])
  G.main(["--dry", "--lens=32", "--head_dims=16", "--causal=true", "--tune_len=32",
          "--runs=1", f"--out={tmp_path}"])
  res = json.load(open(tmp_path / "gpu.json"))
  case = res["cases"]["D16_causal"]
  assert len(case["tuning"]["rows"]) == 2 and case["tuning"]["best_fwd"]["block_q"] in (16, 32)
  assert max(case["errors"]["flash_pallas_vs_fp32"].values()) < 0.1   # bf16 rounding
  assert isinstance(case["speed"]["32"]["flash_pallas"]["fwd"], float)
  page = (tmp_path / "gpu.md").read_text()
  assert "Dry run on a CPU" in page and res["device"] in page


def test_benchmark_train_smoke_writes_its_rows_and_section(tmp_path, prepared_data):
  """scripts/benchmark_train.py end to end on tiny shapes: one loop/bare row, the
  generation rows, the JSON and the README section between its markers."""
  from scripts import benchmark_train as bt
  d = prepared_data
  (tmp_path / "README.md").write_text("# page\n\nkept text\n")
  res = bt.main(["--preset=smoke", "--sections=train,generate", f"--data_dir={d}",
                 f"--out={tmp_path}"])
  (r,) = res["train"]["rows"]
  assert r["loop_steps_per_s"] > 0 and r["bare_steps_per_s"] > 0 and 0 < r["mfu"] < 1
  # interleaved: bare, loop, bare, ..., bare; one pair per loop interval
  k = r["rounds"]
  assert len(r["loop_intervals"]) == len(r["pair_overheads_ms"]) == k
  assert len(r["bare_rounds"]) == k + 1 and len(r["inline_intervals"]) == k
  assert r["overhead_ms"] == pytest.approx(statistics.median(r["pair_overheads_ms"]))
  lo, hi = r["overhead_ci_ms"]
  assert lo <= r["overhead_ms"] <= hi and 0 < r["ratio"] and 0 <= r["overhead_ci_coverage"] < 1
  assert 0 < r["input_cpu_ms"] < 1e3
  # host CPU per step: the loop's thread does at least the bare loop's dispatch
  assert 0 < r["bare_host_ms"] < 1e3 and 0 < r["loop_host_ms"] < 1e3
  assert r["extra_host_ms"] == pytest.approx(
      r["loop_host_ms"] - r["bare_host_ms"] + r["input_cpu_ms"])
  assert [g["batch"] for g in res["generate"]["rows"]] == [1, 2]
  saved = json.load(open(tmp_path / "train_cpu.json"))
  assert saved["train"]["rows"][0]["batch"] == 2 and saved["generate"]["machine"]["date"]
  page = (tmp_path / "README.md").read_text()
  assert "kept text" in page and page.count(bt.BEGIN) == 1 and "| softmax | float32 | 2 × 16 |" in page
  assert "CPU loop target" in page            # the target's verdict is on the page
  bt.write_page(str(tmp_path / "README.md"), bt.page(res))     # rewritten, not appended
  assert (tmp_path / "README.md").read_text().count(bt.BEGIN) == 1


def test_benchmark_train_pairs_and_median_interval():
  """The loop/bare pairing and the sign-test interval of the median, by hand."""
  from scripts import benchmark_train as bt
  # bare rounds of 100, 120, 100 ms per step around loop intervals of 111 and 112 ms
  over, ratio = bt.paired([10.0, 1e3 / 120, 10.0], [1e3 / 111, 1e3 / 112])
  assert over == pytest.approx([1.0, 2.0]) and ratio == pytest.approx([110 / 111, 110 / 112])
  # 12 samples: (x_3, x_10) covers the median with 1 - 2 P(Bin(12, 1/2) <= 2) = 96.1%
  lo, hi, cover = bt.median_interval(list(range(12, 0, -1)))
  assert (lo, hi) == (3, 10) and cover == pytest.approx(1 - 2 * 79 / 4096)
  # too few samples for 95%: the range, with its lower coverage
  assert bt.median_interval([2.0, 1.0, 3.0]) == (1.0, 3.0, pytest.approx(0.75))
  rows = [dict(variant="softmax", dtype="float32", batch=1, bare_step_ms=50.0, ratio=0.99,
               overhead_ms=0.4, overhead_ci_ms=[-0.5, 1.5], extra_host_ms=0.7),
          dict(variant="linear", dtype="float32", batch=4, bare_step_ms=110.0, ratio=0.98,
               overhead_ms=1.6, overhead_ci_ms=[0.2, 3.0], extra_host_ms=0.8),
          dict(variant="linear", dtype="float32", batch=1, bare_step_ms=10.0, ratio=0.5,
               overhead_ms=9.0, overhead_ci_ms=[8.0, 10.0], extra_host_ms=5.0)]
  v = bt.cpu_verdict(rows)
  assert "met by 1 of 2 rows (linear float32 B=4 missed)" in v        # the 10 ms step is not judged
  assert "In 0 of the 1 met" in v and "within this run's noise" in v
