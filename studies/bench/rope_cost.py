"""What applying RoPE costs in a training step at the shakespeare config (issue 39's
target: at most 5% of the step), measured two ways in one process:

  step  configs/shakespeare.py's training step (`studies.bench.train.Bare`:
        trainer.step.TrainStep over batches already on the device, rounds of n steps
        with no host sync) with model.positions = "rope" against the same model with
        "none" (nothing added anywhere: the step without positions), rounds
        interleaved none, rope, none, ..., none. Each rope round pairs with the mean
        of the none rounds around it (`studies.core.timing.paired`), so the shared
        machine's drift cancels in the pair; the share is 1 - none / rope per pair,
        its median with the median's distribution-free 95% interval.
  op    the rotation alone, forward and backward (`attention.core.positions.rotate_qk` of
        q and k at the step's shapes, as one jitted function with its own angles),
        times the number of layers, over the rope step's median time: an upper
        bound of what the rotation adds, since in the step XLA fuses it into the
        projections' outputs instead of running it as a kernel of its own.

Results go to results/positions/rope_cost.json (`measure`), which the positions page
states (`studies.mechanisms.positions`).
"""
from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from studies.core import pages, timing

TARGET = 0.05          # issue 39: RoPE costs <= 5% of a training step


@dataclasses.dataclass(frozen=True)
class Preset:
  model: dict          # overrides of configs/shakespeare.py's model
  seq_len: int
  batch: int
  n: int               # steps per round
  rounds: int          # rope rounds (rounds + 1 none rounds)
  op_runs: int         # timed calls of the rotation alone
  what: str


PRESETS = {
    "smoke": Preset(dict(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16),
                    16, 2, 2, 2, 3, "tiny shapes: a test of the study, not a measurement"),
    "full": Preset({}, 256, 32, 3, 8, 20, "configs/shakespeare.py as it is (d_model "
                   "128, 4 heads, 4 layers, 256 characters, batch 32)"),
}


def config(p: Preset, positions: str, data_dir: str = ""):
  """configs/shakespeare.py at the preset's sizes, under `positions`, dropout kept."""
  from configs import shakespeare
  c = shakespeare.get_config()
  c.model.update(p.model)
  c.model.positions = positions
  c.seq_len, c.batch_size = p.seq_len, p.batch
  c.data_dir, c.progress = data_dir, False
  return c


def rotation_fn(c, mcfg):
  """(jitted forward + backward of RoPE on one layer's q and k, its arguments)."""
  from attention.core import positions as P
  from attention.core.common import Dims
  B, T, H, Dh = int(c.batch_size), int(c.seq_len), mcfg.num_heads, mcfg.dh
  Hkv = mcfg.kv_heads
  d = Dims(B, T, T, H, Hkv, Dh, Dh)
  ks = jax.random.split(jax.random.key(0), 4)
  q, gq = (jax.random.normal(k, (B, T, H, Dh)) for k in ks[:2])
  k, gk = (jax.random.normal(k, (B, T, Hkv, Dh)) for k in ks[2:])

  def loss(q, k):
    pos = P.prepare("softmax", mcfg.position_spec, d)
    rq, rk = P.rotate_qk(pos, q, k)
    return jnp.sum(rq * gq) + jnp.sum(rk * gk)
  return jax.jit(jax.grad(loss, argnums=(0, 1))), (q, k)


def _round(arm, n: int) -> tuple[float, float]:
  """(steps/s of wall time, steps/s of this process's CPU time) of one round of n."""
  c0 = time.process_time()
  wall = arm.rates(1)[0]
  return wall, n / (time.process_time() - c0)


def _paired(none: list, rope: list) -> dict:
  """The paired share (1 - none / rope per rope round and its neighbours), its median
  and the median's 95% interval, from rates (steps/s) of either clock."""
  extra_ms, ratio = timing.paired(none, rope)
  shares = [1 - r for r in ratio]
  lo, hi, cover = timing.median_interval(shares)
  return {"extra_ms": extra_ms, "shares": shares, "share": float(np.median(shares)),
          "lo": lo, "hi": hi, "coverage": cover, "none_ms": 1e3 / float(np.median(none)),
          "rope_ms": 1e3 / float(np.median(rope))}


