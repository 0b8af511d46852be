"""local's sliding-window decode state stays flat with the context: from 1k to 16k
positions its state's bytes are equal (the arrays, and the formula), the cost model's
decode step is the same, and XLA's memory plan of the compiled per-token step is the
same. No timing here: results/kv_cache/ measures the speed."""
import jax
import jax.numpy as jnp

import attention

W, H, D = 256, 2, 8


def state(L):
  return jax.eval_shape(lambda: attention.init_decode_state(
      "local", batch=1, max_len=L, num_kv_heads=H, head_dim=D, window=W))


def test_window_state_and_step_are_flat_from_1k_to_16k():
  small, big = state(1024), state(16384)
  assert attention.state_nbytes(small) == attention.state_nbytes(big) == (
      attention.decode_state_bytes("local", batch=1, max_len=16384, num_kv_heads=H,
                                   head_dim=D, window=W))
  assert small.k.shape == big.k.shape == (1, H, W, D)
  # softmax's KV cache grows 16x over the same range
  kv = lambda L: attention.decode_state_bytes("softmax", batch=1, max_len=L,
                                              num_kv_heads=H, head_dim=D)
  assert kv(16384) - 4 == 16 * (kv(1024) - 4)
  cost = lambda L: attention.cost("local", batch=1, q_len=1, kv_len=L, num_heads=H,
                                  head_dim=D, mode="decode", window=W)
  assert cost(1024) == cost(16384)
  assert attention.cost("softmax", batch=1, q_len=1, kv_len=16384, num_heads=H,
                        head_dim=D, mode="decode").bytes > 10 * cost(16384).bytes

  step = jax.jit(lambda st, x: attention.decode_step(st, x, x, x, window=W),
                 donate_argnums=0)
  x = jax.ShapeDtypeStruct((1, 1, H, D), jnp.float32)
  plans = [step.lower(st, x).compile().memory_analysis() for st in (small, big)]
  sizes = [(m.argument_size_in_bytes, m.output_size_in_bytes, m.temp_size_in_bytes)
           for m in plans]
  assert sizes[0] == sizes[1], sizes
