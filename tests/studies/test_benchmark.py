"""studies.bench.benchmark, benchmark_train, benchmark_gpu and the one page writer of
results/benchmarks: the measuring logic and smoke runs.

Timings are never asserted (the CI machine is shared); what is tested is that cases
are recorded or refused for the right reason and that every section reaches the page.
"""
import json
import shutil
import math
import statistics

import jax
import jax.numpy as jnp
import pytest

from studies.bench import benchmark as B, gpu as G, page as benchmark_page, trace as tr
from studies.bench import train as bt
from studies.core import timing
from studies.bench import train_page as btp

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("studies_benchmark")


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


@pytest.fixture(scope="module")
def smoke_out(tmp_path_factory):
  """One smoke run of every section of studies.bench.benchmark (the two tests below share
  it: the second adds benchmark_train's sections beside it)."""
  out = tmp_path_factory.mktemp("bench_smoke")
  B.run(B.PRESETS["smoke"], "smoke", str(out), B.SECTIONS, ["linear"], 30.0,
        "python -m scripts.benchmark --preset=smoke", log=lambda s: None)
  return out


@pytest.mark.slow   # every section end to end, 26 s of a 2-core CI run (make test-all); the
#                     sections' parts have cheap tests below and in test_studies_*
def test_smoke_run_writes_every_section_and_the_page_comes_back(smoke_out):
  tmp_path = smoke_out
  out = str(tmp_path)
  benchmark_page.write(out)
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
  meta = json.load(open(tmp_path / "meta.json"))
  assert meta["peak"] == max(p["flop_per_s"] for p in meta["peaks"])
  assert {p["statistic"] for p in meta["peaks"]} == {"median"}
  page = (tmp_path / "README.md").read_text()
  for want in ("## The CPU targets", "(a) flash forward", "(e) MNIST generation",
               "### What bounds these figures", "### flash tile choices",
               "## Every variant against N", "| linear | yes |", "## Decode",
               "## MNIST generation", "smoke preset", "the one denominator",
               "### What the generation ratios compare", "stateful softmax"):
    assert want in page, want
  (tmp_path / "README.md").unlink()
  benchmark_page.write(out)     # the page comes back from the JSONs alone
  assert (tmp_path / "README.md").read_text() == page


@pytest.mark.slow   # the GPU benchmark's whole path on the CPU, 8-9 s (make test-all)
def test_gpu_benchmark_dry_run_on_cpu(tmp_path):
  """The GPU study's whole path (tuning, error check, speed table, page) in Pallas
  interpret mode on tiny shapes."""
  res = G.run(str(tmp_path), "python -m scripts.benchmark_gpu --dry", lens=[32],
              head_dims=[16], causals=[True], tune_len=32, runs=1, dry=True,
              log=lambda s: None)
  G.write_page(res, str(tmp_path))
  res = json.load(open(tmp_path / "gpu_dry.json"))
  case = res["cases"]["D16_causal"]
  assert len(case["tuning"]["rows"]) == 2 and case["tuning"]["best_fwd"]["block_q"] in (16, 32)
  assert max(case["errors"]["flash_pallas_vs_fp32"].values()) < 0.1   # bf16 rounding
  assert isinstance(case["speed"]["32"]["flash_pallas"]["fwd"], float)
  page = (tmp_path / "gpu_dry.md").read_text()
  assert "Dry run (on a CPU" in page and res["device"] in page
  assert res["peak"]["dtype"] == "bfloat16" and "median of 3 calls" in page


def test_gpu_benchmark_grid_and_paths_options():
  """--grid names the tiles to tune over (a short list instead of the full product);
  --paths picks the peers beside flash_pallas, which is always timed."""
  g = G.parse_grid("128/64/4/3, 128/64/8/2")
  assert G._configs(g) == [dict(block_q=128, block_k=64, num_warps=4, num_stages=3),
                           dict(block_q=128, block_k=64, num_warps=8, num_stages=2)]
  assert len(G._configs(G.TUNE)) == 24
  for bad in ("128/64/4", "128/64/x/3", " , "):
    with pytest.raises(ValueError, match="--grid"):
      G.parse_grid(bad)
  assert set(G.paths(True, True, only=("cudnn",))) == {"flash_pallas", "cudnn"}
  assert set(G.paths(True, False)) == {"flash_pallas", "xla"}


