"""The one timing harness of the studies: timed calls, interleaved rounds, the matmul
peak, memory plans and RSS, log-log slopes, and the pairing of interleaved samples.

Every timed call ends in `jax.block_until_ready` and follows a warm-up call (the
compilation is never timed). On a shared machine, timings that are compared are
taken `interleaved`: round by round, so that a slow phase falls on every side alike.
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np



def run_times(f, args, runs: int) -> list[float]:
  """Seconds of `runs` calls of f(*args), each to `block_until_ready`."""
  ts = []
  for _ in range(runs):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    ts.append(time.perf_counter() - t)
  return ts


def run_times_fresh(make_args, f, runs: int) -> list[float]:
  """Seconds of `runs` calls of f(*make_args()), each on arguments made (and ready)
  before its clock starts: for a function that consumes its input (a donated decode
  state is updated in place, so every call needs a fresh one)."""
  ts = []
  for _ in range(runs):
    args = jax.block_until_ready(make_args())
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    ts.append(time.perf_counter() - t)
  return ts


def timed(fn, runs: int = 1):
  """(output, seconds): fn() called once to warm up (compile), then `runs` timed calls;
  seconds is their median (one call: its time)."""
  jax.block_until_ready(fn())
  ts, out = [], None
  for _ in range(runs):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    ts.append(time.perf_counter() - t)
  return out, float(np.median(ts))


def interleaved(fns: dict, args: dict, rounds: int) -> dict:
  """Median seconds of each fn, timed once per round in turn (after one warm-up each),
  so slow phases of a shared machine fall on every fn alike."""
  return {k: v["wall"] for k, v in interleaved_clocks(fns, args, rounds).items()}


def interleaved_clocks(fns: dict, args: dict, rounds: int) -> dict:
  """`interleaved`, by two clocks: {k: {"wall": median seconds, "cpu": median CPU
  seconds of this process (all its threads: `time.process_time`)}} per call. On a
  shared machine the CPU time is the steadier measure of a call's work: time spent
  waiting for a core does not count in it."""
  for k, f in fns.items():
    jax.block_until_ready(f(*args[k]))
  ts = {k: {"wall": [], "cpu": []} for k in fns}
  for _ in range(rounds):
    for k, f in fns.items():
      c, t = time.process_time(), time.perf_counter()
      jax.block_until_ready(f(*args[k]))
      ts[k]["wall"].append(time.perf_counter() - t)
      ts[k]["cpu"].append(time.process_time() - c)
  return {k: {c: float(np.median(v)) for c, v in d.items()} for k, d in ts.items()}


# ---- the matmul peak -----------------------------------------------------------------

def matmul_fn(n: int, dtype=jnp.float32):
  """(jitted f, (a,), FLOPs): an (n, n) @ (n, n) product in `dtype` with float32
  accumulation (jnp.dot's preferred_element_type), at the default matmul precision."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  f = jax.jit(lambda a: jnp.dot(a, a, preferred_element_type=jnp.float32))
  return f, (a,), 2 * n ** 3


def matmul_peak(n: int = 2048, dtype=jnp.float32, runs: int = 7, warm_s=None) -> dict:
  """This machine's practical peak, the one definition every study uses: the median
  FLOP/s of `runs` timed calls of `matmul_fn(n, dtype)`, after calls for at least
  `warm_s` seconds (default 0.5 on a GPU, which idles at low clocks: on an H200 one
  warm-up call left the peak at 524 TFLOP/s in one process, below what cuDNN then
  reached, and 673 in another; one call elsewhere). The record names its size, dtype and statistic, so that a page can state
  them."""
  if warm_s is None:
    warm_s = 0.5 if jax.default_backend() == "gpu" else 0.0
  f, args, fl = matmul_fn(n, dtype)
  t = time.perf_counter()
  jax.block_until_ready(f(*args))
  while time.perf_counter() - t < warm_s:
    jax.block_until_ready(f(*args))
  return {"flop_per_s": fl / float(np.median(run_times(f, args, runs))), "n": n,
          "dtype": jnp.dtype(dtype).name, "runs": runs, "statistic": "median",
          "warm_s": warm_s}


def peak_text(p: dict, unit: float = 1e9, unit_name: str = "GFLOP/s", digits: int = 0) -> str:
  """A peak record in words, e.g. '154 GFLOP/s (the median of 7 calls of a 2048 ×
  2048 float32 matmul)'; a record of `chain` products per call says so."""
  what = (f"{p['chain']} chained {p['n']} × {p['n']} {p['dtype']} matmuls" if p.get("chain")
          else f"a {p['n']} × {p['n']} {p['dtype']} matmul")
  return (f"{p['flop_per_s'] / unit:.{digits}f} {unit_name} (the {p['statistic']} of "
          f"{p['runs']} calls of {what})")


# ---- memory ---------------------------------------------------------------------------

def memory_plan(compiled) -> dict:
  """XLA's memory plan of a compiled function: argument, output, temporary and aliased
  bytes (`compiled.memory_analysis()`)."""
  m = compiled.memory_analysis()
  return dict(argument_bytes=int(m.argument_size_in_bytes),
              output_bytes=int(m.output_size_in_bytes),
              temp_bytes=int(m.temp_size_in_bytes),
              alias_bytes=int(m.alias_size_in_bytes))


def rss() -> int:
  """Resident set size of this process in bytes (Linux), else 0."""
  try:
    with open("/proc/self/statm") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
  except (OSError, ValueError):
    return 0


def trim() -> None:
  """Returns freed heap to the OS, so that the next RSS growth is a case's own."""
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):
    pass


