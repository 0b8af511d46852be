"""trainer/: the functional train step equals the object-style nnx step, remat and
bf16 change the computation as documented, the prefetcher hands out the loop's
batches in order and stops when asked, the progress bar counts completed steps, a
restarted run's metrics keep one record per step, one writer per workdir."""
import io
import json
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import trainer
from configs import mnist
from models import build
from trainer import loop, step as steps
from tests.reference import jitted


def cfg(**model):
  """A one-layer model 16 wide with dropout on: what these tests check (the pure step's
  updates and dropout masks, remat's recomputation of a block, bf16 matmuls) happens
  in each block alike, and one layer compiles about half the program of two."""
  c = mnist.get_config()
  c.model.update(dict(d_model=16, num_heads=2, d_ff=32, num_layers=1, dropout=0.1), **model)
  c.image_size = 4
  c.warmup_steps = 1
  return c


def batch(seed=0, B=4, T=16):
  y = jnp.asarray(np.random.default_rng(seed).integers(0, 256, (B, T)), jnp.int32)
  return {"y": y, "w": jnp.ones(y.shape, jnp.float32)}


def fresh(c):
  mcfg = trainer.validate(c)
  model = build(mcfg, rngs=nnx.Rngs(params=0, dropout=1))
  model.train()
  return model, nnx.Optimizer(model, trainer.make_optimizer(c), wrt=nnx.Param)


def run_steps(c, n=2, **kw):
  model, opt = fresh(c)
  ts = trainer.TrainStep(model, opt, 0, **kw)
  for i in range(n):
    ts(batch(i))
  info = ts.fetch()
  ts.write_back()
  return info, jax.tree.leaves(nnx.state(model, nnx.Param))


@pytest.fixture(scope="module")
def reference():
  """Two updates by the plain object-style step: nnx.jit over (model, opt)."""
  c = cfg()
  model, opt = fresh(c)

  @nnx.jit
  def step(model, opt, b):
    return steps.update(model, opt, b)

  losses = [float(step(model, opt, batch(i))) for i in range(2)]
  return losses, jax.tree.leaves(nnx.state(model, nnx.Param))


