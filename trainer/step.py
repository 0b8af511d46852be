"""The train step as one jitted pure function, and evaluation.

  step = TrainStep(model, opt, start)     # nnx.split once; the state lives in `step`
  for i, batch in ...:
    step(batch)                           # dispatches one update; no host sync
  m = step.fetch()                        # syncs once: mean loss since the last fetch
  step.write_back()                       # model, opt hold the current state again

Why not `nnx.jit(train_step)(model, opt, batch)`: nnx.jit walks and splits the
object graph in Python on every call (~17 ms per step for the paper's MNIST model on a
CPU, see results/benchmarks). Here the graph is split once, the state is a flat list
of arrays, and the step is a `jax.jit` of a pure function of (state, batch, carry)
that donates the state's buffers, so XLA updates the parameters and moments in place.
The dropout RNG state is part of the model state, so the function is pure.

Non-finite losses. The carry holds the sum of the finite losses, their count, the
step counter and `bad`: the first step whose loss was NaN or Inf (-1 if none). From
that step on, the update is not applied (the state stays the last good one) and the
loop, which reads the carry at each log, evaluation and checkpoint, stops with a
TrainError naming the step; nothing after it is ever saved.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainer import parallel, progress
from models.transformer import shift_right


# The keys of a packed batch (data.pipeline: segment ids and per-segment positions),
# passed by name to the model's nll.
PACKED_KEYS = ("src_seg", "src_pos", "y_seg", "y_pos")


def loss_fn(model, batch):
  """Weighted mean NLL (nats per counted token, float32) and the weight total.

  batch: {"y": (B, T) int32 targets, "w": (B, T) float32 weights, and for an
  encoder-decoder "src": (B, S) int32; packed rows add PACKED_KEYS (B, ·) int32}.
  The weights are 0 at padding, so only real tokens count.
  """
  packed = {k: batch[k] for k in PACKED_KEYS if k in batch}
  if "src" in batch:
    nll = model.nll(batch["src"], batch["y"], **packed)
  else:
    nll = model.nll(batch["y"], **packed)
  w = batch["w"]
  nll = nll.astype(jnp.float32)
  return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0), jnp.sum(w)


def update(model, opt, batch):
  """One optimizer update of (model, opt) in place (inside a trace); returns the loss.

  Gradients only for what the optimizer trains (LoRA: the adapters). With fsdp the
  parameters are all-gathered where they are used (ZeRO-3) and the updated state
  keeps its FSDP and tensor layout on the mesh.
  """
  diff = nnx.DiffState(0, opt.wrt)
  sharded_loss = lambda model, batch: parallel.gathered_call(loss_fn, model, batch)
  (loss, _), grads = nnx.value_and_grad(sharded_loss, argnums=diff, has_aux=True)(
      model, batch)
  opt.update(model, grads)
  parallel.constrain(model)
  parallel.constrain(opt, parallel.kv_heads(model))
  return loss


def new_carry(step: int, bad: int = -1) -> dict:
  """The metrics carried on the device between fetches (scalars)."""
  return {"loss": jnp.zeros((), jnp.float32), "n": jnp.zeros((), jnp.int32),
          "bad": jnp.asarray(bad, jnp.int32), "step": jnp.asarray(step, jnp.int32)}


def _pure_step(graph, treedef, leaves, batch, carry):
  """(leaves, carry) after one update; see the module docstring for `bad`."""
  model, opt = nnx.merge(graph, jax.tree.unflatten(treedef, leaves))
  loss = update(model, opt, batch)
  new = jax.tree.leaves(nnx.state((model, opt)))
  finite = jnp.isfinite(loss)
  ok = finite & (carry["bad"] < 0)
  # keep the last good state once a loss was non-finite (a select, fused by XLA
  # into the update's elementwise work)
  new = [jax.lax.select(ok, n, o) for n, o in zip(new, leaves)]
  carry = {"loss": carry["loss"] + jnp.where(ok, loss, 0.0),
           "n": carry["n"] + ok.astype(jnp.int32),
           "bad": jnp.where((carry["bad"] < 0) & ~finite, carry["step"], carry["bad"]),
           "step": carry["step"] + 1}
  return new, carry


@functools.lru_cache(maxsize=16)
def _compiled(graph, treedef, deterministic: bool):
  """The jitted step for one model structure (graph and treedef are hashable)."""
  opts = {"xla_gpu_deterministic_ops": True} if deterministic else None
  fn = functools.partial(_pure_step, graph, treedef)
  return jax.jit(fn, donate_argnums=(0, 2), compiler_options=opts)


class TrainStep:
  """The training state of (model, opt) as flat device arrays, and its jitted update.

  model, opt: an NNX model in train mode and its nnx.Optimizer (already sharded on
  the mesh in context, if any). start: the step number of the first update.
  deterministic: compile with XLA's deterministic GPU ops (bit-reproducible runs on
  a GPU, somewhat slower; the CPU is deterministic anyway).
  """

  def __init__(self, model, opt, start: int = 0, deterministic: bool = False):
    self.model, self.opt = model, opt
    graph, state = nnx.split((model, opt))
    self.leaves, treedef = jax.tree.flatten(state)
    self.fn = _compiled(graph, treedef, bool(deterministic))
    self.carry = new_carry(start)

  def __call__(self, batch: dict) -> None:
    """Dispatches one update on a device batch (parallel.put_batch); returns at once."""
    self.leaves, self.carry = self.fn(self.leaves, batch, self.carry)

  def fetch(self) -> dict:
    """Syncs with the device: {"loss": mean finite loss since the last fetch (nan if
    none), "steps": their count, "bad_step": first non-finite step or -1, "step"}."""
    c = jax.device_get(self.carry)
    n = int(c["n"])
    self.carry = new_carry(int(c["step"]), int(c["bad"]))
    return {"loss": float(c["loss"]) / n if n else math.nan, "steps": n,
            "bad_step": int(c["bad"]), "step": int(c["step"])}

  def write_back(self):
    """Puts the current state into self.model and self.opt (for evaluation and
    checkpoints); returns (model, opt). Later steps do not change them until the next
    write_back: the step's buffers are donated, the objects hold this state's arrays."""
    _, state = nnx.split((self.model, self.opt))
    treedef = jax.tree.structure(state)
    nnx.update((self.model, self.opt), jax.tree.unflatten(treedef, self.leaves))
    return self.model, self.opt

  def reload(self):
    """The inverse of write_back: takes the state of self.model, self.opt (e.g. after
    a restore) as the step's state."""
    self.leaves = jax.tree.leaves(nnx.state((self.model, self.opt)))