def measure(preset: str, data_dir: str, command: str, rounds: int | None = None) -> dict:
  """Both measurements (module docstring) on both clocks: wall time, and this
  process's CPU time (all its threads), which the other jobs of a shared machine
  inflate far less; the target is read on the CPU clock. rounds: the preset's, or
  this many. Returns the JSON record."""
  import trainer
  from studies.bench.train import Bare
  p = PRESETS[preset]
  if rounds:
    p = dataclasses.replace(p, rounds=int(rounds))
  arms = {s: Bare(config(p, s, data_dir), p.n) for s in ("none", "rope")}
  rates = {"none": [_round(arms["none"], p.n)], "rope": []}
  for _ in range(p.rounds):
    for s in ("rope", "none"):
      rates[s].append(_round(arms[s], p.n))
  clocks = {name: _paired([r[i] for r in rates["none"]], [r[i] for r in rates["rope"]])
            for i, name in enumerate(("wall", "cpu"))}
  c = config(p, "rope", data_dir)
  mcfg = trainer.validate(c)
  f, args = rotation_fn(c, mcfg)
  jax.block_until_ready(f(*args))
  t, c0 = time.perf_counter(), time.process_time()
  for _ in range(p.op_runs):
    jax.block_until_ready(f(*args))
  op = {"wall": (time.perf_counter() - t) / p.op_runs * 1e3,
        "cpu": (time.process_time() - c0) / p.op_runs * 1e3}
  for k, v in clocks.items():
    v["op_ms_per_layer"] = op[k]
    v["op_share"] = mcfg.num_layers * op[k] / v["rope_ms"]
  return {"run": pages.run_record(command, preset, what=p.what,
                                  load_avg_1min=os.getloadavg()[0]),
          "model": {k: getattr(mcfg, k) for k in
                    ("d_model", "num_heads", "num_layers", "d_ff", "max_len")},
          "seq_len": p.seq_len, "batch": p.batch, "steps_per_round": p.n,
          "rounds": p.rounds, "rates": rates, "target": TARGET, **clocks}


def verdict(d: dict, clock: str = "cpu") -> str:
  """The target in words, on `clock`'s paired share: met when its interval's upper
  end is <= 5%, missed when its lower end is above, unresolved otherwise."""
  s = d[clock]
  if s["hi"] <= d["target"]:
    return "met"
  return "missed" if s["lo"] > d["target"] else "unresolved"


def section(d: dict) -> list[str]:
  """The page's markdown lines for this measurement."""
  pct = lambda x: f"{100 * x:.1f}%"
  L = d["model"]["num_layers"]
  rows = []
  for k, name in (("cpu", "CPU time (all threads)"), ("wall", "wall time")):
    s = d[k]
    rows += [[name, "positions = none", f"{s['none_ms']:.0f}", ""],
             [name, "positions = rope", f"{s['rope_ms']:.0f}", ""],
             [name, "rope − none, paired rounds: median [95% interval]",
              f"{np.median(s['extra_ms']):.0f}",
              f"{pct(s['share'])} [{pct(s['lo'])}, {pct(s['hi'])}]"],
             [name, f"the rotation alone, fwd + bwd, × {L} layers",
              f"{s['op_ms_per_layer'] * L:.1f}", pct(s["op_share"])]]
  load = d["run"].get("load_avg_1min")
  return [pages.header(d["run"]) + f" {d['run'].get('what', '')}"
          + (f"; 1-minute load average {load:.1f} at the end." if load else "."), "",
          *pages.table(["clock", "", "ms per step", "share of the rope step"], rows), "",
          f"{d['rounds']} paired rounds of {d['steps_per_round']} steps (interval "
          f"coverage {100 * d['cpu']['coverage']:.0f}%). The rotation alone is an upper "
          "bound of its part of the step (in the step XLA fuses it into the q and k "
          "projections' outputs). Target (≤ 5% of a training step, read on the "
          f"CPU clock's paired interval): **{verdict(d)}**; on the wall clock: "
          f"{verdict(d, 'wall')}."
          + (" The paired difference is larger than the rotation alone: the rope step "
             "differs from the none step by more than the rotation's arithmetic (XLA "
             "compiles and fuses the two steps' graphs differently), which this study "
             "does not break down." if d["cpu"]["share"] > d["cpu"]["op_share"] else "")]
