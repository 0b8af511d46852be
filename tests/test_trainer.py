"""trainer/: the functional train step equals the object-style nnx step, remat and
bf16 change the computation as documented, the prefetcher hands out the loop's
batches in order."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import train
from configs import mnist
from models import build
from trainer import loop, step as steps


def cfg(**model):
  c = mnist.get_config()
  c.model.update(dict(d_model=16, num_heads=2, d_ff=32, num_layers=2, dropout=0.1), **model)
  c.image_size = 4
  c.warmup_steps = 1
  return c


def batch(seed=0, B=4, T=16):
  y = jnp.asarray(np.random.default_rng(seed).integers(0, 256, (B, T)), jnp.int32)
  return {"y": y, "w": jnp.ones(y.shape, jnp.float32)}


def fresh(c):
  mcfg = train.validate(c)
  model = build(mcfg, rngs=nnx.Rngs(params=0, dropout=1))
  model.train()
  return model, nnx.Optimizer(model, train.make_optimizer(c), wrt=nnx.Param)


def run_steps(c, n=2, **kw):
  model, opt = fresh(c)
  ts = train.TrainStep(model, opt, 0, **kw)
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
  assert train.make_optimizer(c) is train.make_optimizer(c.copy_and_resolve_references())
  d = cfg()
  d.learning_rate = 2 * c.learning_rate
  assert train.make_optimizer(d) is not train.make_optimizer(c)
  run_steps(c, n=1)
  before = steps._compiled.cache_info()
  run_steps(c, n=1)
  after = steps._compiled.cache_info()
  assert (after.hits, after.misses) == (before.hits + 1, before.misses)


@pytest.mark.parametrize("remat", ["block", "full"])
def test_remat_gives_the_same_updates(reference, remat):
  """Rematerialisation recomputes the forward pass in the backward pass: the same
  arithmetic, so the same parameters (bit-exact on a CPU; to rounding elsewhere)."""
  _, params = run_steps(cfg(remat=remat))
  for a, b in zip(params, reference[1]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_remat_full_keeps_less_for_the_backward_pass():
  """XLA's temp buffer of the train step: full remat keeps only block inputs."""
  def temp(remat):
    c = cfg(remat=remat, num_layers=2, d_model=32, d_ff=128, dropout=0.0)
    model, opt = fresh(c)
    g, st = nnx.split((model, opt))
    leaves, tdef = jax.tree.flatten(st)
    f = jax.jit(lambda l, b, c: steps._pure_step(g, tdef, l, b, c))
    b = batch(0, B=8, T=16)
    return f.lower(leaves, b, steps.new_carry(0)).compile().memory_analysis() \
        .temp_size_in_bytes
  assert temp("full") < temp("none")


def test_bf16_computes_in_bf16_with_float32_parameters_and_loss(reference):
  c = cfg(dtype="bfloat16")
  model, opt = fresh(c)
  loss, _ = steps.loss_fn(model, batch(0))
  assert loss.dtype == jnp.float32
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  # the projections and the FFN multiply in bf16 (the residual stream, the norms and
  # the attention's softmax statistics stay float32)
  g, st = nnx.split(model)
  jaxpr = jax.make_jaxpr(lambda st, b: steps.loss_fn(nnx.merge(g, st), b))(st, batch(0))
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
    np.testing.assert_allclose(x, r, rtol=1e-6, atol=1e-7)


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
  import input_pipeline
  c = cfg()
  c.update(eval_batch_size=3, eval_batches=0)
  model, _ = fresh(c)
  x = np.asarray(batch(5, B=8)["y"])
  batches = list(input_pipeline._fixed_batches(x, c))
  assert [b["y"].shape for b in batches] == [(3, 16)] * 3
  assert [float(b["w"].sum()) for b in batches] == [48.0, 48.0, 32.0]
  task = types.SimpleNamespace(eval_batches=lambda: iter(batches), metric="bits_per_dim")
  out = steps.evaluate(model, task, c)
  model.eval()
  whole, _ = steps.loss_fn(model, {"y": jnp.asarray(x), "w": jnp.ones(x.shape)})
  assert out["eval_sequences"] == 8
  np.testing.assert_allclose(out["eval_loss"], float(whole), rtol=1e-5)