def test_a_section_stopped_at_its_time_limit_says_so_on_the_page():
  run = dict(command="python -m scripts.benchmark_train --preset=gpu", preset="gpu",
             date="2026-11-26", host="h", backend="gpu", device_kind="NVIDIA H200")
  sec = dict(run=run, what="w", pixels=784, partial=True,
             rows=[dict(variant="linear", mode="cache", cache="fp", batch=16,
                        images_per_s=100.0, ms_per_token=0.2)])
  assert "stopped before this section's end" in btp.page({"generate": sec})
  sec.pop("partial")
  assert "stopped" not in btp.page({"generate": sec})
  sec["superseded"] = "see gpu_runs.md."        # set by hand when the code has changed
  assert "**Superseded: see gpu_runs.md.**" in btp.page({"generate": sec})
  sec.pop("superseded")
  # the GPU targets: each judged from the rows, or said to be unmeasured
  row = dict(variant="softmax", dtype="bfloat16", batch=16, loop_steps_per_s=14.8,
             bare_step_ms=69.3, bare_host_ms=2.3, mfu=0.02, tokens_per_step=16 * 784,
             train_flops_per_token=5.78e7)
  oom = dict(variant="softmax", dtype="bfloat16", batch=256, pixels=784,
             error="out of memory: RESOURCE_EXHAUSTED")
  train = dict(run=run, what="w", peak={"bfloat16": {"flop_per_s": 5.48e14}},
               rows=[row, oom])
  v = btp.gpu_verdict({"generate": sec, "train": train})
  assert v[0].startswith("Train step ≥ 116") and "14.8 (0.13×): **missed**" in v[0]
  assert "best 2.00% (softmax, batch 16" in v[1]
  assert "would take 1.32 ms: the step takes 52×" in v[2]
  assert "its wait for the device included) is 2.3 ms of CPU (not the bound)" in v[2]
  row["dispatch_ms"] = 40.0        # measured apart from the wait: asynchronous, it overlaps
  assert ("of which the host's dispatch is 40.0 ms of CPU, 58% of the step (asynchronous, "
          "it overlaps the device's work: not the bound)") \
      in btp.gpu_verdict({"generate": sec, "train": train})[2]
  row["dispatch_ms"] = 65.0        # about the whole step: the host bounds it
  assert "of which the host's dispatch is 65.0 ms of CPU, 94% of the step: the host's" \
      in btp.gpu_verdict({"generate": sec, "train": train})[2]
  assert "100.0 (0.70×): **missed**" in v[3] and v[4].endswith("not measured.")
  assert v[5].startswith("flash ≥ softmax") and v[5].endswith("not measured.")


@pytest.mark.slow   # end to end (make test-all); the study's parts have cheap tests of their own
def test_benchmark_train_smoke_writes_its_rows_and_both_parts_of_the_page(
    smoke_out, tmp_path, prepared_data):
  """studies.bench.train end to end on tiny shapes: one loop/bare row, the
  generation rows, its JSON; the page writer composes its section after the attention
  benchmark's part, and rewriting either keeps the other."""
  shutil.copytree(smoke_out, tmp_path, dirs_exist_ok=True)   # the attention benchmark's run
  out = str(tmp_path)
  res = bt.run(bt.PRESETS["smoke"], "smoke", ("train", "generate"), out,
               "python -m scripts.benchmark_train --preset=smoke",
               data_dir=str(prepared_data), log=lambda s: None)
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
  assert 0 < r["dispatch_ms"] < 1e3
  assert r["extra_host_ms"] == pytest.approx(
      r["loop_host_ms"] - r["bare_host_ms"] + r["input_cpu_ms"])
  assert [g["batch"] for g in res["generate"]["rows"]] == [1, 2]
  saved = json.load(open(tmp_path / f"train_{timing.device_name()}.json"))   # train_h100 on an H100
  assert saved["train"]["rows"][0]["batch"] == 2 and saved["generate"]["run"]["date"]
  assert saved["train"]["peak"]["float32"]["statistic"] == "median"
  benchmark_page.write(out)
  page = (tmp_path / "README.md").read_text()
  assert page.index("## MNIST generation") < page.index("## Training loop")
  assert "| softmax | float32 | 2 × 16 |" in page
  assert ("CPU loop target" in page) == (jax.default_backend() == "cpu")
  assert page.count("## Training loop") == 1
  B.run(B.PRESETS["smoke"], "smoke", out, ("generation",), ["linear"], 30.0, "again",
        log=lambda s: None)
  benchmark_page.write(out)        # the attention benchmark's run keeps the train part
  assert "| softmax | float32 | 2 × 16 |" in (tmp_path / "README.md").read_text()


