"""Profiler traces of the research loop (studies.bench.train's rows) and what they say:
`trace` (bare train steps of one row) and `gen_trace` (one generation call), each
packed as one .tar.gz file, read back by `device_busy` (is the device waiting between
launches?) and `trace_summary` (where the time goes), without TensorBoard.
(`python -m scripts.benchmark_train --trace=...`, `scripts/gpu_probe.py gentrace`.)
"""
from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp

from studies.bench.train import Bare, Preset, config


def trace(p: Preset, variant: str, dtype: str, batch: int, data_dir: str, path: str,
          steps: int = 5) -> str:
  """A `jax.profiler` trace of `steps` bare train steps (compiled and warm first) of
  one (variant, dtype, batch) at the preset's model, packed as one file `path`
  (.tar.gz: the trace's own folders are deeper than a device call brings back); open
  it with TensorBoard's profile plugin or Perfetto. Returns the path."""
  b = Bare(config(p, batch, variant, dtype, data_dir), steps)
  b.rates(1)                                           # warm
  return _packed_trace(lambda: b.rates(1), path)


def _packed_trace(fn, path: str) -> str:
  """Runs fn() under `jax.profiler.trace` and packs the trace as one file `path`."""
  import tarfile
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d):
      fn()
    with tarfile.open(path, "w:gz") as t:
      t.add(d, arcname="trace")
  return path


def gen_trace(p: Preset, variant: str, batch: int, data_dir: str, path: str,
              tokens: int = 64) -> str:
  """A `jax.profiler` trace of one generation call of `tokens` tokens from an empty
  prompt (KV cache / RNN state, float32, the preset's model; compiled and warm first),
  packed as `trace` packs it. What bounds a decode step: read it with `device_busy`."""
  from flax import nnx
  import trainer
  from models import build, generate
  model = build(trainer.validate(config(p, 1, variant, "float32", data_dir)),
                rngs=nnx.Rngs(0))
  model.eval()
  run = lambda: jax.block_until_ready(generate(
      model, jnp.zeros((batch, 0), jnp.int32), steps=tokens, key=jax.random.key(0)))
  run()                                                # compile and warm
  return _packed_trace(run, path)


def _trace_events(path: str):
  """(events, {pid: process name}, device pids) of a `trace` file."""
  import gzip
  import json
  import tarfile
  with tarfile.open(path) as t:
    m = next(x for x in t.getmembers() if x.name.endswith(".trace.json.gz"))
    ev = json.loads(gzip.decompress(t.extractfile(m).read()))["traceEvents"]
  names = {e["pid"]: e["args"].get("name", "") for e in ev
           if e.get("ph") == "M" and e.get("name") == "process_name"}
  dev = {p for p, n in names.items() if "device" in n.lower() or "gpu" in n.lower()}
  return ev, names, dev


def device_busy(path: str) -> dict:
  """Of a `trace` file's device ops (the host's if it has no device): their number,
  `busy_ms` (the union of their intervals: time some op ran) and `span_ms` (first
  start to last end). busy / span well below 1 with many short ops means the device
  waits between launches: the step is bound by launching, not by its arithmetic."""
  ev, _, dev = _trace_events(path)
  iv = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in ev
              if e.get("ph") == "X" and "ts" in e and (not dev or e["pid"] in dev))
  busy, end = 0.0, None
  for a, b in iv:
    if end is None or a > end:
      busy += b - a
      end = b
    elif b > end:
      busy += b - end
      end = b
  span = (max(b for _, b in iv) - iv[0][0]) if iv else 0.0
  return {"ops": len(iv), "busy_ms": busy / 1e3, "span_ms": span / 1e3}


def trace_summary(path: str, top: int = 15) -> list[tuple[str, str, float, int]]:
  """(process, op name, total ms, count) of the `top` longest-running op names in a
  `trace` file, device processes (GPU streams) first, else the host's: what the step's
  time goes to, read off the trace without TensorBoard."""
  import collections
  ev, names, dev = _trace_events(path)
  tot, cnt = collections.Counter(), collections.Counter()
  for e in ev:
    if e.get("ph") == "X" and (not dev or e["pid"] in dev):
      k = (names.get(e["pid"], "?"), e["name"])
      tot[k] += e.get("dur", 0) / 1e3
      cnt[k] += 1
  return [(p, n, ms, cnt[p, n]) for (p, n), ms in tot.most_common(top)]
