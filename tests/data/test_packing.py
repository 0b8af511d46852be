"""Packed rows (data/packing.py, data.pipeline.Packer, config.packing): the packer
puts every example in exactly one row within its caps; packed Multi30k and ListOps
batches are a pure function of (seed, step); a packed batch gives the loss and the
gradients of the same examples unpacked; a task or variant that cannot pack is refused
by key. No data dir needed: the splits are stand-ins with the tasks' layouts (the
resumed packed run on the real Multi30k is in test_train.py)."""
import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

import attention
from data import pipeline
from configs import multi30k as multi30k_cfg
from configs import shakespeare as shakespeare_cfg
from data import packing
from models import ConfigError, ModelConfig, build
from trainer.config import validate
from trainer.step import loss_fn


def _examples(rng, n, L, lo=2, hi=None):
  """(n, L) int32 left-aligned examples of lengths lo..hi (default L), EOS (2) last,
  0-padded."""
  x = np.zeros((n, L), np.int32)
  for i, m in enumerate(rng.integers(lo, (hi or L) + 1, n)):
    x[i, :m] = rng.integers(3, 50, m)
    x[i, m - 1] = 2
  return x


def test_first_fit_decreasing_puts_each_example_once_within_the_caps():
  rng = np.random.default_rng(0)
  lens = rng.integers(1, 30, size=(500, 2))
  rows = packing.first_fit_decreasing(lens, (32, 40), window=64, max_segments=3)
  members = np.concatenate(rows)
  assert sorted(members) == list(range(500))
  for r in rows:
    assert np.all(lens[r].sum(0) <= (32, 40)) and 1 <= len(r) <= 3
    assert len(set(r // 64)) == 1                 # a row never spans two windows
  # FFD fills rows: within 15% of the fewest rows the tokens could fill
  assert len(rows) <= 1.15 * np.max(lens.sum(0) / (32, 40))
  with pytest.raises(ValueError, match="longer than a row"):
    packing.first_fit_decreasing([[5], [40]], [32])


def test_place_lays_examples_end_to_end_with_segments_and_positions():
  x = np.array([[7, 8, 2, 0], [9, 2, 0, 0], [5, 6, 4, 2]], np.int32)
  assert packing.lengths(x).tolist() == [3, 2, 4]
  out = packing.place(x, [np.array([1, 0]), np.array([2])], L=6, num_rows=3)
  np.testing.assert_array_equal(out["x"], [[9, 2, 7, 8, 2, 0], [5, 6, 4, 2, 0, 0],
                                           [0] * 6])
  np.testing.assert_array_equal(out["seg"], [[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0],
                                             [0] * 6])
  np.testing.assert_array_equal(out["pos"], [[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 0],
                                             [0] * 6])
  assert packing.padding_fraction([out["seg"]]) == 9 / 18


def _multi30k(n=300, L=16, B=4, seed=0):
  """A Multi30k task over stand-in splits: src[i, 0] = 100 + i names pair i."""
  rng = np.random.default_rng(7)
  src, tgt = _examples(rng, n, L, hi=L * 3 // 4), _examples(rng, n, L, hi=L * 3 // 4)
  src[:, 0] = 100 + np.arange(n)
  tgt[:, 0] = 100 + np.arange(n)
  t = object.__new__(pipeline.Multi30k)
  t.config = ml_collections.ConfigDict(dict(seed=seed, batch_size=B, packing=True,
                                            length_buckets=(8, 16)))
  t.splits = {"train": (src, tgt, None)}
  return t, src, tgt


def _pairs(b):
  """{pair index: (row, segment id) of its source, of its target} in a packed batch."""
  out = {}
  for key in ("src", "y"):
    seg, pos = b[key + "_seg"], b[key + "_pos"]
    for r, t in np.argwhere((seg > 0) & (pos == 0)):
      out.setdefault(int(b[key][r, t]) - 100, []).append((int(r), int(seg[r, t])))
  return out


def test_packed_multi30k_batches_pair_source_and_target_and_resume_exactly():
  t, src, tgt = _multi30k()
  spe = t.packer.steps_per_epoch
  seen = []
  for step in range(spe):
    b = t.train_batch(step)
    assert b["src"].shape == (4, 16) and b["y"].shape == (4, 16)
    np.testing.assert_array_equal(b["w"], b["y_seg"] != 0)
    for i, (s_at, t_at) in _pairs(b).items():
      assert s_at == t_at                  # pair i's source and target: one row, one id
      r, k = s_at
      n = packing.lengths(src[i:i + 1])[0]
      np.testing.assert_array_equal(b["src"][r][b["src_seg"][r] == k], src[i, :n])
      np.testing.assert_array_equal(b["src_pos"][r][b["src_seg"][r] == k], np.arange(n))
      seen.append(i)
  assert len(seen) == len(set(seen)) > 0.9 * len(src)      # an epoch: each pair once
  # a fresh task (a resumed run) at any step, across the epoch boundary, sees the same
  # batch; another seed another one
  t2, _, _ = _multi30k()
  for step in (spe + 3, 1, spe - 1):
    a, b = t.train_batch(step), t2.train_batch(step)
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  t3, _, _ = _multi30k(seed=1)
  assert not np.array_equal(t3.train_batch(1)["src"], t.train_batch(1)["src"])


def _unpacked(b, src, tgt):
  """The pairs of packed batch b, one per row, padded (the unpacked batch)."""
  rows = [i for i, _ in sorted(_pairs(b).items(), key=lambda kv: kv[1][0])]
  return {"src": src[rows], "y": tgt[rows], "w": (tgt[rows] != 0).astype(np.float32)}


def _loss_and_grads(model, *batches):
  """(loss, parameter gradients) of trainer.step.loss_fn on each batch, all in one
  compiled program (one compilation, not one per batch)."""
  g, p, rest = nnx.split(model, nnx.Param, ...)
  f = jax.value_and_grad(lambda p, b: loss_fn(nnx.merge(g, p, rest), b)[0])
  return jax.jit(lambda p, bs: [f(p, b) for b in bs])(
      p, [{k: jnp.asarray(v) for k, v in b.items()} for b in batches])


def assert_same_loss_and_grads(cfg, packed, unpacked):
  """trainer.step.loss_fn and its parameter gradients agree on the two batches, at
  float32 rounding, for a fresh model of `cfg` (dropout off)."""
  model = build(cfg.validate(), rngs=nnx.Rngs(0))
  (lp, gp), (lu, gu) = _loss_and_grads(model, packed, unpacked)
  np.testing.assert_allclose(lp, lu, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(gp), jax.tree.leaves(gu)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_packed_multi30k_batch_gives_the_loss_and_gradients_of_its_pairs():
  """Encoder and decoder self-attention, cross-attention, positions restarting per
  pair (rope here, in attention; the ListOps test below takes the embedder's learned
  ones), the start token per target segment, the loss over real tokens only."""
  t, src, tgt = _multi30k()
  packed = t.train_batch(2)
  unpacked = _unpacked(packed, src, tgt)
  assert len(unpacked["src"]) > len(packed["src"])          # several pairs per row
  assert_same_loss_and_grads(
      ModelConfig(kind="encdec", vocab_size=512, d_model=16, num_heads=2, d_ff=24,
                  num_layers=1, max_len=16, positions="rope"), packed, unpacked)


def test_a_packed_listops_batch_gives_the_loss_and_gradients_of_its_sequences():
  """The classifier pools each segment into its own label slot (empty slots weigh 0)."""
  rng = np.random.default_rng(3)
  x, y = _examples(rng, 200, 24, lo=9), rng.integers(0, 10, 200)
  t = object.__new__(pipeline.ListOps)
  t.config = ml_collections.ConfigDict(dict(
      seed=0, batch_size=4, packing=True, listops=dict(min_length=8, max_length=24)))
  t.splits = {"train": (x, y)}
  b = t.train_batch(1)
  M = pipeline.packed_labels(t.config)
  assert M == 2 and b["y"].shape == b["w"].shape == (4, M)
  rows = t.packer.rows(1)
  idx = np.concatenate(rows)
  assert len(idx) > len(rows)                       # some row holds two sequences
  for r, members in enumerate(rows):
    np.testing.assert_array_equal(b["y"][r, :len(members)], y[members])
    np.testing.assert_array_equal(b["w"][r], np.arange(M) < len(members))
  unpacked = {"src": x[idx], "y": y[idx, None], "w": np.ones((len(idx), 1), np.float32)}
  assert_same_loss_and_grads(
      ModelConfig(kind="classifier", vocab_size=10, src_vocab_size=50, d_model=16,
                  num_heads=2, d_ff=24, num_layers=1, max_len=24, positions="learned"),
      b, unpacked)


def test_packing_is_refused_by_key_for_a_task_or_variant_that_cannot_pack():
  c = shakespeare_cfg.get_config()
  c.packing = True
  with pytest.raises(ConfigError, match="'packing'.*one continuous text"):
    validate(c)
  c = multi30k_cfg.get_config("cpu_packed")
  validate(c)
  # a variant that refuses segment ids, with its reason (read from its record: the
  # config never names a variant)
  rec = dataclasses.replace(attention.variant("softmax"), name="softmax_unsegmented",
                            segments=attention.core.registry.Refused("a test's reason"))
  with attention.registered(rec):
    c.model.cross_attention = "softmax_unsegmented"
    with pytest.raises(ConfigError) as e:
      validate(c)
  msg = str(e.value)
  assert "'packing'" in msg and "'softmax_unsegmented' (cross_attention)" in msg
  assert "a test's reason" in msg and "variants that do: " in msg
  assert "softmax" in msg.split("variants that do: ")[1]
