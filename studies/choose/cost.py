"""The decision page's one cost run (results/choose/cost.json; the page:
`studies.choose.page`): every registered variant timed on one machine in one run, so that
its columns compare like with like.

  training   forward + backward of one attention op (the gradient of 0.5 sum(out²)
             with respect to q, k, v: `studies.bench.benchmark.case_fns`), causal where
             the variant can be, B·H fixed, at each length of `CostSetup.lens` (and
             `long_len` for the variants whose memory is linear in the length: no N²
             in their record's `memory`). Every variant of one length is timed in the
             same interleaved rounds (`studies.core.timing.interleaved_clocks`), so the
             load of a shared machine falls on all alike; tokens/s = B·N / the median
             wall seconds (the CPU seconds are kept too). Peak memory: XLA's compiled
             memory plan (arguments + outputs + temporaries, `timing.memory_plan`).
             A cell predicted (from the variant's previous length, scaled by its cost
             model's FLOPs) to take more than `cell_limit_s` for its warm-up and
             rounds is "skipped (time)"; a plan over `mem_budget_gib`, "skipped
             (memory)"; the variants that a CPU would time in an interpreter
             (compare_variants.SKIP_ON_CPU), "skipped (CPU)".
  decode     µs per token of single-token decode steps from a state holding
             `decode_context` positions, and that state's bytes per sequence (one
             layer, all heads): the KV-cache harness (`studies.bench.kv_cache.measure`),
             one row per variant with a decode state, and the bytes at 1k by the
             same harness (`kv_cache.state_bytes`), so a state that does not grow
             shows as such.
  gauge      the matmul gauge (`studies.core.timing.matmul_peak`) at the start and end.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

import attention
from studies.bench import benchmark, kv_cache
from studies.core import pages, timing
from studies.variants.compare import SKIP_ON_CPU

GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class CostSetup:
  """The sizes of the cost run (small heads and dims: the whole run on a 2-core CPU in
  about 10 minutes).

  batch, heads, head_dim: B, H and d_h of every call (B·H fixed over lengths);
  lens: the training lengths; long_len: the extra length of the linear-memory
  variants; rounds: interleaved timed rounds per length (after one warm-up call);
  cell_limit_s: the most seconds a cell's warm-up and rounds may be predicted to take;
  mem_budget_gib: the largest memory plan compiled and run; decode_context: the
  positions in the decode state; decode_steps: tokens per timed decode scan;
  decode_rounds: its interleaved rounds; total_limit_s: past this many seconds of
  training cells, the remaining ones are skipped (time)."""
  batch: int = 1
  heads: int = 2
  head_dim: int = 32
  lens: tuple = (1024, 4096, 16384)
  long_len: int = 65536
  rounds: int = 3
  cell_limit_s: float = 60.0
  mem_budget_gib: float = 6.0
  decode_context: int = 16384
  decode_steps: int = 16
  decode_rounds: int = 3
  total_limit_s: float = 420.0


def linear_memory(name: str) -> bool:
  """Whether `name`'s record declares a memory that is not quadratic in the length
  (no N² in `Variant.memory`)."""
  return "N²" not in attention.variant(name).memory


def lengths(name: str, s: CostSetup) -> tuple:
  """The training lengths of `name`: s.lens, and s.long_len for a linear-memory one."""
  return tuple(s.lens) + ((s.long_len,) if linear_memory(name) else ())


def _flops(name: str, s: CostSetup, N: int, causal: bool) -> float:
  return float(attention.cost(name, batch=s.batch, q_len=N, num_heads=s.heads,
                              head_dim=s.head_dim, causal=causal, mode="fwd_bwd").flops)


def _qkv(name: str, s: CostSetup, N: int) -> tuple:
  """Random float32 q (B, N, H, d_h), k and v of the widths the variant's function
  consumes (`Variant.kv_dims`: mla's rope key and latent)."""
  dk, dv = attention.variant(name).kv_dims(s.head_dim)
  kq, kk, kv = jax.random.split(jax.random.key(N), 3)
  shape = lambda d: (s.batch, N, s.heads, d)
  return (jax.random.normal(kq, shape(s.head_dim)), jax.random.normal(kk, shape(dk)),
          jax.random.normal(kv, shape(dv)))


def train_costs(s: CostSetup, names, log=print) -> dict:
  """{variant: {"causal": bool, "cells": {N: cell}}}: each cell {"status": "ok",
  "tokens_per_s", "seconds", "cpu_seconds", "peak_bytes", "memory", "flops"} or
  {"status": "skipped (time)" | "skipped (memory)" | "skipped (CPU)" | "failed",
  "why"}. s: the sizes; names: the variants; log: where progress lines go."""
  preset = dataclasses.replace(benchmark.PRESETS["smoke"], B=s.batch, H=s.heads,
                               D=s.head_dim)
  budget = s.mem_budget_gib * GiB
  res, last = {}, {}
  for n in names:
    res[n] = dict(causal=bool(attention.variant(n).causal), cells={})
    if n in SKIP_ON_CPU and jax.default_backend() == "cpu":
      for N in lengths(n, s):
        res[n]["cells"][N] = dict(status="skipped (CPU)", why=SKIP_ON_CPU[n].format(
            preset="cost run's CPU"))
  start = time.perf_counter()
  for N in sorted({N for n in names for N in lengths(n, s)}):
    fns, args = {}, {}
    for n in names:
      cells, causal = res[n]["cells"], res[n]["causal"]
      if N not in lengths(n, s) or N in cells:
        continue
      prev = [c for c in cells.values() if c["status"] != "ok"]
      if prev:                        # a shorter length was skipped: so is this one
        cells[N] = dict(status=prev[0]["status"], why=f"as at a shorter length: "
                        f"{prev[0]['why']}")
        continue
      if time.perf_counter() - start > s.total_limit_s:
        cells[N] = dict(status="skipped (time)", why=f"the run's {s.total_limit_s:.0f} s "
                        "budget for training cells was spent")
        continue
      if n in last:
        M, t = last[n]
        pred = t * _flops(n, s, N, causal) / _flops(n, s, M, causal)
        if pred * (s.rounds + 1) > s.cell_limit_s:
          cells[N] = dict(status="skipped (time)", predicted_s=pred,
                          why=f"predicted {pred:.1f} s per call x {s.rounds + 1} calls > "
                              f"{s.cell_limit_s:.0f} s")
          continue
      try:
        _, bwd = benchmark.case_fns(n, preset, N, causal)
        qkv = _qkv(n, s, N)
        compiled = bwd.lower(*qkv).compile()
      except Exception as e:          # a variant that cannot run this call: recorded
        cells[N] = dict(status="failed", why=str(e).splitlines()[0][:300])
        log(f"{n:16s} N={N:6d} failed: {cells[N]['why']}")
        continue
      plan = timing.memory_plan(compiled)
      peak = plan["argument_bytes"] + plan["output_bytes"] + plan["temp_bytes"]
      if peak > budget:
        cells[N] = dict(status="skipped (memory)", memory=plan, peak_bytes=peak,
                        why=f"XLA plans {peak / GiB:.1f} GiB > {s.mem_budget_gib} GiB")
        continue
      cells[N] = dict(status="ok", memory=plan, peak_bytes=peak,
                      flops=_flops(n, s, N, causal))
      fns[n], args[n] = compiled, qkv
    if fns:
      log(f"N={N}: timing {len(fns)} variants in {s.rounds} interleaved rounds")
      clocks = timing.interleaved_clocks(fns, args, s.rounds)
      for n, c in clocks.items():
        cell = res[n]["cells"][N]
        cell.update(seconds=c["wall"], cpu_seconds=c["cpu"],
                    tokens_per_s=s.batch * N / c["wall"])
        last[n] = (N, c["wall"])
        log(f"{n:16s} N={N:6d} {c['wall'] * 1e3:10.1f} ms  "
            f"{cell['tokens_per_s']:10.0f} tok/s  {cell['peak_bytes'] / 2 ** 20:8.1f} MiB")
    del fns, args
  return res


def decode_costs(s: CostSetup, names, command: str, log=print) -> dict:
  """{variant: {"status": "ok", "us_per_token", "state_bytes": {L: bytes}, "formula"}
  or {"status": "cannot" | "skipped (CPU)", "why"}} at s.decode_context, by the
  KV-cache harness (`kv_cache.measure`, interleaved rounds). s: the sizes; names: the
  variants; command: the command the harness's record names; log: progress lines."""
  out, rows = {}, []
  for n in names:
    if attention.variant(n).decode_impl is None:
      out[n] = dict(status="cannot", why="no decode state (its record declares no "
                    "decode_impl): generation recomputes the prefix")
    elif n in SKIP_ON_CPU and jax.default_backend() == "cpu":
      out[n] = dict(status="skipped (CPU)", why=SKIP_ON_CPU[n].format(
          preset="cost run's CPU"))
    else:
      rows.append(kv_cache.Row(n, n, None, error=False))
  ks = kv_cache.Setup(heads=s.heads, head_dim=s.head_dim, contexts=(s.decode_context,),
                      steps=s.decode_steps, rounds=s.decode_rounds, batch=s.batch)
  rec = kv_cache.measure(ks, command, rows=rows, log=log) if rows else {"rows": {}}
  for row in rows:
    r = rec["rows"][row.label]
    small = kv_cache.state_bytes(row, ks, min(s.lens))
    out[row.name] = dict(status="ok", us_per_token=r["us"][s.decode_context],
                         state_bytes={min(s.lens): small["measured"],
                                      s.decode_context: r["bytes"][s.decode_context][
                                          "measured"]},
                         predicted_bytes=r["bytes"][s.decode_context]["predicted"],
                         temp_bytes=r["temp_bytes"][s.decode_context])
  return dict(rows=out, peak=rec.get("peak"))


def cost_run(s: CostSetup, command: str, names=None, log=print) -> dict:
  """The record of results/choose/cost.json: {"run", "setup", "peak": [start, end],
  "train": train_costs, "decode": decode_costs, "seconds"}. s: the sizes; command:
  the command line recorded; names: the variants (default: every registered one);
  log: progress lines."""
  names = list(names or attention.names())
  t0 = time.perf_counter()
  peak0 = timing.matmul_peak(1024)
  log(f"matmul gauge {timing.peak_text(peak0)}")
  train = train_costs(s, names, log)
  dec = decode_costs(s, names, command, log)
  peak1 = timing.matmul_peak(1024)
  log(f"matmul gauge at the end {timing.peak_text(peak1)}")
  return dict(run=pages.run_record(command), setup=dataclasses.asdict(s),
              peak=[peak0, peak1], train=train, decode=dec["rows"],
              decode_peaks=dec["peak"], seconds=time.perf_counter() - t0)
