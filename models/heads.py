"""Output heads: a categorical softmax and a discretised mixture of logistics.

Both map hidden states h (..., D) to a distribution over V classes and expose
  nll(h, y)      -> (...) negative log-likelihood in nats of integer targets y (...)
  log_probs(h)   -> (..., V) normalised log-probabilities (what sampling, greedy and
                    beam search read)
so generation never needs to know which head a model has. Bits per dimension (or
per character) is nll / ln 2.

`MixtureHead` is the discretised logistic mixture of PixelCNN++ (Salimans et al.
2017) for one 8-bit channel, as used for MNIST by the linear-transformer paper
(Katharopoulos et al. 2020, 10 components): pixel x in {0..255} is rescaled to
[-1, 1] and gets the mixture's mass on its bin of half-width 1/255, with the edge
bins extended to -inf and +inf so the 256 bins sum to one.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from models.config import ModelConfig
from models.layers import dense

LN2 = math.log(2.0)


def bits(nll_nats):
  """Nats -> bits."""
  return nll_nats / LN2


class CategoricalHead(nnx.Module):
  """softmax(W h + b) over V classes; W may be a tied embedding (embed.attend)."""

  def __init__(self, cfg: ModelConfig, V: int, rngs: nnx.Rngs, tied=None):
    self.tied = tied
    self.V = V
    self.proj = None if tied is not None else dense(cfg.d_model, V, cfg, rngs)

  def logits(self, h):
    # A tied LM embedding has one extra row (its start token), never predicted.
    z = self.tied.attend(h)[..., :self.V] if self.tied is not None else self.proj(h)
    return z.astype(jnp.float32)

  def log_probs(self, h):
    return jax.nn.log_softmax(self.logits(h), axis=-1)

  def nll(self, h, y):
    z = self.logits(h)
    return jax.nn.logsumexp(z, axis=-1) - jnp.take_along_axis(z, y[..., None], -1)[..., 0]


def dmol_log_prob(params, x):
  """log P(x) under a discretised logistic mixture, one 8-bit channel.

  params: (..., 3K) float32 = mixture logits, means, log-scales (K each).
  x: (...) int in [0, 255] (broadcast against params[..., 0]).
  Returns (...) float32 log-probabilities (nats).
  """
  K = params.shape[-1] // 3
  logit_pi, mu, log_s = params[..., :K], params[..., K:2 * K], params[..., 2 * K:]
  log_s = jnp.maximum(log_s, -7.0)
  xs = (x.astype(jnp.float32) / 127.5 - 1.0)[..., None]          # (..., 1)
  c = xs - mu
  inv_s = jnp.exp(-log_s)
  plus_in = inv_s * (c + 1.0 / 255.0)
  min_in = inv_s * (c - 1.0 / 255.0)
  log_cdf_plus = plus_in - jax.nn.softplus(plus_in)               # log sigmoid(plus_in)
  log_1m_cdf_min = -jax.nn.softplus(min_in)                       # log (1 - sigmoid(min_in))
  # log(sigmoid(a) - sigmoid(b)) for a > b, without cancellation:
  #   sigmoid(a) - sigmoid(b) = e^a (1 - e^(b-a)) / ((1 + e^a)(1 + e^b)).
  log_delta = (log_cdf_plus - jax.nn.softplus(min_in)
               + jnp.log(-jnp.expm1(min_in - plus_in)))
  lp = jnp.where(x[..., None] == 0, log_cdf_plus,
                 jnp.where(x[..., None] == 255, log_1m_cdf_min, log_delta))
  return jax.nn.logsumexp(lp + jax.nn.log_softmax(logit_pi, axis=-1), axis=-1)


class MixtureHead(nnx.Module):
  """Discretised mixture of K logistics over 256 grey levels (see module docstring)."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.K = cfg.num_mixtures
    self.proj = dense(cfg.d_model, 3 * self.K, cfg, rngs)

  def params(self, h):
    return self.proj(h).astype(jnp.float32)

  def nll(self, h, y):
    return -dmol_log_prob(self.params(h), y)

  def log_probs(self, h):
    p = self.params(h)[..., None, :]                               # (..., 1, 3K)
    lp = dmol_log_prob(p, jnp.arange(256))                         # (..., 256)
    return lp - jax.nn.logsumexp(lp, axis=-1, keepdims=True)       # exact renormalise
