"""Float64 NumPy references of the exact family, written independently of attention/.

Heads are expanded with np.repeat (no grouped layout), masks are built from
explicit index comparisons, and the softmax is the textbook one.
"""
import numpy as np


def cpu_cost_analysis(f, *args) -> dict:
  """XLA:CPU's `cost_analysis()` of jit(f)(*args), on any machine.

  attention/core/cost_model.py is calibrated against the CPU compiler's accounting (a GPU
  compiler counts bytes differently, e.g. 3.67e6 against 1.57e6 for the same
  softmax), so the tests lower for the CPU backend everywhere and mean the same
  on a GPU host.
  """
  import jax
  cpu = jax.devices("cpu")[0]
  with jax.default_device(cpu):
    args = jax.device_put(args, cpu)
    c = jax.jit(f).lower(*args).compile().cost_analysis()
  return c[0] if isinstance(c, (list, tuple)) else c   # older jax: one dict per computation


def jitted(model, fn, *args):
  """fn(model, *args) for an nnx model, compiled as one program: called eagerly, each
  op of the model compiles as a program of its own, which on 2 CPU cores costs more."""
  import jax
  from flax import nnx
  g, s = nnx.split(model)
  return jax.jit(lambda s, *a: fn(nnx.merge(g, s), *a))(s, *args)


