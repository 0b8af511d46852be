"""What one finished run of the length study measures (studies.length.runner calls
`measure` in the run's child process, after training):

  validation  bits/byte on the first eval_tokens bytes of the validation split: the
              training loop's own final evaluation (metrics.jsonl), what the rate
              choice reads (protocol.Validation)
  test        bits/byte on the first eval_tokens bytes of the test split, from the
              model's per-position loss (model.nll over whole windows, one jitted call a
              batch: no Python loop per token), split into the recall positions
              (data.recall_mask with the preset's n: bytes that continue an (n+1)-gram
              seen earlier in the same window, Zoology's "hits") and the rest
              (`split_sums`, `from_sums`: recall and rest recombine to the total,
              weighted by their byte counts)
  cost        train tokens/s (runs.rates: the log intervals after the first), the XLA
              memory plan of one forward+backward step on a train batch (CPU; a GPU's
              peak bytes: studies.variants.measure.train_memory), decode microseconds a
              token with a decode state sized for the run's length (`decode_us`), and
              the model's decode-state bytes at that length (models.count.
              decode_state_bytes, batch 1)
  curve       [[step, train bits/byte], ...]: the training loop's mean train loss over
              each log interval (`train_curve`), which says whether the run ended still
              learning (studies.length.results.late_drop)
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np

LN2 = math.log(2)
PARTS = ("total", "recall", "rest")


def split_sums(nll_BT, w_BT, mask_BT) -> dict:
  """{part: [nats summed, bytes counted]} of one batch: every weighted byte (total),
  those at a recall position (mask True) and the others (rest). Padding (weight 0)
  counts in none."""
  nll = np.asarray(nll_BT, np.float64)
  w = np.asarray(w_BT, np.float64)
  m = np.asarray(mask_BT, bool)
  if not nll.shape == w.shape == m.shape:
    raise ValueError(f"split_sums: shapes {nll.shape}, {w.shape}, {m.shape} differ")
  out = {}
  for part, sel in (("total", np.ones_like(m)), ("recall", m), ("rest", ~m)):
    ws = w * sel
    out[part] = [float((nll * ws).sum()), float(ws.sum())]
  return out


def add_sums(a: dict | None, b: dict) -> dict:
  """Two split_sums added part by part."""
  if a is None:
    return {k: list(v) for k, v in b.items()}
  return {k: [a[k][0] + b[k][0], a[k][1] + b[k][1]] for k in PARTS}


def from_sums(s: dict) -> dict:
  """{"bits_per_byte", "recall_bits", "rest_bits", "recall_fraction", "bytes"} from
  summed split_sums (nats -> bits; a part with no byte: None)."""
  bits = {k: (s[k][0] / s[k][1] / LN2 if s[k][1] else None) for k in PARTS}
  n = s["total"][1]
  return {"bits_per_byte": bits["total"], "recall_bits": bits["recall"],
          "rest_bits": bits["rest"], "recall_fraction": s["recall"][1] / n if n else None,
          "bytes": int(n)}


def test_split(model, config, n: int) -> dict:
  """`from_sums` over the eval batches of config's eval split (config.eval_split,
  config.eval_batches of them), the recall positions by data.recall_mask(y, n)."""
  import jax
  from flax import nnx
  from data import pipeline
  from data.recall import recall_mask
  task = pipeline.create(config)
  model.eval()
  nll = nnx.jit(lambda m, y: m.nll(y))
  sums, k = None, int(config.eval_batches)
  for i, b in enumerate(task.eval_batches()):
    if k and i >= k:
      break
    y = np.asarray(b["y"])
    sums = add_sums(sums, split_sums(jax.device_get(nll(model, y)), b["w"],
                                     recall_mask(y, n)))
  return from_sums(sums)


def validation_figure(workdir) -> float | None:
  """bits/byte of the training loop's last evaluation on validation (metrics.jsonl)."""
  from studies.core import runs
  recs = runs.records_with(runs.read_metrics(workdir), "bits_per_char")
  return float(recs[-1]["bits_per_char"]) if recs else None


def train_curve(workdir) -> list[list]:
  """[[step, bits/byte], ...] of a run: metrics.jsonl's train_loss (the mean over each log
  interval, nats a byte) in bits, by step; a step logged twice (a resumed run) keeps its
  last record."""
  from studies.core import runs
  by = {int(r["step"]): float(r["train_loss"]) / LN2
        for r in runs.records_with(runs.read_metrics(workdir), "train_loss")}
  return [[s, by[s]] for s in sorted(by)]


def decode_us(model, length: int, tokens: int = 16, runs: int = 3) -> float:
  """Microseconds a token of `tokens` decode steps (model.step_logp, batch 1, one jitted
  scan) at the last positions of a decode state sized for `length` positions: the
  median of `runs` timed calls after a warm-up."""
  import jax
  import jax.numpy as jnp
  from flax import nnx
  model.eval()
  gdef, st = nnx.split(model)
  pos0 = max(0, int(length) - tokens)

  @jax.jit
  def run(st, state):
    m = nnx.merge(gdef, st)

    def body(carry, i):
      state, tok = carry
      logp, state = m.step_logp(tok, state, pos0 + i)
      return (state, jnp.argmax(logp[:, -1], -1)[:, None].astype(jnp.int32)), None
    (state, tok), _ = jax.lax.scan(body, (state, jnp.zeros((1, 1), jnp.int32)),
                                   jnp.arange(tokens))
    return tok
  fresh = lambda: model.init_state(1, int(length))
  jax.block_until_ready(run(st, fresh()))
  ts = []
  for _ in range(runs):
    s = jax.block_until_ready(fresh())
    t = time.perf_counter()
    jax.block_until_ready(run(st, s))
    ts.append(time.perf_counter() - t)
  return statistics.median(ts) / tokens * 1e6


def measure(workdir, config, n: int) -> dict:
  """Every figure of a finished run (the module docstring): {"validation", "test":
  test_split, "cost": {...}}."""
  import trainer
  from models import count
  from studies.core import runs
  from studies.variants.measure import train_memory
  _, model, _ = trainer.load_model(workdir)
  tc = config.copy_and_resolve_references()
  tc.eval_split = "test"
  test = test_split(model, tc, n)
  steps_per_s, _, params = runs.rates(workdir)
  L = int(config.seq_len)
  cost = {"train_tokens_per_s": (steps_per_s or 0) * int(config.batch_size) * L,
          "steps_per_s": steps_per_s, "params": params,
          "decode_us_per_token": decode_us(model, L),
          "state_bytes": int(count.decode_state_bytes(model.cfg, L)),
          **train_memory(workdir, config)}
  return {"validation": validation_figure(workdir), "test": test, "cost": cost,
          "curve": train_curve(workdir)}
