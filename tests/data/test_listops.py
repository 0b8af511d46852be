"""data/listops.py follows LRA's rules, and its labels agree with an independent
evaluator; the classifier model trains on its batches' shapes."""
import numpy as np
import pytest

from data import listops as L


def stack_eval(toks):
  """A second evaluator, written independently of data.listops.value: one left-to-right
  pass with a stack of (operator, arguments) frames, as a shift-reduce parser would."""
  frames = [("ROOT", [])]
  for t in toks:
    if t.startswith("["):
      frames.append((t[1:], []))
    elif t == "]":
      op, xs = frames.pop()
      xs = sorted(xs)
      r = {"MIN": xs[0], "MAX": xs[-1], "SM": sum(xs) % 10,
           "MED": (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) // 2}[op]
      frames[-1][1].append(r)
    else:
      frames[-1][1].append(int(t))
  (root, [result]), = frames
  return result


def max_depth(toks):
  d = m = 1
  for t in toks:
    if t.startswith("["):
      d += 1
    elif t == "]":
      d -= 1
    else:
      m = max(m, d)
  return m


@pytest.fixture(scope="module")
def small():
  return L.splits(seed=3, num_train=60, num_val=10, num_test=10, min_length=30,
                  max_length=120)


def test_rules_lengths_depth_and_labels(small):
  seen = set()
  for name, (x, y) in small.items():
    assert x.shape == (len(y), 120) and x.dtype == np.uint8
    for ids, label in zip(x, y):
      toks = L.decode(ids)
      # operators, values 0..9 and ']' only; brackets balance; one expression
      assert set(toks) <= {str(v) for v in range(10)} | {"[MIN", "[MAX", "[MED", "[SM", "]"}
      assert sum(t.startswith("[") for t in toks) == toks.count("]")
      assert toks[0].startswith("[") and toks[-1] == "]"
      assert 30 < len(toks) < 120                                # LRA's strict filter
      assert (ids[len(toks):] == L.PAD).all()                     # padded after the end
      assert max_depth(toks) <= 10                                # values at depth <= 10
      assert label == stack_eval(toks)
      seen.add(tuple(toks))
  assert len(seen) == 80                                          # distinct, no overlap


def test_operators_arity_and_median():
  # the operator semantics on hand-checked trees
  assert L.value(("MED", [1, 2, 3, 9])) == 2                      # int(median 2.5)
  assert L.value(("MED", [7, 2, 9])) == 7
  assert L.value(("SM", [9, 8, ("MAX", [3, 4])])) == 1            # 21 mod 10
  assert L.value(("MIN", [5, ("SM", [5, 5])])) == 0
  with pytest.raises(ValueError, match="unknown ListOps operator 'AVG'"):
    L.value(("AVG", [1, 2]))
  import random
  rng = random.Random(0)
  arities, depths, ops = [], [], set()
  for _ in range(300):
    t, n = L.generate_tree(rng)
    assert n == len(L.tokens(t))
    depths.append(L.depth(t))

    def walk(t):
      if not isinstance(t, int):
        arities.append(len(t[1]))
        ops.add(t[0])
        for a in t[1]:
          walk(a)
    walk(t)
  assert min(arities) == 2 and max(arities) == 10                 # randint(2, max_args)
  assert max(depths) <= 10 and ops == set(L.OPERATORS)


def test_deterministic_and_seeded(small):
  again = L.splits(seed=3, num_train=60, num_val=10, num_test=10, min_length=30,
                   max_length=120)
  other = L.generate(5, seed=4, min_length=30, max_length=120)
  for s in small:
    np.testing.assert_array_equal(small[s][0], again[s][0])
  assert [L.tokens(t) for t in other] != [L.decode(r) for r in small["train"][0][:5]]
  with pytest.raises(ValueError, match="min_length < max_length"):
    L.generate(1, seed=0, min_length=50, max_length=50)


def test_classifier_model_on_listops_batches():
  import jax.numpy as jnp
  from flax import nnx
  from models import ModelConfig, build
  from tests.reference import jitted as run
  cfg = ModelConfig(kind="classifier", vocab_size=L.NUM_CLASSES,
                    src_vocab_size=L.VOCAB_SIZE, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=120,
                    attention="linformer")           # non-causal variants are allowed
  model = build(cfg, rngs=nnx.Rngs(0))
  x = jnp.asarray(L.splits(seed=3, num_train=4, num_val=0, num_test=0, min_length=30,
                           max_length=120)["train"][0], jnp.int32)
  y = jnp.arange(4)[:, None]
  nll, lp = run(model, lambda m, x, y: (m.nll(x, y), m.forward_logp(x)), x, y)
  assert nll.shape == (4, 1) and bool(jnp.all(jnp.isfinite(nll)))
  np.testing.assert_allclose(-np.take_along_axis(np.asarray(lp), np.asarray(y), 1),
                             np.asarray(nll), rtol=1e-5, atol=1e-5)
  # padding is ignored: more padding after the end does not change the output
  x2 = jnp.pad(x, ((0, 0), (0, 8)))
  cfg2 = cfg.replace(max_len=128, attention="softmax")
  logp = lambda m, x: m.forward_logp(x)
  np.testing.assert_allclose(
      np.asarray(run(build(cfg2, rngs=nnx.Rngs(0)), logp, x2)),
      np.asarray(run(build(cfg.replace(attention="softmax"), rngs=nnx.Rngs(0)), logp, x)),
      rtol=1e-4, atol=1e-5)


def test_task_batches_and_cache(tmp_path):
  from data import pipeline
  from configs import listops as listops_cfg
  c = listops_cfg.get_config()
  c.listops.update(dict(num_train=20, num_val=8, num_test=8, min_length=20, max_length=60))
  c.update(dict(data_dir=str(tmp_path), batch_size=4, eval_batch_size=4))
  task = pipeline.create(c)
  b = task.train_batch(3)
  assert b["src"].shape == (4, 60) and b["src"].dtype == np.int32
  assert b["y"].shape == (4, 1) and b["w"].shape == (4, 1)
  assert task.model_overrides == {"vocab_size": 10, "src_vocab_size": 16, "pad_id": 0}
  assert sum(1 for _ in task.eval_batches()) == 2
  c.eval_batch_size = 3                          # 8 = 3 + 3 + 2: the last one padded
  bs = list(pipeline.create(c).eval_batches())
  assert [b["src"].shape for b in bs] == [(3, 60)] * 3
  assert [int(b["w"].sum()) for b in bs] == [3, 3, 2] and not bs[2]["src"][2].any()
  assert len(list((tmp_path / "listops").glob("listops_*.npz"))) == 1   # cached on disk
  pipeline._listops_splits.cache_clear()
  again = pipeline.create(c)                                       # read back
  np.testing.assert_array_equal(again.train_batch(3)["src"], b["src"])