class RssPeak:
  """Samples RSS every 5 ms in a thread; .growth is the peak above the start."""

  def __enter__(self):
    self.base = self.peak = rss()
    self._stop = threading.Event()
    self._t = threading.Thread(target=self._poll, daemon=True)
    self._t.start()
    return self

  def _poll(self):
    while not self._stop.wait(0.005):
      self.peak = max(self.peak, rss())

  def __exit__(self, *exc):
    self._stop.set()
    self._t.join()
    self.peak = max(self.peak, rss())
    self.growth = self.peak - self.base


# ---- statistics of timings -----------------------------------------------------------

def slope(points: dict, lo=0, hi=math.inf) -> float:
  """Least-squares slope p of log t = p log N + c over lengths lo <= N <= hi (nan if
  fewer than two measured points); `points` maps N (int or str) to seconds."""
  pts = sorted((int(n), t) for n, t in points.items() if lo <= int(n) <= hi and t)
  if len(pts) < 2:
    return float("nan")
  x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
  return float(np.polyfit(x, y, 1)[0])


def median_interval(xs: list, level: float = 0.95) -> tuple[float, float, float]:
  """(lo, hi, coverage): the distribution-free confidence interval of the median of
  xs from its order statistics (the sign test): the widest-inset pair (x_(j),
  x_(k+1-j)) whose coverage 1 - 2 P(Binomial(k, 1/2) < j) is still >= level; with
  too few samples for that, (min, max) and its lower coverage."""
  x, k = sorted(xs), len(xs)
  cdf = lambda j: sum(math.comb(k, i) for i in range(j)) / 2 ** k   # P(X < j)
  j = 1
  while j + 1 <= (k + 1) // 2 and 1 - 2 * cdf(j + 1) >= level:
    j += 1
  return x[j - 1], x[k - j], 1 - 2 * cdf(j)


def paired(bare_rates: list, loop_rates: list) -> tuple[list, list]:
  """Per loop interval i, run between bare rounds i and i + 1 (steps/s): (the loop's
  ms per step minus the mean of the two bare rounds' ms per step, the bare rounds'
  mean ms over the loop's ms, i.e. loop / bare in steps/s)."""
  over, ratio = [], []
  for i, l in enumerate(loop_rates):
    b = (1e3 / bare_rates[i] + 1e3 / bare_rates[i + 1]) / 2
    over.append(1e3 / l - b)
    ratio.append(b / (1e3 / l))
  return over, ratio


# Dense (no sparsity) tensor-core peaks from the vendors' datasheets, FLOP/s, by
# `device_name()` and dtype: the hardware's limit beside the matmul peak measured in
# the process (`matmul_peak`).
DATASHEET = {("h100", "bfloat16"): 989.4e12, ("h200", "bfloat16"): 989.4e12,
             ("h100", "float16"): 989.4e12, ("h200", "float16"): 989.4e12,
             ("h100", "float32"): 66.9e12, ("h200", "float32"): 66.9e12,
             ("a100", "bfloat16"): 312e12, ("a100", "float32"): 19.5e12}


def datasheet_peak(dtype: str = "bfloat16", name: str | None = None) -> float | None:
  """The datasheet peak of this device (or `name`) in `dtype`; None where not known
  (CPUs)."""
  return DATASHEET.get((name or device_name(), jnp.dtype(dtype).name))


def device_name() -> str:
  """'cpu', or the accelerator's short name (h100, a100, ...): the suffix of the
  benchmarks' JSON files (train_h100.json, gpu_h200.json)."""
  d = jax.devices()[0]
  if d.platform == "cpu":
    return "cpu"
  kind = d.device_kind.lower()
  for k in ("h100", "h200", "a100", "l4", "v100", "t4"):
    if k in kind:
      return k
  return kind.replace(" ", "_")