# ---- evaluation ------------------------------------------------------------------------

@functools.partial(nnx.jit, static_argnames="metric")
def eval_step(model, batch, metric=""):
  """(summed NLL, weight, correct, sequences) of one eval batch. correct counts, for
  metric "accuracy", sequences whose every counted token is the argmax of the
  teacher-forced prediction (the copy task); for "token_accuracy", counted tokens
  (weight > 0) that are the argmax (MQAR's answers; `evaluate` divides by the tokens,
  not the sequences); for "class_accuracy", sequences whose most likely class is the
  label (a classifier); otherwise 0."""
  loss, wsum = loss_fn(model, batch)
  w_B = batch["w"].reshape(batch["w"].shape[0], -1)
  real_B = jnp.any(w_B > 0, axis=-1)                # not a padding row of the last batch
  if metric in ("accuracy", "token_accuracy"):
    h = model(shift_right(batch["y"], model.cfg.start_id))
    hit_BT = jnp.argmax(model.head.log_probs(h), -1) == batch["y"]
    if metric == "accuracy":
      ok = jnp.all(hit_BT | (batch["w"] == 0), axis=-1) & real_B
    else:
      ok = hit_BT & (batch["w"] > 0)
  elif metric == "class_accuracy":
    ok = (jnp.argmax(model.forward_logp(batch["src"]), -1) == batch["y"][:, 0]) & real_B
  else:
    ok = jnp.zeros((), bool)
  return (loss * wsum, wsum, jnp.sum(ok).astype(jnp.float32),
          jnp.sum(real_B).astype(jnp.float32))


def evaluate(model, task, config, mesh=None, show=False) -> dict:
  """eval_loss (nats/token) plus the task metric on the task's eval batches; with a
  mesh, each batch is split over it like the training batches, and in a
  multi-process run each process reads only its rows of it (task.eval_rows =
  parallel.local_rows(mesh, eval_batch_size) while it evaluates). The sums stay on the
  device until the last batch. show: progress of the batches (and of BLEU's
  translations) on stdout (`trainer.progress`: a bar on a terminal, lines in a log)."""
  model.eval()
  sums = []
  n = int(config.get("eval_batches", 0))
  rows, B = None, None
  if mesh is not None and jax.process_count() > 1:
    # None where the processes' rows are no one block each: the whole batch is read
    B = int(config.eval_batch_size)
    rows = parallel.local_rows(mesh, B)
  bar = progress.bar(n or None, "eval", unit="batch", leave=False) if show else None
  if rows is not None:
    task.eval_rows = rows
  try:
    for batch in task.eval_batches():
      batch = (parallel.put_batch(batch, mesh, B)
               if mesh is not None else {k: jnp.asarray(v) for k, v in batch.items()})
      sums.append(eval_step(model, batch, metric=task.metric))
      if bar is not None:
        bar.update(1)
  finally:
    if rows is not None:
      task.eval_rows = None
  if bar is not None:
    bar.close()
  model.train()
  tot, wt, good, n = (float(np.sum(x)) for x in zip(*jax.device_get(sums))) if sums \
      else (0.0, 0.0, 0.0, 0.0)
  out = {"eval_loss": tot / max(wt, 1.0), "eval_sequences": int(n)}
  if task.metric in ("bits_per_dim", "bits_per_char"):
    out[task.metric] = out["eval_loss"] / math.log(2)
  elif task.metric in ("accuracy", "class_accuracy"):
    out["accuracy"] = good / max(n, 1)
  elif task.metric == "token_accuracy":
    out["token_accuracy"] = good / max(wt, 1.0)
  elif task.metric == "bleu":
    out["bleu"] = bleu(model, task, config, show=show)
  return out


def bleu(model, task, config, show=False) -> float:
  """Corpus BLEU (sacrebleu) of beam/greedy translations of validation sentences
  (show: their progress on stdout, as `evaluate`'s)."""
  import sacrebleu
  from models.generate import best_mode, translate
  src, _, refs = task.splits[task.eval_split]
  mode = best_mode(model)    # a decoder variant without a decode state recomputes
  n = min(len(src), int(config.get("bleu_sentences", 256)))
  B = int(config.eval_batch_size)
  hyps = []
  bar = progress.bar(n, "BLEU translations", unit="sent", leave=False) if show else None
  for i in range(0, n, B):
    chunk = src[i:i + B]
    toks, _ = translate(model, chunk, max_len=int(config.tgt_len),
                        beam_size=int(config.get("beam_size", 0)),
                        alpha=float(config.get("length_penalty", 0.6)), mode=mode)
    hyps += [task.detokenize(t) for t in np.asarray(toks)]
    if bar is not None:
      bar.update(len(chunk))
  if bar is not None:
    bar.close()
  return float(sacrebleu.corpus_bleu(hyps, [refs[:n]]).score)