def expand(x, Hq):
  """(B, T, Hkv, D) -> (B, T, Hq, D) by repeating each kv head Hq // Hkv times."""
  return np.repeat(x, Hq // x.shape[2], axis=2)


class NoReference(LookupError):
  """A variant has no float64 reference here; the message says how to give one."""


# The variants whose float64 score `scores` computes (the exact family's kernels are
# "softmax": their references are softmax's).
SCORE_NAMES = ("softmax", "flash", "flash_pallas", "dot", "general", "additive", "cosine",
               "location")


def decodes_as_softmax(name) -> bool:
  """Whether `name` is a kernel of the exact family that decodes through softmax's own
  path: softmax's decode state and step and softmax's score, and options that choose
  only how its forward pass computes (`Variant.kernel_options`). Its decode is then
  softmax's code, checked on softmax's row; that its forward pass equals softmax's is
  its own tests' claim (test_exact, test_flash*, test_sdpa, test_positions' exact-family
  checks). Decode sweeps check softmax and leave these out."""
  import attention
  v, s = attention.variant(name), attention.variant("softmax")
  return (name != "softmax" and v.decode_impl is s.decode_impl and v.score is s.score
          and v.kernel_options != ())


def has_score(name) -> bool:
  """Whether `scores` has a float64 score for `name`."""
  return name in SCORE_NAMES


def no_score(name) -> str:
  """The one line that says how to give `name` a float64 score reference."""
  return (f"tests/reference.py has no float64 score for {name!r}: add a branch to "
          "reference.scores computing its logits (B, Hq, Tq, Tk) in NumPy from its "
          "paper's definition, and its name to reference.SCORE_NAMES")


def scores(name, q, k, params, scale):
  """(B, Tq, Hq, D), (B, Tk, Hq, D) -> (B, Hq, Tq, Tk) float64 logits of the score
  variant `name` (SCORE_NAMES); another name raises NoReference saying how to add it.
  params: its parameters (float arrays); scale: its scale option (None: its default)."""
  if not has_score(name):
    raise NoReference(no_score(name))
  q, k = q.astype(np.float64), k.astype(np.float64)
  Hq, Tk = q.shape[2], k.shape[1]
  P = {n: np.asarray(p, np.float64) for n, p in params.items()}
  if name in ("softmax", "flash", "flash_pallas"):
    return np.einsum("bihd,bjhd->bhij", q, k) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
  s = 1.0 if scale is None else scale
  if name == "dot":
    return np.einsum("bihd,bjhd->bhij", q, k) * s
  if name == "general":
    W = np.broadcast_to(P["w"], (Hq,) + P["w"].shape[-2:])
    return np.einsum("bihd,hde,bjhe->bhij", q, W, k) * s
  if name == "additive":
    out = np.zeros((q.shape[0], Hq, q.shape[1], Tk))
    for h in range(Hq):
      wq = P["w_q"][h] if P["w_q"].ndim == 3 else P["w_q"]
      wk = P["w_k"][h] if P["w_k"].ndim == 3 else P["w_k"]
      va = P["v_a"][h] if P["v_a"].ndim == 2 else P["v_a"]
      e = np.tanh((q[:, :, h] @ wq)[:, :, None, :] + (k[:, :, h] @ wk)[:, None, :, :])
      out[:, h] = e @ va
    return out * s
  if name == "cosine":
    qn = q / np.linalg.norm(q, axis=-1, keepdims=True)
    kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
    beta = np.broadcast_to(P.get("beta", 1.0), (Hq,))
    return np.einsum("bihd,bjhd->bhij", qn, kn) * beta[None, :, None, None] * s
  if name == "location":
    W = np.broadcast_to(P["w"], (Hq,) + P["w"].shape[-2:])[..., :Tk]
    return np.einsum("bihd,hdj->bhij", q, W) * s
  raise AssertionError(f"reference.SCORE_NAMES lists {name!r} but scores has no branch for it")


def allowed(B, Hq, Tq, Tk, causal, mask):
  """(B, Hq, Tq, Tk) bool: the contract's mask, bottom-right causal."""
  a = np.ones((B, Hq, Tq, Tk), bool)
  if causal:
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    a &= (j <= i + (Tk - Tq))[None, None]
  if mask is not None:
    a &= np.broadcast_to(np.asarray(mask), a.shape)
  return a


def alibi_slopes(n):
  """Press et al.'s slopes, as their reference code computes them (get_slopes)."""
  def pow2(m):
    start = 2 ** (-2 ** -(np.log2(m) - 3))
    return [start * start ** i for i in range(m)]
  if np.log2(n).is_integer():
    return np.array(pow2(n))
  p = 2 ** int(np.floor(np.log2(n)))
  return np.array(pow2(p) + alibi_slopes(2 * p)[0::2][: n - p].tolist())


def alibi_bias(Hq, q_pos, k_pos):
  """(B|1, Hq, Tq, Tk) float64: -m_h |i - j| of explicit positions (B|1, T)."""
  q_pos, k_pos = np.asarray(q_pos), np.asarray(k_pos)
  dist = np.abs(q_pos[:, :, None] - k_pos[:, None, :]).astype(np.float64)
  return -alibi_slopes(Hq)[None, :, None, None] * dist[:, None]


def rope(x, pos, base=10000.0, side=None):
  """x (B, T, H, D) rotated by positions pos (B|1, T), float64, as complex numbers:
  the half-split pairs (d, d + D/2) are z = x_d + i x_{d+D/2}, multiplied by
  e^(i pos θ_d), θ_d = base^(-d/(D/2)); with side (2D): the first half of the pairs by
  the row pos // side, the second by the column pos % side, θ restarting per half."""
  x = np.asarray(x, np.float64)
  pos = np.asarray(pos)
  P = x.shape[-1] // 2
  if side is None:
    ang = pos[..., None] * base ** (-np.arange(P) / P)
  else:
    h = P // 2
    theta = base ** (-np.arange(h) / h)
    ang = np.concatenate([(pos // side)[..., None] * theta, (pos % side)[..., None] * theta],
                         -1)
  z = (x[..., :P] + 1j * x[..., P:2 * P]) * np.exp(1j * ang)[:, :, None, :]
  return np.concatenate([z.real, z.imag], -1)


def attention(name, q, k, v, *, causal=False, mask=None, params=None, scale=None,
              bias=None):
  """Reference output (B, Tq, Hq, Dv) float64; rows with no allowed key are zeros.
  bias: None or broadcastable to (B, Hq, Tq, Tk), added to the scores."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  B, Tq, Hq, _ = q.shape
  Tk = k.shape[1]
  k, v = expand(k, Hq), expand(v, Hq)
  s = scores(name, q, k, params or {}, scale)
  if bias is not None:
    s = s + bias
  a = allowed(B, Hq, Tq, Tk, causal, mask)
  s = np.where(a, s, -np.inf)
  m = np.max(s, axis=-1, keepdims=True)
  m = np.where(np.isfinite(m), m, 0.0)
  p = np.where(a, np.exp(s - m), 0.0)
  l = p.sum(-1, keepdims=True)
  p = np.divide(p, l, out=np.zeros_like(p), where=l > 0)
  return np.einsum("bhij,bjhd->bihd", p, v)


# ---- packed rows: each segment run alone ----------------------------------------------

def segments_alone(seg):
  """Each segment of packed rows as a row of its own, for "a packed row equals each
  segment run alone" in one call: seg (B, T) int ids in contiguous runs ->
  take (n, T) int, the flat index b·T + t in the packed batch of each position of the
  n segments' rows (left-aligned; 0 past the segment's end) and real (n, T) bool."""
  B, T = seg.shape
  take, real = [], []
  for b in range(B):
    cuts = [0] + [t for t in range(1, T) if seg[b, t] != seg[b, t - 1]] + [T]
    for s, e in zip(cuts[:-1], cuts[1:]):
      take.append(np.pad(np.arange(s, e) + b * T, (0, T - (e - s))))
      real.append(np.arange(T) < e - s)
  return np.array(take), np.array(real)


def to_alone(x, take, real):
  """(B, T, ...) packed -> (n, T, ...) one segment per row (`segments_alone`), zeros
  past each segment's end."""
  y = np.asarray(x).reshape((-1,) + np.shape(x)[2:])[take]
  return np.where(real.reshape(real.shape + (1,) * (y.ndim - 2)), y, 0).astype(y.dtype)


def from_alone(y, take, real, B):
  """(n, T, ...) one segment per row -> (B, T, ...) packed: the inverse of `to_alone`."""
  y = np.asarray(y)
  out = np.zeros((B * y.shape[1],) + y.shape[2:], y.dtype)
  out[take[real]] = y[real]
  return out.reshape((B, y.shape[1]) + y.shape[2:])


def favor(x, P, query):
  """FAVOR+'s positive features of x (B, T, H, D) with projection P (m, D), float64."""
  xs = x * x.shape[-1] ** -0.25
  lg = xs @ P.T - 0.5 * np.sum(xs * xs, -1, keepdims=True)
  if query:
    lg = lg - lg.max(-1, keepdims=True)
  return np.exp(lg) / np.sqrt(P.shape[0])
