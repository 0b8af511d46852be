"""Generation: cache == recompute, the RNN form == the parallel form, beam search,
sampling filters, and refusals. Tiny models; each generate call compiles once.

One layer (TINY): each check is per layer (a layer's decode state against its full
forward pass; a stack feeds each layer the one below's outputs through the same code),
and a one-layer model compiles about half a two-layer one's programs. Multi-layer
decoding is test_hybrid's and test_models' (step_logp == forward_logp over stacks)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models import ModelConfig, Sampler, best_mode, build, generate, pick, translate

TINY = dict(d_model=16, num_heads=2, d_ff=24, num_layers=1, max_len=24)
KEY = jax.random.PRNGKey(7)


@pytest.fixture(scope="module")
def text_lm():
  return build(ModelConfig(vocab_size=11, num_kv_heads=1, **TINY), rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def pixel_lm():
  """The image-completion model: linear attention, logistic-mixture head, 256 levels."""
  return build(ModelConfig(vocab_size=256, head="dmol", attention="linear", **TINY),
               rngs=nnx.Rngs(1))


def test_cache_equals_recompute_softmax_with_topk_topp(text_lm):
  prompt = jnp.array([[1, 2, 3], [4, 5, 6]])
  kw = dict(steps=8, key=KEY, temperature=0.9, top_k=6, top_p=0.9)
  a = generate(text_lm, prompt, mode="cache", **kw)
  b = generate(text_lm, prompt, mode="recompute", **kw)
  assert a.shape == (2, 11)
  np.testing.assert_array_equal(a[:, :3], prompt)
  np.testing.assert_array_equal(a, b)
  c = generate(text_lm, prompt, mode="cache", **{**kw, "key": jax.random.PRNGKey(8)})
  assert not np.array_equal(a, c)       # the key matters


def test_unrolled_decode_scan_draws_the_same_tokens(text_lm):
  """generate's `unroll` (token steps per loop trip, for GPUs) changes the compiled
  loop only: the same tokens are drawn (3 does not divide the 7 fed steps: the
  remainder trip too). translate's beam search takes the same argument; a non-positive
  unroll is refused."""
  prompt = jnp.array([[1, 2, 3], [4, 5, 6]])
  kw = dict(steps=8, key=KEY, temperature=0.9, top_k=6, top_p=0.9, mode="cache")
  a = generate(text_lm, prompt, **kw)     # the program of the test above
  np.testing.assert_array_equal(generate(text_lm, prompt, unroll=3, **kw), a)
  with pytest.raises(ValueError, match="unroll must be a positive int"):
    generate(text_lm, prompt, unroll=0, **kw)


def test_a_model_in_train_mode_generates_as_in_eval_mode_and_stays_in_train_mode():
  """Dropout is off while generating (the eval graphdef, cached per graphdef after the
  first call), and the caller's model is left as it was."""
  m = build(ModelConfig(vocab_size=11, dropout=0.5, **TINY), rngs=nnx.Rngs(2))
  m.train()
  prompt = jnp.array([[1, 2, 3]])
  kw = dict(steps=5, key=KEY, mode="cache")
  a = generate(m, prompt, **kw)
  np.testing.assert_array_equal(generate(m, prompt, **kw), a)     # the cached graphdef
  drops = [x for _, x in nnx.iter_graph(m) if isinstance(x, nnx.Dropout)]
  assert drops and not any(d.deterministic for d in drops)          # still training
  m.eval()
  np.testing.assert_array_equal(generate(m, prompt, **kw), a)
  m.train()


def test_occluded_image_completion_cache_equals_recompute(pixel_lm):
  """Pixels 0..P-1 are given (the 'top half'); the linear model's (S, Z) state
  completes the rest exactly like the full forward pass over the prefix."""
  img = jax.random.randint(jax.random.PRNGKey(0), (3, 20), 0, 256)
  a = generate(pixel_lm, img[:, :10], steps=10, key=KEY, mode="cache")
  b = generate(pixel_lm, img[:, :10], steps=10, key=KEY, mode="recompute")
  np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(a[:, :10], img[:, :10])
  assert a.min() >= 0 and a.max() <= 255