def test_benchmark_train_verdict():
  rows = [dict(variant="softmax", dtype="float32", batch=1, bare_step_ms=50.0, ratio=0.99,
               overhead_ms=0.4, overhead_ci_ms=[-0.5, 1.5], extra_host_ms=0.7),
          dict(variant="linear", dtype="float32", batch=4, bare_step_ms=110.0, ratio=0.98,
               overhead_ms=1.6, overhead_ci_ms=[0.2, 3.0], extra_host_ms=0.8),
          dict(variant="linear", dtype="float32", batch=1, bare_step_ms=10.0, ratio=0.5,
               overhead_ms=9.0, overhead_ci_ms=[8.0, 10.0], extra_host_ms=5.0)]
  v = btp.cpu_verdict(rows)
  assert "met by 1 of 2 rows (linear float32 B=4 missed)" in v        # the 10 ms step is not judged
  assert "In 0 of the 1 met" in v and "within this run's noise" in v


def test_tile_choices_pass_the_score_budget_as_flash_s_option():
  """The tile study gives flash each budget as its step_score_bytes option; flash's
  module default stays as it was."""
  from attention import flash as F
  keep = F.STEP_SCORE_BYTES
  r = B.tile_choices(B.PRESETS["smoke"], 128, log=lambda s: None)
  assert set(r["seconds"]) == {c[0] for c in B.TILE_CHOICES}
  assert F.STEP_SCORE_BYTES == keep


def trace_file(tmp_path, ev):
  """A file laid out as `tr.trace` writes it, holding the trace events `ev`."""
  import gzip
  import io
  import tarfile
  data = gzip.compress(json.dumps({"traceEvents": ev}).encode())
  path = tmp_path / "t.tar.gz"
  with tarfile.open(path, "w:gz") as t:
    info = tarfile.TarInfo("trace/plugins/profile/x/h.trace.json.gz")
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))
  return path


def test_trace_summary_ranks_the_device_ops_of_a_trace(tmp_path):
  """The profiler trace's longest op names, the GPU stream's over the host's."""
  ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 1, "name": "python", "dur": 9e6},
        {"ph": "X", "pid": 2, "name": "fusion.1", "dur": 2000.0},
        {"ph": "X", "pid": 2, "name": "fusion.1", "dur": 1000.0},
        {"ph": "X", "pid": 2, "name": "gemm", "dur": 500.0}]
  path = trace_file(tmp_path, ev)
  assert tr.trace_summary(str(path)) == [("/device:GPU:0", "fusion.1", 3.0, 2),
                                         ("/device:GPU:0", "gemm", 0.5, 1)]


def test_device_busy_is_the_union_of_the_device_ops_intervals(tmp_path):
  """Overlapping ops count once, gaps not at all; the host's events are ignored when
  the trace has a device."""
  ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 1, "name": "python", "ts": 0.0, "dur": 9e6},
        {"ph": "X", "pid": 2, "name": "a", "ts": 1000.0, "dur": 2000.0},   # 1-3 ms
        {"ph": "X", "pid": 2, "name": "b", "ts": 2000.0, "dur": 2000.0},   # 2-4 ms
        {"ph": "X", "pid": 2, "name": "c", "ts": 2500.0, "dur": 500.0},    # inside
        {"ph": "X", "pid": 2, "name": "d", "ts": 9000.0, "dur": 1000.0}]   # 9-10 ms
  path = trace_file(tmp_path, ev)
  assert tr.device_busy(str(path)) == {"ops": 4, "busy_ms": 4.0, "span_ms": 9.0}