def test_functional_step_equals_the_nnx_step(reference):
  """Same updates, same dropout masks (the RNG state flows through the pure step)."""
  info, params = run_steps(cfg())
  assert info["steps"] == 2 and info["bad_step"] == -1 and info["step"] == 2
  np.testing.assert_allclose(info["loss"], np.mean(reference[0]), rtol=1e-6)
  for a, b in zip(params, reference[1]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_second_run_of_the_same_config_reuses_the_compiled_step():
  """make_optimizer gives one transformation per hyperparameters (optax's closures
  never compare equal), so the (model, opt) graph of a second run equals the first's
  and trainer.step's cache hands back its jitted step: no second compilation."""
  c = cfg()
  assert trainer.make_optimizer(c) is trainer.make_optimizer(c.copy_and_resolve_references())
  d = cfg()
  d.learning_rate = 2 * c.learning_rate
  assert trainer.make_optimizer(d) is not trainer.make_optimizer(c)
  run_steps(c, n=1)
  before = steps._compiled.cache_info()
  run_steps(c, n=1)
  after = steps._compiled.cache_info()
  assert (after.hits, after.misses) == (before.hits + 1, before.misses)


# "full" only: "block" is the same models.transformer._remat_block under another of
# jax's checkpoint policies (REMAT_POLICY), one more compiled step for no code path of
# ours; "full"'s step is the one the memory check below reads
@pytest.mark.parametrize("remat", ["full"])
def test_remat_gives_the_same_updates(reference, remat):
  """Rematerialisation recomputes the forward pass in the backward pass: the same
  arithmetic, so the same parameters (bit-exact on a CPU; to rounding elsewhere)."""
  _, params = run_steps(cfg(remat=remat))
  for a, b in zip(params, reference[1]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_remat_full_keeps_less_for_the_backward_pass():
  """XLA's temp buffer of the train step: full remat keeps only block inputs. The
  steps compiled are those the tests above run (trainer.step._compiled of cfg() with
  remat none and full, at their batch shape): the suite's compilation cache hands
  them back (on a CPU, 256 KB against 278 KB of temporaries)."""
  def temp(remat):
    model, opt = fresh(cfg(remat=remat))
    g, st = nnx.split((model, opt))
    leaves, tdef = jax.tree.flatten(st)
    f = steps._compiled(g, tdef, False)
    return f.lower(leaves, batch(0), steps.new_carry(0)).compile().memory_analysis() \
        .temp_size_in_bytes
  assert temp("full") < temp("none")


def test_bf16_computes_in_bf16_with_float32_parameters_and_loss(reference):
  c = cfg(dtype="bfloat16")
  model, opt = fresh(c)
  g, st = nnx.split(model)
  loss_of = lambda st, b: steps.loss_fn(nnx.merge(g, st), b)
  # traced, not run: an eager call compiles every op of the model on its own
  loss, _ = jax.eval_shape(loss_of, st, batch(0))
  assert loss.dtype == jnp.float32
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  # the projections and the FFN multiply in bf16 (the residual stream, the norms and
  # the attention's softmax statistics stay float32)
  jaxpr = jax.make_jaxpr(loss_of)(st, batch(0))
  assert ("bfloat16", "bfloat16") in dot_operand_dtypes(jaxpr.jaxpr)
  info, params = run_steps(c)
  # bf16 has an 8-bit mantissa: the loss agrees with float32 to ~1e-2 relative
  np.testing.assert_allclose(info["loss"], np.mean(reference[0]), rtol=2e-2)


def test_deterministic_runs_are_bit_identical(reference):
  """config.deterministic compiles with XLA's deterministic GPU ops: two runs give
  the same bits (on a GPU, scatter-adds and some reductions otherwise are not), and
  the result is the step's (to rounding)."""
  _, a = run_steps(cfg(), deterministic=True)
  _, b = run_steps(cfg(), deterministic=True)
  for x, y, r in zip(a, b, reference[1]):
    np.testing.assert_array_equal(x, y)
    # another order of summation than the reference step's: on an H200 (2026-11-26)
    # one parameter of 256 differed by 1.4e-7 (7e-6 relative) after the steps
    np.testing.assert_allclose(x, r, rtol=1e-5, atol=1e-6)


def dot_operand_dtypes(jaxpr, out=None):
  """{(lhs dtype, rhs dtype)} of every dot_general in a jaxpr and its sub-jaxprs."""
  out = set() if out is None else out
  for e in jaxpr.eqns:
    if e.primitive.name == "dot_general":
      out.add(tuple(str(v.aval.dtype) for v in e.invars))
    for p in e.params.values():
      sub = getattr(p, "jaxpr", None)
      if sub is not None:
        dot_operand_dtypes(getattr(sub, "jaxpr", sub), out)
  return out


class FakeTask:
  def __init__(self, fail_at=None):
    self.fail_at = fail_at

  def train_batch(self, s):
    if s == self.fail_at:
      raise OSError(f"cannot read batch {s}")
    return {"y": np.full((2, 4), s, np.int32)}


@pytest.mark.parametrize("depth", [0, 3])
def test_prefetch_hands_out_the_steps_in_order(depth):
  mesh = jax.make_mesh((1, 1, 1), ("data", "fsdp", "seq"))
  p = loop.Prefetch(FakeTask(), mesh, 5, 9, depth)
  got = [int(next(p)["y"][0, 0]) for _ in range(4)]
  p.close()
  assert got == [5, 6, 7, 8]


def test_prefetch_raises_the_threads_error():
  mesh = jax.make_mesh((1, 1, 1), ("data", "fsdp", "seq"))
  p = loop.Prefetch(FakeTask(fail_at=6), mesh, 5, 9, 2)
  next(p)
  with pytest.raises(OSError, match="batch 6"):
    next(p)
  p.close()


def test_evaluate_counts_the_whole_split_and_no_padding_row():
  """8 eval sequences in batches of 3: the last batch is padded with zero-weight rows,
  which count in neither the loss nor the sequence count (the whole split, once)."""
  import types
  from data import pipeline
  c = cfg()
  c.update(eval_batch_size=3, eval_batches=0)
  model, _ = fresh(c)
  x = np.asarray(batch(5, B=8)["y"])
  batches = list(pipeline._fixed_batches(x, c))
  assert [b["y"].shape for b in batches] == [(3, 16)] * 3
  assert [float(b["w"].sum()) for b in batches] == [48.0, 48.0, 32.0]
  task = types.SimpleNamespace(eval_batches=lambda: iter(batches), metric="bits_per_dim")
  out = steps.evaluate(model, task, c)
  model.eval()
  whole, _ = jitted(model, steps.loss_fn, {"y": jnp.asarray(x), "w": jnp.ones(x.shape)})
  assert out["eval_sequences"] == 8
  np.testing.assert_allclose(out["eval_loss"], float(whole), rtol=1e-5)


class GatedTask(FakeTask):
  """Batch `gate_at` waits for `gate` (a stalled read)."""

  def __init__(self, gate_at):
    super().__init__()
    self.gate_at, self.gate = gate_at, threading.Event()

  def train_batch(self, s):
    if s == self.gate_at:
      self.gate.wait(30)
    return super().train_batch(s)


def test_prefetch_waits_interruptibly_and_close_joins_the_thread(capsys):
  """`next` waiting for a stalled batch gives way to `interrupted()` (a signal's
  flag); `close` waits for the thread (it must not be inside jaxlib when the
  interpreter exits), and leaves a thread stalled past its timeout with one line."""
  mesh = jax.make_mesh((1, 1, 1), ("data", "fsdp", "seq"))
  stop = []
  task = GatedTask(gate_at=6)
  p = loop.Prefetch(task, mesh, 5, 9, 2, interrupted=lambda: bool(stop))
  assert int(next(p)["y"][0, 0]) == 5
  threading.Timer(0.2, stop.append, [True]).start()
  with pytest.raises(loop.Interrupted):
    next(p)                                     # batch 6 never comes
  p.close(timeout=0.2)
  assert p.thread.is_alive()
  assert capsys.readouterr().err == ("the input thread has not finished a batch in "
                                     "0.2 s; leaving it\n")
  task.gate.set()
  p.thread.join(10)
  assert not p.thread.is_alive()
  q = loop.Prefetch(FakeTask(), mesh, 0, 100, 2)
  next(q)
  q.close()                          # the thread was blocked on a full queue
  assert not q.thread.is_alive() and capsys.readouterr().err == ""


def test_progress_counts_a_step_when_it_completes_not_when_it_is_dispatched(monkeypatch):
  """The bar follows the device: a marker of each step (a copy of its output) is
  polled without blocking, and the step counts once its marker is ready (a fake
  marker decides when: no test of how long a computation takes); a real marker
  becomes ready after its step; a host sync moves the bar to the synced step."""
  class Marker:                      # a jax.Array's is_ready, set by the test
    ready = False

    def is_ready(self):
      return self.ready

  marker = Marker()
  with monkeypatch.context() as m:
    m.setattr(loop, "_mark", lambda x: marker)
    p = loop.Progress(0, 3, every_s=0, file=io.StringIO())
    p.dispatched(1, jnp.zeros(()))
    p.poll()
    assert p.done == 0 and p.bar.n == 0 and len(p.pending) == 1   # dispatched, running
    marker.ready = True
    p.poll()
    assert p.done == 1 and p.bar.n == 1 and not p.pending
    p.synced(3)
    assert p.done == 3 and p.bar.n == 3
    p.close()
  out = jnp.ones((8, 8)) @ jnp.ones((8, 8))   # the real marker follows its step
  p = loop.Progress(0, 3, every_s=0, file=io.StringIO())
  p.dispatched(1, out)
  out.block_until_ready()
  for _ in range(500):
    p.poll()
    if p.done:
      break
    time.sleep(0.01)
  assert p.done == 1 and p.bar.n == 1 and not p.pending
  p.close()
  q = loop.Progress(0, 3, every_s=60, file=io.StringIO())
  q.dispatched(1, out)
  q.dispatched(2, out)               # within every_s of the first: no new marker
  assert [s for s, _ in q.pending] == [1]
  q.close()


def test_metrics_of_a_restarted_run_keep_one_record_per_step(tmp_path, capsys):
  """A run resumed at step 4 sets aside the records after 4 (and a line cut by a
  kill), keeps step 4's own records but not an earlier resume mark at 4; a fresh run
  (start 0) sets aside everything; purge_step goes to TensorBoard."""
  from trainer import metrics
  path = tmp_path / "metrics.jsonl"
  lines = [{"step": 0, "params": 1}, {"step": 2, "train_loss": 1.0},
           {"step": 4, "train_loss": 0.5}, {"step": 4, "eval_loss": 0.6},
           {"step": 4, "resumed_at_step": 4}, {"step": 6, "train_loss": 0.4}]
  path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 8, "tr')
  m = metrics.Metrics(str(tmp_path), quiet=True, start=4)
  assert m.tb.purge_step == 5
  m.write(4, resumed_at_step=4)
  m.close()
  got = [json.loads(l) for l in path.read_text().splitlines()]
  assert got == lines[:4] + [{"step": 4, "resumed_at_step": 4}]
  aside = [json.loads(l) for l in (tmp_path / metrics.SET_ASIDE).read_text().splitlines()]
  assert aside == [{"step": 4, "resumed_at_step": 4, "set_aside_at_start": 4},
                   {"step": 6, "train_loss": 0.4, "set_aside_at_start": 4},
                   {"unparsed": '{"step": 8, "tr', "set_aside_at_start": 4}]
  assert "3 records of an earlier run after step 4 moved" in capsys.readouterr().out
  assert metrics.keep_until(str(path), 0) == 5 and path.read_text() == ""
  assert metrics.keep_until(str(tmp_path / "none.jsonl"), 3) == 0


def test_one_writer_per_workdir(tmp_path):
  """A second lock on a workdir in use is refused, naming the holder; released (as
  the kernel does when the holder dies), the workdir is free again."""
  from trainer import checkpoint as ckpt
  wd = str(tmp_path / "w")
  with ckpt.WorkdirLock(wd):
    with pytest.raises(trainer.TrainError, match=(
        rf"workdir {wd} is in use by process {os.getpid()} on host \S+ since "
        r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.*\); wait for that run to end")):
      ckpt.WorkdirLock(wd).acquire()
  assert not os.path.exists(wd)     # created by the lock, nothing written: removed
  os.makedirs(wd)
  with ckpt.WorkdirLock(wd):
    pass
  assert os.listdir(wd) == [".lock"]  # it was there before: it stays
  with ckpt.WorkdirLock(str(tmp_path / "new")):
    (tmp_path / "new" / "config.json").write_text("{}")
  assert sorted(os.listdir(tmp_path / "new")) == [".lock", "config.json"]
  (tmp_path / "f").write_text("")
  with pytest.raises(trainer.TrainError, match="is a file, not a directory"):
    ckpt.WorkdirLock(str(tmp_path / "f")).acquire()