def test_linear_rnn_form_equals_parallel_form_at_every_step(pixel_lm):
  """Teacher forcing through step_logp, one token per scan step, against one
  parallel causal forward pass."""
  m = pixel_lm
  m.eval()
  x = jnp.concatenate([m.prefix(2), jax.random.randint(KEY, (2, 15), 0, 256)], 1)
  g, s = nnx.split(m)

  @jax.jit
  def both(s, x):
    m = nnx.merge(g, s)
    par = m.forward_logp(x)

    def body(state, i):
      tok = jax.lax.dynamic_slice_in_dim(x, i, 1, axis=1)
      lp, state = m.step_logp(tok, state, i)
      return state, lp[:, 0]

    _, seq = jax.lax.scan(body, m.init_state(2, 16), jnp.arange(16))
    return par, seq.transpose(1, 0, 2), m.forward_logp(x, at=jnp.int32(5))

  par, seq, at5 = both(s, x)
  np.testing.assert_allclose(seq, par, atol=2e-4)
  np.testing.assert_allclose(at5, par[:, 5], atol=1e-6)   # recompute mode's one position


def test_generation_to_max_len_never_runs_past_it():
  """A prompt + steps filling max_len exactly: the last token is drawn, not fed, so
  the start token + max_len - 1 fed ids fit the model's positions. `location` (one
  weight per key position) refused a cache of max_len + 1 keys (the MNIST comparison
  failed in its unconditional samples); cache and recompute modes still agree."""
  m = build(ModelConfig(vocab_size=11, attention="location", **{**TINY, "max_len": 8}),
            rngs=nnx.Rngs(0))
  prompt = jnp.array([[1, 2], [3, 4]])
  a = generate(m, prompt, steps=6, key=KEY, mode="cache")
  b = generate(m, prompt, steps=6, key=KEY, mode="recompute")
  assert a.shape == (2, 8)
  np.testing.assert_array_equal(a, b)
  assert generate(m, prompt, steps=0, key=KEY).shape == (2, 2)


def test_int8_cache_generation_tracks_fp(text_lm):
  prompt = jnp.array([[1, 2, 3], [4, 5, 6]])
  fp = generate(text_lm, prompt, steps=8, key=KEY, temperature=0.0)
  q8 = generate(text_lm, prompt, steps=8, key=KEY, temperature=0.0, cache_dtype="int8")
  assert np.mean(np.asarray(fp) == np.asarray(q8)) >= 0.9


# local's case is make test-all's: covered in make test by
# tests/models/test_generate.py::test_local_decoder_translates_with_its_rolling_cache_as_by_recompute
# (local's rolling cache, w = 2 wrapping, through a model's decode loop, cache against
# recompute) and tests/attention/test_decode.py::test_local_and_sparse_decode_equal_their_causal_forward
# (w = 3 wrapping, token by token and in chunks).
@pytest.mark.parametrize("name, opts", [
    pytest.param("local", {"window": 3}, marks=pytest.mark.slow), ("sparse", {})])
def test_local_and_sparse_generate_with_their_decode_state_as_by_recompute(name, opts):
  """local's rolling window cache (w = 3 wraps) and sparse's pattern-masked KV cache
  sample what the full forward pass over the buffer samples."""
  m = build(ModelConfig(vocab_size=11, attention=name, attention_options={name: opts},
                        **TINY), rngs=nnx.Rngs(2))
  prompt = jnp.array([[1, 2, 3], [4, 5, 6]])
  a = generate(m, prompt, steps=8, key=KEY, mode="cache")
  b = generate(m, prompt, steps=8, key=KEY, mode="recompute")
  np.testing.assert_array_equal(a, b)


