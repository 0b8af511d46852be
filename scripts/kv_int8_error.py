"""Measures the output error of the int8 KV cache against the fp32 cache.

  python -m scripts.kv_int8_error [--heads 8 --head_dim 64 --len 1024 --batch 4]

Decodes a random unit-normal sequence token by token with both caches (one jitted
lax.scan each) and prints the max and mean absolute output error, the rigorous
bound of attention.int8_output_error_bound, and the cache sizes. The numbers quoted
in README.md come from this script.
"""
import argparse
import datetime
import json
import platform

import jax
import jax.numpy as jnp

import attention


def decode_all(q, k, v, cache_dtype):
  B, T, Hq, D = q.shape
  state = attention.init_decode_state("softmax", batch=B, max_len=T, num_kv_heads=k.shape[2],
                                      head_dim=D, cache_dtype=cache_dtype)

  def step(state, x):
    out, state = attention.decode_step(state, *(a[:, None] for a in x))
    return state, out[:, 0]

  state, outs = jax.lax.scan(step, state, tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v)))
  return jnp.moveaxis(outs, 0, 1), state


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--len", type=int, default=1024)
  p.add_argument("--heads", type=int, default=8)
  p.add_argument("--head_dim", type=int, default=64)
  p.add_argument("--seed", type=int, default=0)
  a = p.parse_args()
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(a.seed), 3)
  shape = (a.batch, a.len, a.heads, a.head_dim)
  q, k, v = (jax.random.normal(x, shape) for x in (kq, kk, kv))
  run = jax.jit(decode_all, static_argnums=3)
  ref, st = run(q, k, v, None)
  out, st8 = run(q, k, v, "int8")
  err = jnp.abs(out - ref)
  print(json.dumps({
      "what": "int8 KV cache vs fp32 KV cache, softmax decode, unit-normal q/k/v",
      "shape (B, T, H, D)": list(shape),
      "max_abs_error": float(err.max()),
      "mean_abs_error": float(err.mean()),
      "mean_abs_output": float(jnp.abs(ref).mean()),
      "bound": float(attention.int8_output_error_bound(q, k, v)),
      "cache_bytes_fp32": st.nbytes,
      "cache_bytes_int8": st8.nbytes,
      "ratio": st.nbytes / st8.nbytes,
      "machine": f"{platform.machine()} {jax.devices()[0].device_kind}, jax {jax.__version__}",
      "date": datetime.date.today().isoformat(),
  }, indent=1))


if __name__ == "__main__":
  main()
