"""studies.core.timing: the one harness (timed calls, interleaved rounds, the matmul peak,
memory plans, slopes, the pairing of samples and the median's interval)."""
import math

import jax
import jax.numpy as jnp
import pytest

from studies.core import timing


def test_slope_recovers_the_power_law():
  pts = {N: 3e-6 * N ** 1.5 for N in (256, 1024, 4096, 16384)}
  assert timing.slope(pts) == pytest.approx(1.5, abs=1e-9)
  assert timing.slope(pts, lo=1024, hi=4096) == pytest.approx(1.5, abs=1e-9)
  assert timing.slope({str(k): v for k, v in pts.items()}) == pytest.approx(1.5)
  assert math.isnan(timing.slope(pts, lo=16384))      # one point: no slope
  assert math.isnan(timing.slope({256: 1.0, 512: None}))


def test_matmul_peak_names_its_dtype_size_and_statistic():
  p = timing.matmul_peak(64, jnp.bfloat16, runs=3)
  assert p["flop_per_s"] > 0 and (p["n"], p["dtype"], p["runs"]) == (64, "bfloat16", 3)
  assert p["statistic"] == "median"
  assert timing.peak_text(dict(p, flop_per_s=154e9)) == (
      "154 GFLOP/s (the median of 3 calls of a 64 × 64 bfloat16 matmul)")
  assert "4 chained" in timing.peak_text(dict(p, chain=4))


def test_timed_interleaved_and_the_memory_plan():
  f = jax.jit(lambda x: x @ x)
  x = jnp.ones((32, 32))
  out, s = timing.timed(lambda: f(x), runs=3)
  assert out.shape == (32, 32) and s > 0
  t = timing.interleaved({"a": f, "b": f}, {"a": (x,), "b": (x,)}, 3)
  assert set(t) == {"a", "b"} and min(t.values()) > 0
  c = timing.interleaved_clocks({"a": f}, {"a": (x,)}, 3)
  assert set(c["a"]) == {"wall", "cpu"} and c["a"]["wall"] > 0 and c["a"]["cpu"] >= 0
  plan = timing.memory_plan(f.lower(x).compile())
  assert plan["argument_bytes"] == plan["output_bytes"] == 32 * 32 * 4
  with timing.RssPeak() as r:
    jnp.ones((256, 256)).block_until_ready()
  assert r.growth >= 0


def test_pairs_and_median_interval():
  """The loop/bare pairing and the sign-test interval of the median, by hand."""
  # bare rounds of 100, 120, 100 ms per step around loop intervals of 111 and 112 ms
  over, ratio = timing.paired([10.0, 1e3 / 120, 10.0], [1e3 / 111, 1e3 / 112])
  assert over == pytest.approx([1.0, 2.0]) and ratio == pytest.approx([110 / 111, 110 / 112])
  # 12 samples: (x_3, x_10) covers the median with 1 - 2 P(Bin(12, 1/2) <= 2) = 96.1%
  lo, hi, cover = timing.median_interval(list(range(12, 0, -1)))
  assert (lo, hi) == (3, 10) and cover == pytest.approx(1 - 2 * 79 / 4096)
  # too few samples for 95%: the range, with its lower coverage
  assert timing.median_interval([2.0, 1.0, 3.0]) == (1.0, 3.0, pytest.approx(0.75))


def test_fresh_arguments_for_a_function_that_consumes_them():
  made = []
  f = jax.jit(lambda x: x + 1, donate_argnums=0)
  ts = timing.run_times_fresh(lambda: made.append(1) or (jnp.zeros(4),), f, 3)
  assert len(ts) == 3 and len(made) == 3 and min(ts) > 0