def test_cache_mode_refused_for_variants_without_state():
  # both refusals come before anything runs: an abstract model (nnx.eval_shape) will do
  m = nnx.eval_shape(lambda: build(ModelConfig(
      vocab_size=11, attention="reformer", attention_options={"reformer": {"chunk_size": 4}},
      **TINY), rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match="no decode state.*mode='recompute'"):
    generate(m, jnp.zeros((1, 2), jnp.int32), steps=2, key=KEY)
  with pytest.raises(ValueError, match="exceeds the model's max_len"):
    generate(m, jnp.zeros((1, 20), jnp.int32), steps=8, key=KEY, mode="recompute")


def test_pick_filters():
  logp = jax.nn.log_softmax(jnp.array([[0.0, 2.0, 1.0, -1.0]] * 64))
  keys = jax.random.split(KEY, 64)
  greedy = pick(logp[:1], KEY, Sampler(0.0))
  assert int(greedy[0]) == 1
  top1 = jax.vmap(lambda k, l: pick(l[None], k, Sampler(1.0, top_k=1)))(keys, logp)
  assert np.all(np.asarray(top1) == 1)
  nucleus = jax.vmap(lambda k, l: pick(l[None], k, Sampler(1.0, top_p=0.7)))(keys, logp)
  assert set(np.asarray(nucleus).ravel()) <= {1, 2}      # p = .64, .24: the 0.7 nucleus
  free = jax.vmap(lambda k, l: pick(l[None], k, Sampler(1.0)))(keys, logp)
  assert len(set(np.asarray(free).ravel())) >= 3


# ---- encoder-decoder ----------------------------------------------------------------

@pytest.fixture(scope="module")
def seq2seq():
  cfg = ModelConfig(kind="encdec", vocab_size=5, attention="linear",
                    cross_attention="softmax", **TINY)
  return build(cfg, rngs=nnx.Rngs(3))


SRC = jnp.array([[3, 4, 3, 0, 0], [4, 4, 3, 3, 2]])


@pytest.mark.slow
def test_greedy_translation_cache_equals_recompute(seq2seq):
  """make test-all's: covered in make test by
  tests/models/test_generate.py::test_local_decoder_translates_with_its_rolling_cache_as_by_recompute
  (translate's cache mode against recompute through an encoder's memory),
  ::test_cache_equals_recompute_softmax_with_topk_topp (the sampling loop both use) and
  tests/models/test_hybrid.py::test_a_packed_hybrid_decoder_computes_each_pair_as_alone_and_decodes_so
  (an encoder-decoder's step_logp through a KV cache, a window and a fixed state, and
  the cross-attention's keys, equals its parallel pass); linear's state by
  ::test_linear_rnn_form_equals_parallel_form_at_every_step."""
  a, _ = translate(seq2seq, SRC, max_len=6)
  b, _ = translate(seq2seq, SRC, max_len=6, mode="recompute")
  np.testing.assert_array_equal(a, b)


def test_local_decoder_translates_with_its_rolling_cache_as_by_recompute():
  m = build(ModelConfig(kind="encdec", vocab_size=5, attention="local",
                        cross_attention="softmax",
                        attention_options={"local": {"window": 2}},
                        **TINY), rngs=nnx.Rngs(4))
  a, _ = translate(m, SRC, max_len=6, beam_size=2)
  b, _ = translate(m, SRC, max_len=6, beam_size=2, mode="recompute")
  np.testing.assert_array_equal(a, b)


def test_best_mode_recomputes_only_where_the_decoder_has_no_state(seq2seq):
  """Training's BLEU translates with it: a decoder variant without a decode state
  (reformer) recomputes instead of failing at the first evaluation. The translation is
  traced, not compiled (an abstract model, jax.eval_shape): a refusal of the mode comes
  before anything is traced, and reformer's recomputed numbers are
  tests/models/test_models.py::test_every_variant_in_every_role's."""
  assert best_mode(seq2seq) == "cache"
  m = nnx.eval_shape(lambda: build(ModelConfig(
      kind="encdec", vocab_size=5, attention="reformer",
      attention_options={"reformer": {"chunk_size": 4}}, cross_attention="softmax",
      **TINY), rngs=nnx.Rngs(3)))
  assert best_mode(m) == "recompute"
  toks, score = jax.eval_shape(
      lambda: translate(m, SRC, max_len=4, beam_size=2, mode=best_mode(m)))
  assert toks.shape == (2, 4) and score.shape == (2,)
  with pytest.raises(ValueError, match="no decode state"):
    translate(m, SRC, max_len=4, beam_size=2, mode="cache")


def test_beam_search_finds_the_exhaustive_best(seq2seq):
  """With beams as wide as the hypothesis tree, beam search returns the best finished
  sequence under the length penalty; tokens after eos are padding."""
  m, cfg, L, alpha = seq2seq, seq2seq.cfg, 3, 0.6
  toks, score = translate(m, SRC, max_len=L, beam_size=16, alpha=alpha)
  # score every sequence of length L by one parallel forward pass
  seqs = jnp.array(list(itertools.product(range(cfg.vocab_size), repeat=L)))
  n = seqs.shape[0]
  m.eval()

  @nnx.jit
  def seq_logp(m, src_1S):
    src = jnp.repeat(src_1S, n, 0)
    logp = m.forward_logp(jnp.concatenate([m.prefix(n), seqs[:, :-1]], 1), *m.encode(src))
    return jnp.cumsum(jnp.take_along_axis(logp, seqs[..., None], -1)[..., 0], 1)

  for b in range(SRC.shape[0]):
    lp = np.asarray(seq_logp(m, SRC[b:b + 1]))
    best, arg = -np.inf, None
    for i, s in enumerate(np.asarray(seqs)):
      eos = np.flatnonzero(s == cfg.eos_id)
      if len(eos):
        n_tok = eos[0] + 1
        sc = lp[i, eos[0]] / ((5 + n_tok) / 6) ** alpha
        if sc > best:
          best, arg = sc, list(s[:n_tok]) + [cfg.pad_id] * (L - n_tok)
    np.testing.assert_allclose(float(score[b]), best, rtol=1e-4)
    assert list(np.asarray(toks[b])) == arg
