"""What applying RoPE costs in a training step at the shakespeare config (issue 39's
target: at most 5% of the step), measured two ways in one process:

  step  configs/shakespeare.py's training step (`studies.benchmark_train.Bare`:
        trainer.step.TrainStep over batches already on the device, rounds of n steps
        with no host sync) with model.positions = "rope" against the same model with
        "none" (nothing added anywhere: the step without positions), rounds
        interleaved none, rope, none, ..., none. Each rope round pairs with the mean
        of the none rounds around it (`studies.timing.paired`), so the shared
        machine's drift cancels in the pair; the share is 1 - none / rope per pair,
        its median with the median's distribution-free 95% interval.
  op    the rotation alone, forward and backward (`attention.positions.rotate_qk` of
        q and k at the step's shapes, as one jitted function with its own angles),
        times the number of layers, over the rope step's median time: an upper
        bound of what the rotation adds, since in the step XLA fuses it into the
        projections' outputs instead of running it as a kernel of its own.

Results go to results/positions/rope_cost.json (`measure`), which the positions page
states (`studies.positions`).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from studies import pages, timing

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
  from attention import positions as P
  from attention.common import Dims
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


def measure(preset: str, data_dir: str, command: str) -> dict:
  """Both measurements (module docstring); the JSON record."""
  import train
  from studies.benchmark_train import Bare
  p = PRESETS[preset]
  arms = {s: Bare(config(p, s, data_dir), p.n) for s in ("none", "rope")}
  none, rope = arms["none"].rates(1), []
  for _ in range(p.rounds):
    rope += arms["rope"].rates(1)
    none += arms["none"].rates(1)
  over_ms, ratio = timing.paired(none, rope)
  shares = [1 - r for r in ratio]
  lo, hi, cover = timing.median_interval(shares)
  c = config(p, "rope", data_dir)
  mcfg = train.validate(c)
  f, args = rotation_fn(c, mcfg)
  _, op_s = timing.timed(lambda: f(*args), runs=p.op_runs)
  step_rope_ms = 1e3 / np.median(rope)
  op_share = mcfg.num_layers * op_s * 1e3 / step_rope_ms
  return {"run": pages.run_record(command, preset, what=p.what),
          "model": {k: getattr(mcfg, k) for k in
                    ("d_model", "num_heads", "num_layers", "d_ff", "max_len")},
          "seq_len": p.seq_len, "batch": p.batch, "steps_per_round": p.n,
          "none_steps_per_s": none, "rope_steps_per_s": rope,
          "step_none_ms": 1e3 / np.median(none), "step_rope_ms": step_rope_ms,
          "pair_extra_ms": over_ms, "pair_shares": shares,
          "share": float(np.median(shares)), "share_lo": lo, "share_hi": hi,
          "share_coverage": cover,
          "op_ms_per_layer": op_s * 1e3, "op_share": op_share, "target": TARGET}


def verdict(d: dict) -> str:
  """The target in words: met when the interval's upper end is <= 5%, missed when its
  lower end is above, unresolved otherwise."""
  if d["share_hi"] <= d["target"]:
    return "met"
  return "missed" if d["share_lo"] > d["target"] else "unresolved"


def section(d: dict) -> list[str]:
  """The page's markdown lines for this measurement."""
  pct = lambda x: f"{100 * x:.1f}%"
  L = d["model"]["num_layers"]
  rows = [["positions = none", f"{d['step_none_ms']:.0f}", ""],
          ["positions = rope", f"{d['step_rope_ms']:.0f}", ""],
          ["rope - none, paired rounds (median, 95% interval)",
           f"{np.median(d['pair_extra_ms']):.1f}",
           f"{pct(d['share'])} [{pct(d['share_lo'])}, {pct(d['share_hi'])}] "
           f"({100 * d['share_coverage']:.0f}% coverage)"],
          [f"the rotation alone, fwd + bwd, x {L} layers",
           f"{d['op_ms_per_layer'] * L:.1f}", pct(d["op_share"])]]
  return [pages.header(d["run"]) + f" {d['run'].get('what', '')}.", "",
          *pages.table(["", "ms per step", "share of the rope step"], rows), "",
          f"Target (≤ {pct(d['target'])} of a training step, the paired share's "
          f"interval): **{verdict(d)}** ({len(d['pair_shares'])} paired rounds of "
          f"{d['steps_per_round']} steps)."]
