"""Per-device memory of ring attention against sequence length, over 1, 2, 4, 8
devices: `results/ring_memory/`.

For each length N and device count P it compiles, without running, causal ring
attention forward + backward (the gradient of sum(out) with respect to q, k and v)
with the sequence split over a mesh axis "seq" of P devices, and reads XLA's
per-device memory (`studies.core.timing.memory_plan`): arguments (the q, k, v shards) +
outputs (the dq, dk, dv shards, less what aliases the arguments) + temporaries.
P = 1 is `flash` (what ring is on one device); plain `softmax` on one device is
shown for contrast. Needs 8 devices: the script simulates them on the CPU
(--xla_force_host_platform_device_count=8, set before jax starts).
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import attention
from trainer import parallel
from studies.core import pages, plots, timing

DEVICES = (1, 2, 4, 8)
MiB = 2 ** 20


def per_device_bytes(name, n_devices, T, B, H, D):
  """[arguments, outputs, temporaries] bytes per device of the compiled fwd + bwd."""
  if jax.device_count() < n_devices:
    raise RuntimeError(f"ring memory needs {n_devices} devices, jax sees "
                       f"{jax.device_count()}: set XLA_FLAGS=--xla_force_host_platform_"
                       f"device_count={max(DEVICES)} before jax starts")
  mesh = Mesh(np.array(jax.devices()[:n_devices]), ("seq",))
  spec = NamedSharding(mesh, P(None, "seq"))
  x = jax.ShapeDtypeStruct((B, T, H, D), jnp.float32, sharding=spec)
  fn = attention.get(name)
  grad = jax.jit(jax.grad(lambda q, k, v: fn(q, k, v, causal=True).sum(), argnums=(0, 1, 2)),
                 out_shardings=(spec, spec, spec))
  with parallel.use_mesh(mesh):
    m = timing.memory_plan(grad.lower(x, x, x).compile())
  return [m["argument_bytes"], m["output_bytes"] - m["alias_bytes"], m["temp_bytes"]]


def measure(lens, B, H, D, command, log=print) -> dict:
  """{"parts": {N: {P: [args, outputs, temps]}}, "softmax": {N: bytes}, ...}."""
  parts, softmax = {}, {}
  for T in lens:
    parts[T] = {}
    for p in DEVICES:
      a, o, t = parts[T][p] = per_device_bytes("ring", p, T, B, H, D)
      log(f"N={T} P={p}: {(a + o + t) / MiB:.1f} MiB per device (args {a / MiB:.1f}, "
          f"out {o / MiB:.1f}, temp {t / MiB:.1f})")
    softmax[T] = sum(per_device_bytes("softmax", 1, T, B, H, D))
    log(f"N={T} softmax: {softmax[T] / MiB:.1f} MiB")
  return dict(run=pages.run_record(command, None, simulated_devices=jax.device_count()),
              shape=dict(B=B, H=H, D=D), lens=list(lens), parts=parts, softmax=softmax)


def plot(path, lens, rows, softmax):
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  for p in DEVICES:
    ax.plot(lens, [rows[T][p] / MiB for T in lens], "o-",
            label=f"ring, {p} device{'s' if p > 1 else ''}" + (" (= flash)" if p == 1 else ""))
  ax.plot(lens, [softmax[T] / MiB for T in lens], "k--", label="softmax, 1 device")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log", base=2)
  ax.set_xlabel("sequence length N")
  ax.set_ylabel("memory per device (MiB)")
  ax.set_title("causal attention forward + backward, per device")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  plots.save(fig, path, dpi=110)


def _temporaries(lens, parts, rows) -> str:
  """What the table says of the temporaries and of the total against P, in words."""
  worse = [T for T in lens if any(rows[T][p] > rows[T][1] for p in DEVICES[1:])]
  s = (" The temporaries do not: ring's buffers come on top of flash's tiles, so the "
       "total falls more slowly than 1 / P")
  if worse:
    T = worse[0]
    p = next(p for p in DEVICES[1:] if rows[T][p] > rows[T][1])
    s += (f", and at N = {', '.join(map(str, worse))} some split plans more per device "
          f"than one device holding everything (N = {T}: {rows[T][p] / MiB:.1f} MiB on "
          f"each of {p} devices against {rows[T][1] / MiB:.1f} on one; temporaries "
          f"{parts[T][p][2] / MiB:.1f} against {parts[T][1][2] / MiB:.1f})")
  ratio = {T: rows[T][8] / rows[T][1] for T in lens}
  return (s + ". On 8 devices each needs " + ", ".join(
      f"{ratio[T]:.2f} (N = {T})" for T in lens) + " of what one device needs alone. "
      "By N / P, the length a device holds, not N, sets the memory once P ≥ 2: "
      "O(N / P).")


def write(r: dict, out: str) -> None:
  """memory.json, memory.png and README.md of `out` from `measure`'s record."""
  pages.write_json(os.path.join(out, "memory.json"), r)
  lens, s = r["lens"], r["shape"]
  parts = {int(T): {int(p): v for p, v in d.items()} for T, d in r["parts"].items()}
  softmax = pages.keyed(r["softmax"])
  rows = {T: {p: sum(v) for p, v in d.items()} for T, d in parts.items()}
  plot(os.path.join(out, "memory.png"), lens, rows, softmax)
  lines = [
      "# Ring attention: memory per device against sequence length",
      "",
      pages.header(r["run"]) + f" With {r['run']['simulated_devices']} simulated CPU "
      "devices (`--xla_force_host_platform_device_count=8`); the page is rewritten from "
      "`memory.json` by `python -m scripts.ring_memory --page_only`.",
      "",
      f"Causal attention, B={s['B']}, {s['H']} heads, head dim {s['D']}, float32; "
      "forward and backward (the gradient of sum(out) with respect to q, k, v), "
      "compiled and not run. Each entry is XLA's per-device "
      "`compiled.memory_analysis()`: arguments (q, k, v shards) + outputs (dq, dk, dv "
      "shards) + temporaries, in MiB. The sequence is split over P devices of the mesh "
      "axis `seq`; P = 1 is `flash`, which is what `ring` is on one device.",
      ""]
  lines += pages.table(
      ["N"] + [f"ring, P={p}" for p in DEVICES] + ["P=8 / P=1", "softmax, 1 device"],
      [[T] + [f"{rows[T][p] / MiB:.1f}" for p in DEVICES]
       + [f"{rows[T][8] / rows[T][1]:.2f}", f"{softmax[T] / MiB:.1f}"] for T in lens])
  local = sorted({T // p for T in lens for p in DEVICES if T // p in rows})
  lines += [
      "",
      "The same numbers by the length each device holds, N / P: ring's memory per "
      "device depends on N / P, not on N. The P = 1 column is flash on one device "
      "with that whole length; the difference is ring's extra shard-sized buffers (the "
      "visiting K/V shard and the one in flight, the dK/dV accumulators that travel "
      "with them).",
      ""]
  lines += pages.table(
      ["N / P"] + [f"P={p}" for p in DEVICES],
      [[n] + [f"{rows[n * p][p] / MiB:.1f} (N={n * p})" if n * p in rows else ""
              for p in DEVICES] for n in local])
  T = lens[-1]
  lines += [
      "",
      f"At N = {T}, per device (MiB): "
      + "; ".join(f"P={p}: arguments {parts[T][p][0] / MiB:.1f}, outputs "
                  f"{parts[T][p][1] / MiB:.1f}, temporaries {parts[T][p][2] / MiB:.1f}"
                  for p in DEVICES) + ".",
      "",
      "![memory per device](memory.png)",
      "",
      "What a device holds: its N / P shard of q, k, v, out and the gradients, the "
      "visiting K/V shard and the one in flight, the travelling dK/dV accumulators, "
      "and flash's tile temporaries (up to 512 × 512 scores per head, so a constant "
      "once a device holds 512 positions or more); never the whole sequence. For a "
      "given N, the shard-sized part (arguments and outputs above) falls exactly as "
      "1 / P." + _temporaries(lens, parts, rows) + " softmax builds the N × N score "
      "matrix: O(N²). These are XLA's planned buffer sizes for one device's program; "
      "the simulated devices share one host's memory, so nothing here is a measured "
      "peak on real accelerators."]
  pages.write_text(os.path.join(out, "README.md"), lines)