@pytest.mark.slow   # a GPU diagnostic's path on the CPU (make test-all); the kernels' own
def test_tile_errors_bisect_one_case_in_interpret_mode():   # equivalence is test_flash_pallas
  """The bf16 error table the GPU bisect prints: every error a float at bf16 rounding
  in interpret mode (the GPU's Triton path must match it)."""
  (row,) = G.tile_errors(True, shapes={"odd": (1, 37, 53, 2, 1, 4, 6)}, tiles=((64, 16),),
                         log=lambda s: None)
  assert (row["block_q"], row["block_k"]) == (64, 16)
  assert all(0 < row[n] < 0.06 for n in ("out", "dq", "dk", "dv")), row


def test_a_later_run_keeps_the_rows_it_did_not_measure_again(tmp_path, monkeypatch):
  """A run cut short (or measuring fewer rows) replaces only the rows it measured
  again: the earlier run's other rows stay, in their own block with their own run
  record, on the page and in the GPU verdict, and flash meets softmax only within
  one run."""
  def row(variant, batch, steps):
    return dict(variant=variant, dtype="bfloat16", batch=batch, pixels=784,
                loop_steps_per_s=steps, bare_steps_per_s=steps, bare_step_ms=1e3 / steps,
                ratio=1.0, overhead_ms=0.0, overhead_ci_ms=[-0.1, 0.1],
                overhead_ci_coverage=0.9, pair_overheads_ms=[0.0], input_cpu_ms=0.1,
                loop_host_ms=1.0, bare_host_ms=1.0, extra_host_ms=0.1,
                inline_steps_per_s=steps, tokens_per_s=steps * batch * 784,
                tokens_per_step=batch * 784, train_flops_per_token=5.78e7, mfu=0.1)
  measured = [[row("sdpa", 16, 190.0), row("flash", 16, 180.0)],   # the first run
              [row("softmax", 16, 150.0)]]                          # the second, cut short
  def bench_train(p, batches, variants, dtypes, data_dir, peaks, log, on_row):
    rows = []
    for r in measured.pop(0):
      rows.append(r)
      on_row(rows)
    return rows
  monkeypatch.setattr(bt, "bench_train", bench_train)
  monkeypatch.setattr(timing, "matmul_peak", lambda n, dtype: dict(
      flop_per_s=6e14, n=n, dtype=jnp.dtype(dtype).name, runs=7, statistic="median"))
  monkeypatch.setattr(timing, "device_name", lambda: "h100")
  monkeypatch.setattr(bt.pages, "run_record", lambda cmd, preset: dict(
      command=cmd, preset=preset, date=cmd[-10:], host="h", backend="gpu",
      device_kind="NVIDIA H100"))
  go = lambda date: bt.run(bt.PRESETS["smoke"], "smoke", ("train",), str(tmp_path),
                           f"bench {date}", log=lambda s: None)
  go("2026-11-27")
  res = go("2026-11-28")
  t = res["train"]
  assert [r["variant"] for r in t["rows"]] == ["softmax"]
  (e,) = t["earlier"]
  assert e["run"]["date"] == "2026-11-27" and [r["variant"] for r in e["rows"]] == \
      ["sdpa", "flash"]
  assert json.load(open(tmp_path / "train_h100.json")) == res      # what the file holds
  # a third run that measures sdpa again drops it from the earlier block only
  measured.append([row("sdpa", 16, 200.0)])
  t3 = go("2026-11-29")["train"]
  assert [[r["variant"] for r in b["rows"]] for b in t3["earlier"]] == [["softmax"],
                                                                         ["flash"]]
  page = btp.page(res)
  assert page.count("Rows of an earlier run on this device") == 1
  assert page.index("| softmax |") < page.index("Rows of an earlier") < page.index("| sdpa |")
  v = btp.gpu_verdict(res)
  assert "softmax bfloat16 150.0 (1.29×)" in v[0]
  assert "sdpa bfloat16 190.0 (earlier run, 2026-11-27) (1.64×)" in v[0]
  assert v[-1].endswith("not measured.")      # flash and softmax come from two runs
  assert bt.carried(None, [], bt.ROW_KEY["train"]) == []
