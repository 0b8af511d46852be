"""What a user gets at the backend's *default* matmul precision, and in bf16.

The rest of the suite runs at "highest" (tests/conftest.py) so that it tests the
algorithms. These tests run at the backend's default and check the error against a
bound derived from the number format, so that a user who trains in TF32 or bf16
knows the error to expect:

  format of a default float32 matmul   significant bits   unit roundoff u
  CPU: float32                         24                 2^-24
  NVIDIA GPU (Ampere+): TF32 inputs    11                 2^-11
  TPU: one bfloat16 pass               8                  2^-8

A product x.y of length K with inputs rounded to that format and float32
accumulation has, to first order, |error| <= (2u + K u32) sum_i |x_i y_i|
(u32 = 2^-24): each input rounded once (u each), each addition once (u32).
Attention adds the softmax: a logit error d changes each probability by a factor
within e^(+-2d), so |out error| <= (e^(2 d_max) - 1) max|v| + (2u + Tk u32) max|v|.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attention
from tests import reference

U32 = 2.0 ** -24
UNIT_ROUNDOFF = {"cpu": U32, "gpu": 2.0 ** -11, "tpu": 2.0 ** -8}


def u_default(backend):
  return UNIT_ROUNDOFF.get(backend, 2.0 ** -8)      # unknown backend: the loosest


def rng_normal(*shape, seed=0):
  return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_matmul_error_is_within_the_default_formats_bound(default_precision):
  u = u_default(default_precision)
  K = 512
  x, y = rng_normal(64, K), rng_normal(K, 64, seed=1)
  got = np.asarray(jax.jit(jnp.matmul)(x, y), np.float64)
  exact = x.astype(np.float64) @ y.astype(np.float64)
  bound = (2 * u + K * U32) * (np.abs(x).astype(np.float64) @ np.abs(y))
  assert np.all(np.abs(got - exact) <= 1.01 * bound)


def attention_bound(q, k, v, u_in, scale):
  """The first-order bound of the docstring for softmax attention (float64 inputs)."""
  D, Tk = q.shape[-1], k.shape[1]
  qa, ka = np.abs(q), np.abs(k)
  # sum_d |q_d k_d| for every (b, h, t, s): (B, H, Tq, Tk), one kv head per q head here
  dots = np.einsum("bthd,bshd->bhts", qa, ka)
  d_max = np.max((2 * u_in + D * U32) * scale * dots)
  vmax = np.max(np.abs(v))
  return (np.expm1(2 * d_max) + 2 * u_in + Tk * U32) * vmax + 8 * U32 * vmax


@pytest.mark.parametrize("name", ["softmax", "flash", "sdpa"])
def test_attention_error_is_within_the_default_formats_bound(default_precision, name):
  u = u_default(default_precision)
  B, T, H, D = 2, 64, 2, 32
  q, k, v = (rng_normal(B, T, H, D, seed=s) for s in range(3))
  got = np.asarray(jax.jit(lambda q, k, v: attention.get(name)(q, k, v, causal=True))(
      q, k, v), np.float64)
  exact = reference.attention("softmax", *(x.astype(np.float64) for x in (q, k, v)),
                              causal=True)
  err = np.max(np.abs(got - exact))
  assert err <= attention_bound(q, k, v, u, 1 / np.sqrt(D)), err


def test_bf16_attention_error_is_within_the_bf16_bound():
  """bf16 inputs and output (u = 2^-8), float32 softmax statistics: the inputs'
  rounding is part of the user's error, so the reference is the float32 inputs."""
  u = 2.0 ** -8
  B, T, H, D = 2, 64, 2, 32
  q, k, v = (rng_normal(B, T, H, D, seed=s) for s in range(3))
  f = jax.jit(lambda q, k, v: attention.get("softmax")(q, k, v, causal=True))  # one program
  got = np.asarray(f(*(jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))), np.float64)
  exact = reference.attention("softmax", *(x.astype(np.float64) for x in (q, k, v)),
                              causal=True)
  bound = attention_bound(q, k, v, u, 1 / np.sqrt(D)) + u * np.max(np.abs(exact))
  err = np.max(np.abs(got - exact))
  assert err <= bound, (err, bound)
