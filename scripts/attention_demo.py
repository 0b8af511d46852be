"""A two-minute tour of the attention library on random data (CPU or GPU).

  python -m scripts.attention_demo [--len 2048]

1. Every exact-family variant runs under the contract (GQA, causal, padding mask).
2. flash and flash_pallas reproduce softmax, forward and gradient.
3. flash is timed against jax.nn.dot_product_attention(implementation='xla') at one
   length (median of 5 runs after warm-up, in this one process).
"""
import argparse

import jax
import jax.numpy as jnp

import attention
from studies.core import timing


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--len", type=int, default=2048)
  a = p.parse_args()
  ks = jax.random.split(jax.random.PRNGKey(0), 4)
  B, T, Hq, Hkv, D = 2, 24, 4, 2, 16
  q = jax.random.normal(ks[0], (B, T, Hq, D))
  k = jax.random.normal(ks[1], (B, T, Hkv, D))
  v = jax.random.normal(ks[2], (B, T, Hkv, D))
  mask = jnp.arange(T)[None, None, None, :] < jnp.array([T, T - 5])[:, None, None, None]
  print(f"registered variants: {', '.join(attention.names())}")
  ref = attention.get("softmax")(q, k, v, causal=True, mask=mask)
  for name in attention.names():
    var = attention.variant(name)
    params = {n: s.init(ks[3], s.shape(Hq, D, T), jnp.float32) for n, s in var.params.items()
              if s.when is None}
    params.update({n: jax.random.normal(ks[3], shape)        # per-token inputs (gates)
                   for n, shape in var.input_shapes(B, T, Hq, Hkv, D).items()})
    causal = var.causal  # linformer refuses causal=True (its projection mixes positions)
    out = attention.get(name)(q, k, v, causal=causal, mask=mask, **params)
    same = (f"  max|out - softmax| = {float(jnp.abs(out - ref).max()):.1e}"
            if name in ("flash", "flash_pallas") else "")
    print(f"  {name:13s} out {tuple(out.shape)} causal={causal} "
          f"finite={bool(jnp.all(jnp.isfinite(out)))}{same}")
  loss = lambda n: (lambda q: attention.get(n)(q, k, v, causal=True, mask=mask).sum())
  g = jax.grad(loss("softmax"))(q)
  for n in ("flash", "flash_pallas"):
    print(f"  grad {n:13s} max|dq - dq_softmax| = {float(jnp.abs(jax.grad(loss(n))(q) - g).max()):.1e}")

  N, H, Dh = a.len, 8, 64
  q = jax.random.normal(ks[0], (1, N, H, Dh))
  xla = jax.jit(lambda q: jax.nn.dot_product_attention(q, q, q, implementation="xla"))
  fl = jax.jit(lambda q: attention.get("flash")(q, q, q))
  t_xla, t_fl = (timing.timed(lambda f=f: f(q), runs=5)[1] for f in (xla, fl))
  flops = attention.cost("flash", batch=1, q_len=N, num_heads=H, head_dim=Dh).flops
  print(f"\nN={N}, H={H}, D={Dh}, fp32 on {jax.devices()[0].device_kind}:")
  print(f"  jax.nn.dot_product_attention (xla): {t_xla * 1e3:8.1f} ms")
  print(f"  flash:                              {t_fl * 1e3:8.1f} ms "
        f"({t_xla / t_fl:.2f}x faster, {flops / t_fl / 1e9:.0f} GFLOP/s)")


if __name__ == "__main__":
  main()
