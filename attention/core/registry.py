"""The one registry that maps a variant name to its function and its facts.

Models never branch on a variant's name: they call `get(name)` and read the
`Variant` record (what it supports, what parameters it needs, its decode state).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
from typing import Any, Callable, Iterator, Mapping

import jax
from jax.nn.initializers import zeros as _zeros

from attention.core.common import AttentionError

# Position schemes that act inside attention (models/config.py POSITIONS has the
# additive ones too, which never reach a variant): see attention/core/positions.py.
POSITION_SCHEMES = ("rope", "rope2d", "alibi")


class Refused(str):
  """A position scheme a variant does not take; the string says why (a `Variant.
  positions` value). Any other value is a plain str saying how the variant takes it."""


def _no_positions() -> dict:
  return {s: Refused("its registry record declares no support for it")
          for s in POSITION_SCHEMES}

# What a variant computes, for grouping it on results pages and plots: the same
# softmax attention by another kernel or precision, another score function, or an
# approximation that trades exactness for time or memory.
FAMILIES = {
    "exact": "softmax attention, by other kernels and precisions",
    "score": "other score functions (Luong, Bahdanau, Graves)",
    "efficient": "efficient approximations (linear, low-rank, sparse, hashed)",
    "gated": "gated linear attention (decay, gates, delta rule)",
}


# The pieces of the layer a variant's paper builds around its operator, which the
# models add (models/layers.py) where a record's `layer` lists them and the model's
# `gated_layer` keeps them: {piece: what it is, and whose paper uses it}.
LAYER_PIECES = {
    "qkv_conv": "a causal depthwise convolution of 4 taps over time on each of the q, k "
                "and v projections, before the operator (DeltaNet, Yang et al. 2024; "
                "Gated DeltaNet, Yang et al. 2025; an option of GLA's layer); decoding "
                "keeps its last 3 inputs, a packed row's taps stay in their segment",
    "qkv_silu": "SiLU on q, k and v before the operator (after qkv_conv): the feature map "
                "of DeltaNet and Gated DeltaNet, before the operator's L2 norm of q and k",
    "rms_norm": "RMSNorm of each head's output, a learned scale per channel shared by "
                "the heads (GLA, DeltaNet, Gated DeltaNet as flash-linear-attention "
                "builds them)",
    "group_norm": "GroupNorm with one group per head on the output: each head's output "
                  "normalised (mean and variance over its channels), a learned scale and "
                  "bias per channel (RetNet, Sun et al. 2023 §2.2, whose decay "
                  "normalisations it makes irrelevant)",
    "out_gate": "the swish output gate o = norm(attn) ⊙ silu(x W_g) before the output "
                "projection (RetNet's Y = swish(X W_G) ⊙ GroupNorm(...); GLA's; Gated "
                "DeltaNet's)",
    "attn_gate": "the sigmoid output gate o = attn ⊙ σ(x W_g), elementwise and "
                 "head-specific (W_g: D -> Hq·Dh), on the operator's output before the "
                 "output projection (Qiu et al. 2025, Gated Attention for LLMs: their G1 "
                 "position; Qwen3-Next's gated softmax layers); after an output "
                 "normalisation, and never with out_gate (two gates on one output)",
}
OUTPUT_NORMS = ("rms_norm", "group_norm")     # at most one of them in a layer
# Layer pieces that exclude each other: both gate the operator's output, one with
# silu(x W_g), the other with σ(x W_g); a layer with both would gate it twice.
EXCLUSIVE_PIECES = (("out_gate", "attn_gate"),)


# Keyword arguments of the contract itself, which the caller (a model, a decode step)
# supplies on every call: never a variant's options. A new contract argument (e.g. the
# positions of the queries and keys) is added here.
CONTRACT_ARGS = ("causal", "mask", "dropout_rate", "dropout_rng", "positions", "q_pos", "k_pos",
                 "q_seg", "k_seg")

# The default of `Variant.segments`: a new variant takes no segment ids until it says how.
NO_SEGMENTS = "its registry record declares no support for segment ids"


def _keywords(fn) -> tuple[dict[str, Any], bool]:
  """({keyword-only parameter: its default, or inspect.Parameter.empty}, whether fn
  takes **kw) of a function or callable object."""
  params = inspect.signature(fn).parameters.values()
  return ({p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY},
          any(p.kind is p.VAR_KEYWORD for p in params))


@dataclasses.dataclass(frozen=True)
class ParamSpec:
  """A parameter a variant needs; the Flax modules create and own it.

  shape: a function (num_heads, head_dim, max_len, **options) -> shape tuple.
  init:  a function (key, shape, dtype) -> array.
  trainable: False for fixed random buffers (performer's projection, reformer's
    rotations): the models store them outside the trained parameters.
  options: the variant options (a model's attention_options) that set the shape,
    e.g. linformer's k_proj: the model passes them to `shape`, not to the function
    (the parameter carries them, as its shape).
  when: None (the parameter always exists) or the name of a bool option, default
    False, that switches it on: the parameter exists only while that option is True
    (`Variant.param_shapes` leaves it out otherwise). When the option is the
    parameter's own name (softmax's `sinks`), option and parameter share the keyword:
    a config sets `sinks=True`, the model then creates the parameter and passes its
    array as `sinks=`, and the function takes False or None (off) or the array.
  """
  shape: Callable[..., tuple[int, ...]]
  init: Callable[[Any, tuple[int, ...], Any], Any]
  trainable: bool = True
  options: tuple[str, ...] = ()
  when: str | None = None

  def present(self, options: Mapping | None = None) -> bool:
    """Whether the parameter exists under the variant `options` (`when`)."""
    return self.when is None or bool((options or {}).get(self.when, False))


INPUT_HEADS = ("kv", "q")


@dataclasses.dataclass(frozen=True)
class InputSpec:
  """A per-token input a variant computes from the layer input x (B, T, D_model).

  The models own it as a learned projection of x (the queries' sequence), one per
  layer, and pass it to every call of the variant's function and of its decode step
  as a keyword argument named after it: an array (B, T, heads, width), e.g. gla's
  gate logits or deltanet's β logits. A direct call passes it like any argument.

  width: a function (head_dim, **options) -> the width per head.
  heads: "kv" (one per key/value head: what acts on a state kept per kv head) or
    "q" (one per query head).
  rank: None: one Linear x -> heads·width; r: a low-rank pair x -> r -> heads·width
    (gla's gate, r = 16 in Yang et al. 2024).
  scale: the variance scale of the projection kernels' Xavier-uniform initialiser
    (1.0: the models' default for every Linear).
  bias_init: (key, shape, dtype) -> array, the bias of the (last) projection; None:
    no bias.
  options: the variant options that set the width (e.g. gla's gate="ssd": width 1).
    Unlike a ParamSpec's, they also reach the function, which checks the width.
  """
  width: Callable[..., int]
  heads: str = "kv"
  rank: int | None = None
  scale: float = 1.0
  bias_init: Callable | None = _zeros
  options: tuple[str, ...] = ()

  def __post_init__(self):
    if self.heads not in INPUT_HEADS:
      raise ValueError(f"InputSpec.heads={self.heads!r}; must be one of {INPUT_HEADS}")

  def shape(self, batch: int, length: int, num_heads: int, num_kv_heads: int,
            head_dim: int, options: dict | None = None) -> tuple[int, int, int, int]:
    """(batch, length, heads, width) of this input under the variant `options`."""
    options = options or {}
    width = self.width(head_dim, **{o: options[o] for o in self.options if o in options})
    return (batch, length, num_kv_heads if self.heads == "kv" else num_heads, int(width))


@dataclasses.dataclass(frozen=True)
class Variant:
  """Everything the project knows about one attention variant.

  fn:      the attention function, fn(q, k, v, *, causal=False, mask=None, **kw).
  paper:   the reference, e.g. "Vaswani et al. 2017".
  time, memory: asymptotic cost strings for the README table (N = sequence length).
  causal:  whether causal=True is supported.
  masks:   which masks are honoured: "any", "key padding" or "none".
  decode:  a short description of its decode state, or None if it cannot decode.
  params:  the explicit parameters it needs (name -> ParamSpec), for the models; one
           with `when` exists only under its option (`switches`, `param_shapes`:
           softmax's, flash's and local's learned `sinks`).
  cost:    cost(dims, *, causal, mode, **kw) -> attention.core.cost_model.Cost.
  decode_impl: its decode hooks, `attention.core.decode.DecodeImpl(init, step)`, used by
           attention.decode_step; `attention.core.kv_cache.KV_CACHE` for a variant with a
           `score`.
  cross:   whether Tq != Tk is supported, i.e. attending to another sequence
           (cross-attention); variants defined on one sequence refuse it.
  positional: whether the keys a query may see depend on the query's position in
           its own sequence (a window, a sparsity pattern, hash chunks in sequence
           order). Within one sequence that is the point; from a target to a source
           it is meaningless (a target position says nothing about where to look in
           the source), and step decoding, one query at a time, would see other keys
           than training did: such a variant is no cross-attention (`cross_attends`).
  dropout: whether fn honours dropout_rate= / dropout_rng= (dropout on the attention
           probabilities); fused or kernelised variants never form them.
  family:  one key of `FAMILIES`: "exact" (computes softmax attention, by another
           kernel or precision), "score" (another score function), "efficient"
           (an approximation or a sparsity pattern) or "gated" (linear attention
           with decay, gates or the delta rule).
  inputs:  the per-token inputs it computes from the layer input x (name ->
           InputSpec): the models project x to each and pass it by name to fn, to
           the decode step and to `implied_weights` (gla's gate logits, deltanet's β
           logits).
  causal_only: whether causal=False is refused (a variant defined as an RNN over
           its own sequence): no encoder self-attention.
  score:   the score function when fn is exactly softmax(score(q, k)) @ v under the
           contract (up to float rounding), else None: score(qg, kg, dims, **params)
           -> logits (B, Hkv, G, Tq, Tk) on the grouped layout (`attention.core.scores`).
           A kernel that computes scaled-dot softmax attention by another algorithm
           (flash, ring, sdpa, ...) declares `attention.core.scores.SCALED_DOT`. The KV
           cache (`attention.core.kv_cache`), the attention probabilities and maps
           (`attention.probabilities`, `attention.implied_weights`) and the contract
           tests read it, so a variant registered anywhere, with any score, decodes
           and draws maps with no edit to them.
  kernel_options: the options of fn that choose how it computes, not what (tiles, a
           device mesh, interpret mode, the vendor implementation): computing from
           `score` instead (a KV-cache step, the probabilities of a map) drops them.
  implied_weights: for a variant with no score, a closed form of the weights it
           applies to its values: fn(q, k, *, causal, mask, **kw) -> (B, Hq, Tq, Tk)
           float32 with out = weights @ v (linear, performer). None: maps probe the
           variant with one-hot values (`attention.core.weights`).
  content_routed: whether the keys a query may see are chosen from the content of
           the whole sequence (reformer sorts all positions by their hashes and cuts
           the order into chunks). With causal=True no weight ever goes to a future
           key (the gradient w.r.t. future inputs is zero), but a future query or key
           can move a past query's chunk, so earlier outputs are not invariant to
           future inputs, and padding a sequence moves its chunk boundaries.

  positions: for each position scheme that acts inside attention (POSITION_SCHEMES:
           "rope", "rope2d", "alibi"), how the variant takes it (a str), or
           `Refused(why)`. A scheme left out is refused (a new variant takes none until
           it says so); `fn(..., positions=spec)` of a refused scheme raises
           AttentionError with the variant, the scheme and this reason.
  segments: how the variant takes packed rows' segment ids (`q_seg`, `k_seg`: a query
           attends only keys of its own segment, `attention.core.common.check_segments`),
           a str, or `Refused(why)`; `fn(..., q_seg=...)` of a refusing variant raises
           AttentionError with the variant and this reason (`refuse_segments`).
  forms:   the values of its `form` option, each a computation of the same function
           (a chunked, a quadratic, a scan, an associative-scan form); tests check
           every form against the float64 recurrence, and benchmarks time them. ()
           for a variant without a `form` option.
  kv_widths: for a variant whose k and v are not per-head keys and values of the
           model's head width, a function (head_dim, **options) -> (key width, value
           width) per key/value head of the k and v that fn consumes, reading the options
           its signature names (MLA: its decoupled RoPE key and its latent, (d_r, d_c)).
           The models size their k and v projections by it and pass the widths to the
           decode state; the contract builds its k and v with them. None: (head_dim,
           head_dim), the contract's default. `kv_dims` reads it.
  layer:   the pieces of the layer its paper builds around the operator
           (`LAYER_PIECES`: "qkv_conv", "qkv_silu", "rms_norm" or "group_norm",
           "out_gate" or "attn_gate"), which the models add when the model's `gated_layer` is
           "published" (the default) and leave out when it is "bare" (models/config.py).
           () for a variant whose paper's layer is the plain attention layer.
  decay:   for a variant whose decay is fixed, not learned from the input (retention's
           γ_h), a function (num_kv_heads, **options) -> the decays per key/value head
           (float64 array, each in (0, 1]), reading the options its signature names; None
           where the decay is learned or there is none. Studies read it (how much of a
           token the state keeps n steps later: γ^n).
  own_positions: a position signal the variant applies by itself, whatever the
           model's `positions` scheme (mla: its decoupled RoPE), in words; None where
           it has none. A study comparing it with softmax under one scheme compares
           position signals too, and says so (studies.variants.seeds.what_differs).
  device:  the jax backend its kernels are compiled for ("gpu": flash_mgpu's Hopper
           kernels), None for any. Elsewhere fn runs them in an interpreter (exact,
           seconds per call), so `native_names` leaves it out of the test sweeps there.
  refused_options: {option: why} for options that other variants of its kind take and
           its kernel cannot (sdpa's `sinks`: jax.nn.dot_product_attention has no sink
           argument): `check_options` (so a model config) refuses each with this
           reason, by name, instead of "no option".
  runs_as: for a variant that, on some meshes, computes as another one, a function
           (mesh or None, **options) -> a one-line note saying so on that mesh, else
           None (ring with no mesh axis of size > 1 to split over is flash). The
           trainer prints the note in its banner and records it in runtime.json, so
           that a result named after the variant says what it measured.

  Its options (`options`, the keyword arguments a model's attention_options may set)
  are not declared: they are read from the signatures of fn, of its score and of its
  ParamSpecs, so that they stay true for a new variant with no edit here.
  """
  name: str
  fn: Callable
  paper: str
  time: str
  memory: str
  causal: bool
  masks: str
  decode: str | None
  cost: Callable
  params: dict[str, ParamSpec] = dataclasses.field(default_factory=dict)
  decode_impl: Any = None
  summary: str = ""
  cross: bool = True
  dropout: bool = False
  positional: bool = False
  family: str = ""
  inputs: dict[str, InputSpec] = dataclasses.field(default_factory=dict)
  causal_only: bool = False
  score: Callable | None = None
  kernel_options: tuple[str, ...] = ()
  implied_weights: Callable | None = None
  content_routed: bool = False
  positions: Mapping[str, str] = dataclasses.field(default_factory=_no_positions)
  segments: str = Refused(NO_SEGMENTS)
  runs_as: Callable | None = None
  kv_widths: Callable | None = None
  forms: tuple[str, ...] = ()
  layer: tuple[str, ...] = ()
  decay: Callable | None = None
  own_positions: str | None = None
  device: str | None = None
  refused_options: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    unknown = sorted(set(self.positions) - set(POSITION_SCHEMES))
    if unknown:
      raise ValueError(f"attention variant '{self.name}': positions has unknown schemes "
                       f"{unknown}; valid: {POSITION_SCHEMES}")
    object.__setattr__(self, "positions", {**_no_positions(), **self.positions})

  @property
  def native(self) -> bool:
    """Whether its kernels run compiled on this process's default backend."""
    return self.device is None or jax.default_backend() == self.device

  def takes(self, scheme: str) -> bool:
    """Whether the variant takes the in-attention position scheme `scheme`."""
    return not isinstance(self.positions.get(scheme, Refused("")), Refused)

  def position_refusal(self, scheme: str) -> str | None:
    """Why the variant refuses `scheme`, or None if it takes it."""
    return None if self.takes(scheme) else str(self.positions[scheme])

  def note_on(self, mesh, options=None) -> str | None:
    """`runs_as`'s note for `mesh` (None: no mesh) and the variant's options, or None."""
    return self.runs_as(mesh, **(options or {})) if self.runs_as is not None else None

  @property
  def takes_segments(self) -> bool:
    """Whether the variant honours segment ids (`q_seg`, `k_seg`)."""
    return not isinstance(self.segments, Refused)

  @property
  def options(self) -> dict[str, Any]:
    """{option: its default (inspect.Parameter.empty if it has none)}, sorted by name:
    the keyword arguments a user may set for this variant (a model's
    attention_options), read from the signatures: fn's keyword-only parameters, its
    score's when fn passes **kw on to its score (the softmax family), and the options
    of its ParamSpecs (e.g. linformer's k_proj), less its parameters (`params`), its
    per-token inputs (`inputs`) and
    the contract's own arguments (`CONTRACT_ARGS`). Kernel options are among them."""
    opts, var_kw = _keywords(self.fn)
    if var_kw and self.score is not None:
      opts = {**_keywords(self.score)[0], **opts}
    for spec in self.params.values():
      shape_kw = inspect.signature(spec.shape).parameters
      opts.update({o: shape_kw[o].default if o in shape_kw else inspect.Parameter.empty
                   for o in spec.options})
      if spec.when is not None:
        opts[spec.when] = False
    drop = (set(self.params) - set(self.switches)) | set(self.inputs) | set(CONTRACT_ARGS)
    return {o: opts[o] for o in sorted(opts) if o not in drop}

  @property
  def switches(self) -> dict[str, str]:
    """{parameter: its switch option} of the parameters that exist only while a bool
    option is on (`ParamSpec.when`), e.g. softmax's {"sinks": "sinks"}."""
    return {p: s.when for p, s in self.params.items() if s.when is not None}

  def check_options(self, options) -> None:
    """Raises AttentionError for an option name this variant does not take, naming the
    closest valid ones (difflib) and all of them; values are the function's to check."""
    valid = self.options
    for o in sorted(options):
      if o in valid:
        continue
      if o in self.refused_options:
        raise AttentionError(f"attention variant '{self.name}' does not take option "
                             f"{o!r}: {self.refused_options[o]}")
      if o in self.params:
        why = (f"{o!r} is a parameter of attention variant '{self.name}' (a ParamSpec: "
               "the model creates and owns it), not an option")
      else:
        near = difflib.get_close_matches(o, list(valid), n=3, cutoff=0.6)
        why = (f"attention variant '{self.name}' has no option {o!r}"
               + (f"; did you mean {' or '.join(near)}?" if near else ""))
      raise AttentionError(f"{why} (its options: {', '.join(valid) or 'none'})")

  def param_shapes(self, num_heads: int, head_dim: int, max_len: int,
                   options: dict | None = None) -> tuple[dict, dict]:
    """({param: shape}, the options left for the function) of this variant in a model
    of num_heads heads of head_dim and sequences up to max_len, under `options`
    (the model's attention_options for it). A switched parameter (`ParamSpec.when`)
    is there only while its option is on; an option that is a parameter's own switch
    (`sinks`) is not left for the function: the parameter's array takes its place."""
    options = dict(options or {})
    shapes = {p: tuple(s.shape(num_heads, head_dim, max_len,
                               **{o: options[o] for o in s.options if o in options}))
              for p, s in self.params.items() if s.present(options)}
    taken = ({o for s in self.params.values() for o in s.options}
             | {w for p, w in self.switches.items() if w == p})
    return shapes, {k: v for k, v in options.items() if k not in taken}

  def input_shapes(self, batch: int, length: int, num_heads: int, num_kv_heads: int,
                   head_dim: int, options: dict | None = None) -> dict[str, tuple]:
    """{input: (batch, length, heads, width)} of the per-token inputs (`inputs`)."""
    return {n: s.shape(batch, length, num_heads, num_kv_heads, head_dim, options)
            for n, s in self.inputs.items()}

  def kv_dims(self, head_dim: int, options: dict | None = None) -> tuple[int, int]:
    """(key width, value width) per key/value head of the k and v this variant's
    function consumes in a model of head_dim under `options` (`kv_widths`; default
    (head_dim, head_dim))."""
    if self.kv_widths is None:
      return head_dim, head_dim
    taken = inspect.signature(self.kv_widths).parameters
    options = options or {}
    dk, dv = self.kv_widths(head_dim, **{o: options[o] for o in options if o in taken})
    return int(dk), int(dv)

  @property
  def cross_attends(self) -> bool:
    """Usable as an encoder-decoder's cross-attention (Tq != Tk, keys by content)."""
    return self.cross and not self.positional


_REGISTRY: dict[str, Variant] = {}


def _check(v: Variant) -> None:
  """Refuses a record whose facts cannot all hold, naming the field and why."""
  def bad(why):
    raise ValueError(f"attention variant '{v.name}': {why}")
  if v.family not in FAMILIES:
    bad(f"family={v.family!r}; must be one of {sorted(FAMILIES)}")
  if v.score is not None and not callable(v.score):
    bad(f"score={v.score!r} must be a score function (qg, kg, dims, **params) -> logits")
  if v.implied_weights is not None and not callable(v.implied_weights):
    bad(f"implied_weights={v.implied_weights!r} must be a function (q, k, *, causal, "
        "mask, **kw) -> weights")
  if not isinstance(v.kernel_options, tuple) or not all(
      isinstance(o, str) for o in v.kernel_options):
    bad(f"kernel_options={v.kernel_options!r} must be a tuple of option names")
  if not isinstance(v.forms, tuple) or not all(isinstance(f, str) for f in v.forms):
    bad(f"forms={v.forms!r} must be a tuple of the values of its `form` option")
  if v.forms and "form" not in v.options:
    bad(f"forms={v.forms!r} but its function has no `form` option")
  if not isinstance(v.layer, tuple) or any(p not in LAYER_PIECES for p in v.layer):
    bad(f"layer={v.layer!r} must be a tuple of layer pieces, of: {', '.join(LAYER_PIECES)}")
  if sum(p in OUTPUT_NORMS for p in v.layer) > 1:
    bad(f"layer={v.layer!r} lists two output normalisations; one of {OUTPUT_NORMS}")
  for pair in EXCLUSIVE_PIECES:
    if all(p in v.layer for p in pair):
      bad(f"layer={v.layer!r} lists both of {pair}: two gates on one output")
  for p, spec in v.params.items():
    if spec.when is not None and spec.when in spec.options:
      bad(f"params[{p!r}]: its switch option {spec.when!r} cannot also set its shape")
  for o in v.refused_options:
    if o in v.options:
      bad(f"refused_options names {o!r}, which is one of its options")
  if v.kv_widths is not None and not callable(v.kv_widths):
    bad(f"kv_widths={v.kv_widths!r} must be a function (head_dim, **options) -> "
        "(key width, value width)")
  if v.causal_only and not v.causal:
    bad("causal_only=True needs causal=True")
  for field in getattr(v.decode_impl, "needs", ()):
    if getattr(v, field) is None:
      bad(f"its decode_impl reads Variant.{field}, which is not set (e.g. the KV "
          "cache needs the score function: score=attention.core.scores.SCALED_DOT for a "
          "kernel that computes softmax attention)")


def register(variant: Variant) -> Variant:
  """Adds a variant; a second registration under the same name is an error, and so is
  a record whose facts contradict each other (ValueError naming the field)."""
  _check(variant)
  if variant.name in _REGISTRY:
    raise ValueError(f"attention variant '{variant.name}' is registered twice")
  _REGISTRY[variant.name] = variant
  return variant


def unregister(name: str) -> Variant:
  """Removes `name` from the registry and returns its record (for tests and notebooks
  that register a variant of their own; the built-in ones stay registered)."""
  variant(name)                    # an unknown name lists the valid ones
  return _REGISTRY.pop(name)


@contextlib.contextmanager
def registered(*variants: Variant) -> Iterator[tuple[Variant, ...]]:
  """Registers `variants` for the duration of a `with` block, then removes them,
  also when the block raises, so that a test's own variant never leaks into another.

    with attention.registered(Variant(name="my_softmax", ...)):
      attention.get("my_softmax")(q, k, v)
  """
  done = []
  try:
    for v in variants:
      done.append(register(v))
    yield tuple(done)
  finally:
    for v in reversed(done):
      if _REGISTRY.get(v.name) is v:
        del _REGISTRY[v.name]


def names() -> list[str]:
  """Sorted list of every registered variant name."""
  return sorted(_REGISTRY)


def native_names(own_compute: bool = False) -> list[str]:
  """The registered names whose kernels run compiled here (`Variant.native`): what the
  test sweeps over every variant (the contract, the models, the positions) cover. A
  variant with a `device` of another backend runs in its interpreter here, exact but
  far too slow for the sweeps: its own test file checks it here, the sweeps on its
  device.

  own_compute: leave out too the variants that, with no mesh, compute as another one
  (`Variant.runs_as`: ring is flash's function there), whose single-device numbers
  would repeat that variant's; their own test file checks that they pass every
  argument on to it."""
  return [n for n in names() if variant(n).native
          and not (own_compute and variant(n).note_on(None) is not None)]


def variant(name: str) -> Variant:
  """The `Variant` record for `name`; an unknown name lists every valid one."""
  try:
    return _REGISTRY[name]
  except (KeyError, TypeError):
    raise AttentionError(
        f"unknown attention variant {name!r}; valid names are: "
        + ", ".join(names())) from None


def refuse_segments(name: str, q_seg, k_seg) -> None:
  """Raises AttentionError (the variant, its reason) if segment ids reach a variant
  whose record refuses them; call it first thing in such a variant's function."""
  if q_seg is None and k_seg is None:
    return
  seg = variant(name).segments
  if isinstance(seg, Refused):
    raise AttentionError(f"attention variant '{name}' does not support segment ids "
                         f"(q_seg/k_seg, packed sequences): {seg}")


def get(name: str) -> Callable:
  """The attention function registered as `name` (see `variant` for its facts)."""
  return variant(name).fn
