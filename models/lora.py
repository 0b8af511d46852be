"""LoRA (Hu et al. 2021) on any Dense layer of a model, with Flax's own nnx.LoRALinear.

  n = apply_lora(model, rank=8, targets="q,k,v,o,mlp", alpha=16, rngs=nnx.Rngs(0))
  opt = nnx.Optimizer(model, tx, wrt=nnx.LoRAParam)   # only the adapters train
  merge_lora(model)                                   # W <- W + (alpha/r) A B, in place

Targets name the layers by their attribute: q, k, v, o (every attention layer, self
and cross), fc1, fc2, or mlp (= fc1 and fc2), or any other Linear's name (e.g. proj
of a head). Each selected `nnx.Linear` becomes a `ScaledLoRALinear` holding the same
kernel and bias plus A: (in, r) ~ N(0, 1/in) and B: (r, out) = 0, so the adapted
model starts exactly at the base model.

Why a subclass: nnx.LoRALinear adds x A B unscaled; the paper scales the update by
alpha / r so that changing r does not require retuning the learning rate.
ScaledLoRALinear only multiplies the adapter output by that constant.
"""
from __future__ import annotations

import jax
from flax import nnx

from models.layers import dense_layers, replace_dense

GROUPS = {"mlp": ("fc1", "fc2")}


class ScaledLoRALinear(nnx.LoRALinear):
  """nnx.LoRALinear whose adapter output is scaled by `scale` (= alpha / rank)."""

  def __init__(self, *args, scale: float = 1.0, **kw):
    super().__init__(*args, **kw)
    self.scale = scale

  def __call__(self, x, out_sharding=None):
    return nnx.Linear.__call__(self, x, out_sharding=out_sharding) + self.scale * self.lora(x)


def target_names(targets) -> set[str]:
  """'q,k,v,o,mlp' (or a sequence) -> the attribute names of the selected layers."""
  if isinstance(targets, str):
    targets = [t.strip() for t in targets.split(",") if t.strip()]
  names = set()
  for t in targets:
    names.update(GROUPS.get(t, (t,)))
  return names


def apply_lora(model: nnx.Module, *, rank: int, targets="q,k,v,o,mlp", alpha=None,
               rngs: nnx.Rngs) -> int:
  """Wraps the targeted Linear layers with rank-`rank` adapters in place; returns how many.

  alpha: the LoRA scale numerator (None: alpha = rank, i.e. scale 1).
  Raises ValueError for rank < 1 or targets that match no layer (listing the names).
  """
  if not isinstance(rank, int) or rank < 1:
    raise ValueError(f"lora rank must be a positive int, got {rank!r}")
  names = target_names(targets)
  present = {p[-1] for p, _ in dense_layers(model)}
  missing = sorted(names - present)
  if missing:
    raise ValueError(f"lora targets {missing} match no Dense layer; this model's Dense "
                     f"layers are named: {sorted(present)} (and 'mlp' = fc1, fc2)")
  scale = (rank if alpha is None else alpha) / rank

  def wrap(path, lin):
    new = ScaledLoRALinear(
        lin.in_features, lin.out_features, lora_rank=rank, use_bias=lin.use_bias,
        dtype=lin.dtype, scale=scale, rngs=rngs,
        a_initializer=jax.nn.initializers.normal(lin.in_features ** -0.5))
    new.kernel[...] = lin.kernel[...]
    if lin.use_bias:
      new.bias[...] = lin.bias[...]
    return new

  return replace_dense(model, wrap, lambda p: p[-1] in names and
                       not isinstance(_get(model, p), nnx.LoRALinear))


def _get(model, path):
  m = model
  for k in path:
    m = m[k] if isinstance(k, int) else getattr(m, k)
  return m


def merge_lora(model: nnx.Module) -> int:
  """Folds every adapter into its base weights (W + scale A B) and restores plain
  nnx.Linear layers, in place: zero inference overhead. Returns how many."""
  def fold(path, lin):
    new = nnx.Linear(lin.in_features, lin.out_features, use_bias=lin.use_bias,
                     dtype=lin.dtype, rngs=nnx.Rngs(0))
    scale = getattr(lin, "scale", 1.0)
    new.kernel[...] = lin.kernel[...] + scale * (lin.lora.lora_a[...] @ lin.lora.lora_b[...])
    if lin.use_bias:
      new.bias[...] = lin.bias[...]
    return new

  return replace_dense(model, fold, lambda p: isinstance(_get(model, p), nnx.LoRALinear))


def lora_count(model: nnx.Module) -> int:
  """Number of adapter values (nnx.LoRAParam) in the model."""
  return int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.LoRAParam))))
