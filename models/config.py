"""The model configuration: one frozen dataclass, validated before anything is built.

`ModelConfig` is what the modules read. `ModelConfig.from_dict` accepts a plain dict
or an ml_collections ConfigDict (the `model` field of a training config) and names the
key of any unknown field. `validate()` checks every attention layer against the
registry's `Variant` facts, so an impossible combination fails here, with the reason,
instead of deep inside a traced function.

Attention roles: `attention` sets every layer; `encoder_attention`,
`decoder_attention` and `cross_attention` override it for one role (None = use
`attention`). Variant options live under the variant's name in `attention_options`
(e.g. {"local": {"window": 64}}; on the command line
`--config.model.attention_options.local.window=64`), so swapping `attention` by flag
keeps each variant's options meaningful. Their names are checked against what the
variant takes (`attention.Variant.options`), their values by tracing one call.

Positions (`positions`, one scheme for the whole model):
  sinusoidal  fixed sin/cos vectors added to the embeddings (Vaswani et al. 2017).
  learned     one trained vector per position up to max_len, added to the embeddings
              (Gehring et al. 2017, "Convolutional Sequence to Sequence Learning";
              BERT, GPT-2). No position past max_len exists.
  rope        rotary: q and k rotated by their positions inside attention (Su et al.
              2021, RoFormer); `rope_base`, `rope_fraction` (attention.core.positions).
  rope2d      axial 2D rotary for images: half of each head's rotary pairs rotated by
              the pixel's row, half by its column (Heo et al. 2024, "Rotary Position
              Embedding for Vision Transformer"); `image_side` (0: the task's image
              size, set by the training config).
  alibi       a per-head linear bias -m_h |i - j| on the attention scores, the paper's
              geometric slopes (Press et al. 2022, "Train Short, Test Long").
  none        no position information at all (NoPE: Haviv et al. 2022, "Transformer
              Language Models without Positional Encodings Still Learn Positional
              Information"); a causal model infers positions from its mask.
The layer around a variant (`gated_layer`): a variant's registry record lists the
pieces its paper builds around the operator (`Variant.layer`: retention's GroupNorm and
swish output gate, gla's RMSNorm and gate, deltanet's q/k/v convolutions, SiLU and
RMSNorm, gated_deltanet's all four; attention.core.registry.LAYER_PIECES says each with
its paper), and every self-attention gets them by default ("published"); "bare" is the
operator alone (how the results pages' gated rows were trained before issue 76), and
",piece" / ",-piece" switch one piece each, so an ablation is a sweep over this one
field. Cross-attention gets none.

Per-layer attention (`layer_attention`, hybrid stacks such as Qwen3-Next's or gpt-oss's):
a comma-separated pattern of entries `variant[+piece|-piece ...][*n]`, e.g.
"gated_deltanet*3,softmax+attn_gate"; `*n` repeats an entry n times, and the pattern
(its entries expanded) repeats over the decoder's num_layers, which its length must
divide (layer i takes entry i mod P). It sets the decoder's self-attention (kind "lm"
and "encdec": the encoder and cross-attention keep their roles; a "classifier" has no
decoder and refuses it) and replaces `attention` / `decoder_attention` there ("": every
decoder layer is `attention_for("decoder_attention")`, as before the field existed).
Each layer takes its variant's `attention_options` and its own layer pieces:
`gated_layer` read against that layer's variant record, then the entry's "+piece" /
"-piece" on top (so the softmax layers of a gated_deltanet stack alone take attn_gate).
A rotary or bias position scheme acts in every layer whose variant takes it; a layer
whose variant refuses it and orders its tokens itself (a recurrence, `causal_only`, or
its own positions, `own_positions`) runs without it, as Qwen3-Next's linear layers
do; any other refusal refuses the pattern. `layer_specs(role)` says each layer's
variant, pieces and positions.

rope, rope2d and alibi act inside self-attention (encoder and decoder); the embeddings
get nothing. Cross-attention gets no positions under any scheme: a target position and
a source position share no axis along which to measure i - j. Every self-attention
variant must take the scheme (its registry record says so, `Variant.positions`), else
`validate` refuses the pair before anything is built.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, NamedTuple

import flax.core

import attention
from attention import AttentionError


class ConfigError(ValueError):
  """A model configuration that cannot be built; the message names the key."""


ROLES = ("encoder_attention", "decoder_attention", "cross_attention")
KINDS = ("lm", "encdec", "classifier")
HEADS = ("categorical", "dmol")
ACTIVATIONS = ("relu", "gelu")
POSITIONS = ("sinusoidal", "learned", "rope", "rope2d", "alibi", "none")
ADDITIVE = ("sinusoidal", "learned")     # added to the embeddings; the rest act in attention


class LayerSpec(NamedTuple):
  """One layer's self-attention: its variant, its layer pieces (`layer_pieces`) and its
  position scheme (attention.core.positions.Positions, or None)."""
  name: str
  pieces: tuple[str, ...]
  positions: Any
REMATS = ("none", "block", "full")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Sizes and choices of a Transformer (decoder-only LM, pixel LM or encoder-decoder).

  kind: "lm" (decoder-only; text or pixels), "encdec" (Vaswani et al.) or
    "classifier" (an encoder whose mean-pooled output is classified, as in LRA).
  vocab_size: output classes: characters/tokens, 256 grey levels for pixels, or a
    classifier's classes.
  src_vocab_size: encoder vocabulary of "encdec" and "classifier" (None: vocab_size).
  """
  kind: str = "lm"                    # "lm" (decoder-only), "encdec" or "classifier"
  vocab_size: int = 256               # output classes (tokens, characters, 256 grey levels)
  src_vocab_size: int | None = None   # encdec/classifier inputs (None: vocab_size)
  d_model: int = 128                  # residual stream width D
  num_heads: int = 4                  # query heads H
  num_kv_heads: int | None = None     # None: num_heads (MHA); 1: MQA; else GQA
  head_dim: int | None = None         # None: d_model // num_heads
  d_ff: int = 512                     # FFN hidden width F
  num_layers: int = 2                 # decoder layers (the LM's; a classifier's encoder)
  num_encoder_layers: int | None = None  # None: num_layers
  activation: str = "relu"            # FFN nonlinearity: "relu" or "gelu"
  pre_ln: bool = False                # False: post-LN as in Vaswani et al.
  dropout: float = 0.0                # residual, embedding and FFN dropout
  attention_dropout: float = 0.0      # dropout on attention probabilities
  positions: str = "sinusoidal"       # sinusoidal | learned | rope | rope2d | alibi | none
                                      # (each with its paper in the module docstring)
  rope_base: float = 10000.0          # rope/rope2d: the rotary base (RoFormer's 10000)
  rope_fraction: float = 1.0          # rope/rope2d: share of each head's dims rotated
  image_side: int = 0                 # rope2d: pixels per image row (0: from the task)
  max_len: int = 512                  # longest sequence (source or target) accepted
  one_hot_max_vocab: int = 1024       # embedding lookup: a one-hot matmul up to this
                                      # vocabulary, a gather above it (0: always a
                                      # gather); models.layers.ONE_HOT_MAX_VOCAB says why
  short_conv: int = 0                 # taps K of a depthwise causal convolution over time
                                      # on every self-attention's input (0: none; "lm"
                                      # only): ShortConv in models/layers.py
  gated_layer: str = "published"      # the layer a variant's paper builds around its
                                      # operator (its record's `layer`, e.g. deltanet's
                                      # q/k/v convolutions and output norm; the pieces:
                                      # attention.core.registry.LAYER_PIECES), on every
                                      # self-attention: "published" (the record's
                                      # pieces), "bare" (the operator alone), then
                                      # ",piece" adds one and ",-piece" removes one
                                      # ("published,-out_gate"); `layer_pieces` reads it
  attention: str = "softmax"          # the variant of every attention layer
  layer_attention: str = ""           # per-layer decoder self-attention, a pattern
                                      # repeated over num_layers, e.g.
                                      # "gated_deltanet*3,softmax+attn_gate" (module
                                      # docstring; "": every layer decoder_attention)
  encoder_attention: str | None = None  # override for encoder self-attention
  decoder_attention: str | None = None  # override for decoder (causal) self-attention
  cross_attention: str | None = None    # override for encoder-decoder cross-attention
  attention_options: Mapping[str, Mapping[str, Any]] = dataclasses.field(
      default_factory=dict)           # per-variant call options, {"local": {"window": 64}}
  head: str = "categorical"           # "categorical" or "dmol" (pixels only)
  num_mixtures: int = 10              # logistic components of the dmol head
  share_embeddings: bool = True       # encdec: one embedding for source and target
  tie_output: bool = False            # output projection = embedding transpose
  pad_id: int = 0                     # encdec padding token (masked everywhere)
  bos_id: int = 1                     # encdec start token of the decoder
  eos_id: int = 2                     # encdec end token
  dtype: str = "float32"              # compute dtype ("bfloat16" for mixed precision)
  remat: str = "none"                 # rematerialisation: "none", "block" (each block
                                      # recomputed in the backward pass, its matmul
                                      # outputs kept) or "full" (only block inputs kept)

  def __post_init__(self):
    # Frozen (hashable) options: the config is static data of the NNX graph.
    object.__setattr__(self, "attention_options", flax.core.freeze(
        {k: dict(v) for k, v in dict(self.attention_options or {}).items()}))

  # ---- derived -------------------------------------------------------------
  @property
  def kv_heads(self) -> int:
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def dh(self) -> int:
    return self.head_dim or self.d_model // self.num_heads

  @property
  def position_spec(self):
    """The attention.core.positions.Positions of self-attention, or None (additive or none)."""
    if self.positions in ADDITIVE or self.positions == "none":
      return None
    return attention.core.positions.make(self.positions, base=self.rope_base,
                                    fraction=self.rope_fraction, side=self.image_side)

  @property
  def encoder_layers(self) -> int:
    return self.num_layers if self.num_encoder_layers is None else self.num_encoder_layers

  def attention_for(self, role: str) -> str:
    """The variant name of a role: 'encoder_attention', 'decoder_attention', 'cross_attention'."""
    return getattr(self, role) or self.attention

  def layer_specs(self, role: str) -> tuple[LayerSpec, ...]:
    """Each layer's self-attention in the stack of `role` ("decoder_attention" or
    "encoder_attention"): `layer_attention`'s pattern over the decoder's num_layers
    where it is set, else the role's one variant on every layer (module docstring)."""
    n = self.num_layers if role == "decoder_attention" else self.encoder_layers
    if role != "decoder_attention" or not self.layer_attention:
      name = self.attention_for(role)
      return (LayerSpec(name, self.layer_pieces(name), self.position_spec),) * n
    entries = parse_pattern(self.layer_attention)
    specs = []
    for name, changes in entries:
      pieces = layer_pieces(",".join((self.gated_layer,) + changes),
                            attention.variant(name).layer)
      spec = self.position_spec
      if spec is not None and attention.variant(name).position_refusal(spec.kind):
        spec = None                    # a recurrence or own positions (validate says)
      specs.append(LayerSpec(name, pieces, spec))
    return tuple(specs[i % len(specs)] for i in range(n))

  def role_variants(self, role: str) -> tuple[str, ...]:
    """The distinct variants of `role`'s layers, in layer order (one without a
    `layer_attention` pattern; cross-attention: its one variant)."""
    if role != "decoder_attention" or not self.layer_attention:
      return (self.attention_for(role),)
    return tuple(dict.fromkeys(n for n, _ in parse_pattern(self.layer_attention)))

  @property
  def attention_label(self) -> str:
    """The attention the training banner names: `attention`, or with a pattern
    "<pattern> (layer_attention)" (an encoder-decoder's other roles' variant before
    it: "softmax, decoder layers <pattern>")."""
    if not self.layer_attention:
      return self.attention
    if self.kind == "lm":
      return f"{self.layer_attention} (layer_attention)"
    return f"{self.attention}, decoder layers {self.layer_attention} (layer_attention)"

  def options_for(self, name: str) -> dict:
    """Options passed to every call of variant `name` (from attention_options)."""
    return dict(self.attention_options.get(name, {}))

  def layer_pieces(self, name: str) -> tuple[str, ...]:
    """The layer pieces a self-attention of variant `name` gets: `gated_layer` read
    against the record's `layer` (`layer_pieces`). Cross-attention gets none."""
    return layer_pieces(self.gated_layer, attention.variant(name).layer)

  @property
  def roles(self) -> tuple[str, ...]:
    """The attention roles this model has."""
    return {"encdec": ROLES, "lm": ("decoder_attention",),
            "classifier": ("encoder_attention",)}[self.kind]

  @property
  def input_vocab(self) -> int:
    """Decoder input ids: the LM reserves id vocab_size as its start token."""
    return self.vocab_size + 1 if self.kind == "lm" else self.vocab_size

  @property
  def start_id(self) -> int:
    return self.vocab_size if self.kind == "lm" else self.bos_id

  # ---- construction and validation ----------------------------------------
  @classmethod
  def from_dict(cls, d) -> "ModelConfig":
    """Builds and validates a ModelConfig from a dict or ml_collections ConfigDict."""
    if hasattr(d, "to_dict"):
      d = d.to_dict()
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - fields)
    if unknown:
      raise ConfigError(f"model config: unknown key(s) {unknown}; valid keys: "
                        + ", ".join(sorted(fields)))
    return cls(**d).validate()

  def replace(self, **kw) -> "ModelConfig":
    return dataclasses.replace(self, **kw).validate()

  def validate(self) -> "ModelConfig":
    """Raises ConfigError naming the key and the reason; returns self when valid."""
    def need(ok, key, why):
      if not ok:
        raise ConfigError(f"model config '{key}': {why}")

    need(self.kind in KINDS, "kind", f"must be one of {KINDS}, got {self.kind!r}")
    for key in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len"):
      v = getattr(self, key)
      need(isinstance(v, int) and not isinstance(v, bool) and v > 0, key,
           f"must be a positive int, got {v!r}")
    need(self.num_heads % self.kv_heads == 0, "num_kv_heads",
         f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.kv_heads}")
    need(self.head_dim is not None or self.d_model % self.num_heads == 0, "head_dim",
         f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
         "set head_dim")
    need(self.activation in ACTIVATIONS, "activation", f"must be one of {ACTIVATIONS}")
    need(self.positions in POSITIONS, "positions",
         f"must be one of {POSITIONS}, got {self.positions!r}")
    need(self.positions != "rope2d" or (isinstance(self.image_side, int)
                                        and self.image_side > 0), "image_side",
         f"positions='rope2d' needs the image width in pixels, got {self.image_side!r} "
         "(training configs of an image task set it from the image size)")
    need(isinstance(self.rope_base, (int, float)) and self.rope_base > 1, "rope_base",
         f"must be a number > 1 (RoFormer's is 10000), got {self.rope_base!r}")
    need(isinstance(self.rope_fraction, (int, float)) and 0 < self.rope_fraction <= 1,
         "rope_fraction", f"must be in (0, 1], got {self.rope_fraction!r}")
    need(isinstance(self.one_hot_max_vocab, int) and not isinstance(
        self.one_hot_max_vocab, bool) and self.one_hot_max_vocab >= 0, "one_hot_max_vocab",
         f"must be an int >= 0 (0: always a gather), got {self.one_hot_max_vocab!r}")
    if self.position_spec is not None:
      try:
        attention.core.positions.rotary_pairs(self.position_spec, self.dh) \
            if self.position_spec.rotary else None
      except AttentionError as e:
        raise ConfigError(f"model config 'rope_fraction': {e} (head_dim {self.dh})") from None
    need(self.head in HEADS, "head", f"must be one of {HEADS}")
    need(self.head != "dmol" or (self.kind == "lm" and self.vocab_size == 256), "head",
         "the discretised logistic mixture models 8-bit pixels: kind='lm', vocab_size=256")
    for key in ("dropout", "attention_dropout"):
      need(0.0 <= getattr(self, key) < 1.0, key, "must be in [0, 1)")
    need(self.dtype in ("float32", "bfloat16", "float16", "float64"), "dtype",
         f"unsupported compute dtype {self.dtype!r}")
    need(self.remat in REMATS, "remat", f"must be one of {REMATS}, got {self.remat!r}")
    need(isinstance(self.short_conv, int) and not isinstance(self.short_conv, bool)
         and self.short_conv >= 0, "short_conv",
         f"must be an int >= 0 (taps; 0: none), got {self.short_conv!r}")
    need(self.short_conv == 0 or self.kind == "lm", "short_conv",
         f"the causal short convolution is built for decoder-only LMs (kind='lm'); "
         f"kind={self.kind!r} has bidirectional self-attention, which a causal "
         "convolution would make one-sided: set short_conv=0")
    need(isinstance(self.gated_layer, str), "gated_layer",
         f"must be a str such as 'published' or 'bare', got {self.gated_layer!r}")
    need(isinstance(self.layer_attention, str), "layer_attention",
         f"must be a str such as 'gated_deltanet*3,softmax', got {self.layer_attention!r}")
    if self.layer_attention:
      self._check_pattern(need)
    for role in ("encoder_attention", "decoder_attention"):
      if role not in self.roles or (role == "decoder_attention" and self.layer_attention):
        continue
      try:
        pieces = self.layer_pieces(self.attention_for(role))
      except AttentionError:          # an unknown variant: _check_role names it
        continue
      except ValueError as e:
        raise ConfigError(f"model config 'gated_layer': {e}") from None
      need(role == "decoder_attention" or "qkv_conv" not in pieces, "gated_layer",
           f"the q/k/v convolution is causal, and {role} attends both ways; "
           "leave it out there (',-qkv_conv')")
    for name, opts in self.attention_options.items():
      need(isinstance(opts, Mapping), f"attention_options.{name}", "must be a mapping")
      try:           # option names first: a misspelt one names the closest valid ones
        attention.variant(name).check_options(opts)
      except AttentionError as e:
        raise ConfigError(f"model config 'attention_options.{name}': {e}") from None
    for role in self.roles:
      for name in self.role_variants(role):
        self._check_role(role, need, name)
    return self

  def _check_pattern(self, need):
    """`layer_attention`: parses, names known variants, divides num_layers, a kind
    with a decoder, and each entry's pieces (module docstring)."""
    need(self.kind != "classifier", "layer_attention",
         "sets the decoder's self-attention per layer, and a classifier has no decoder "
         "(its encoder takes one variant: encoder_attention)")
    need(self.decoder_attention is None, "layer_attention",
         f"and decoder_attention={self.decoder_attention!r} both set the decoder's "
         "self-attention; set one")
    try:
      entries = parse_pattern(self.layer_attention)
    except ValueError as e:
      raise ConfigError(f"model config 'layer_attention': {e}") from None
    need(self.num_layers % len(entries) == 0, "layer_attention",
         f"{self.layer_attention!r} is {len(entries)} layers long, which does not "
         f"divide num_layers={self.num_layers}; the pattern repeats over the layers")
    for name, changes in entries:
      try:
        layer_pieces(",".join((self.gated_layer,) + changes), attention.variant(name).layer)
      except ValueError as e:
        raise ConfigError(f"model config 'layer_attention': {e}") from None
    spec = self.position_spec
    if spec is not None:
      names = dict.fromkeys(n for n, _ in entries)
      for name in names:
        v = attention.variant(name)
        why = v.position_refusal(spec.kind)
        need(why is None or v.causal_only or v.own_positions, "positions",
             f"attention variant '{name}' (layer_attention) does not take positions="
             f"'{spec.kind}': {why}; a pattern's layer may go without them only when "
             "its variant orders tokens itself (causal_only or own positions)")
      need(any(attention.variant(n).takes(spec.kind) for n in names), "positions",
           f"no layer of layer_attention={self.layer_attention!r} takes positions="
           f"'{spec.kind}'; use positions='none' or a layer that takes it")

  def check_length(self, T: int, key: str = "eval_seq_len") -> "ModelConfig":
    """Refuses (ConfigError naming `key`) to run this model, built for max_len, on
    sequences of T > max_len positions where nothing exists for them: learned
    positions (one vector per position up to max_len) and variants with per-position
    parameters (location's w, linformer's e and f: their own refusal is quoted).
    sinusoidal, rope, rope2d, alibi and none are functions of the position: a model
    trained at L runs at any T (whether it is any good there is the length
    extrapolation question). Returns self."""
    if T <= self.max_len:
      return self
    if self.positions == "learned":
      raise ConfigError(
          f"config '{key}': sequences of {T} positions, but positions='learned' has one "
          f"trained vector per position up to model.max_len={self.max_len} and none "
          f"past it; evaluate at <= {self.max_len}, or train with sinusoidal, rope, "
          "alibi or none")
    for role, name, spec in self._role_layers():
      items = tuple(sorted(self.options_for(name).items()))
      try:
        _trace_options(name, role == "decoder_attention", self.num_heads, self.kv_heads,
                       self.dh, T, items, spec, self.max_len)
      except AttentionError as e:
        raise ConfigError(f"config '{key}': attention variant '{name}' ({role}) cannot "
                          f"run on {T} positions with parameters built for "
                          f"model.max_len={self.max_len}: {e}") from None
    return self

  def check_segments(self, key: str = "packing") -> "ModelConfig":
    """Refuses (ConfigError naming `key`) packed rows, which pass segment ids to every
    attention layer, when a role's variant refuses them (`Variant.takes_segments`,
    its reason quoted: `Variant.segments`). Returns self."""
    for role, name, _ in self._role_layers():
      v = attention.variant(name)
      if not v.takes_segments:
        raise ConfigError(
            f"config '{key}': packed rows pass segment ids to every attention layer, "
            f"but attention variant '{name}' ({role}) does not take them: {v.segments}; "
            "variants that do: " + ", ".join(
                n for n in attention.names() if attention.variant(n).takes_segments))
      # a variant may take them under some options only (sparse: a given stride)
      items = tuple(sorted(self.options_for(name).items()))
      try:
        _trace_options(name, role == "decoder_attention", self.num_heads, self.kv_heads,
                       self.dh, self.max_len, items, segments=True)
      except AttentionError as e:
        raise ConfigError(f"config '{key}': packed rows pass segment ids to every "
                          f"attention layer, and attention variant '{name}' ({role}) "
                          f"refuses them with its options: {e}") from None
    return self

  def _role_layers(self):
    """(role, variant, position scheme) of every distinct attention of the model."""
    out = {}
    for role in self.roles:
      if role == "cross_attention":
        out.setdefault((role, self.attention_for(role)), None)
        continue
      for s in self.layer_specs(role):
        out.setdefault((role, s.name), s.positions)
    return [(r, n, p) for (r, n), p in out.items()]

  def _check_role(self, role, need, name=None):
    """Checks variant `name` (default: the role's) in `role`."""
    pattern = role == "decoder_attention" and bool(self.layer_attention)
    key = "layer_attention" if pattern else role if getattr(self, role) else "attention"
    name = name or self.attention_for(role)
    try:
      v = attention.variant(name)
    except AttentionError as e:
      raise ConfigError(f"model config '{key}': {e}") from None
    spec = self.position_spec if role != "cross_attention" else None
    if pattern and spec is not None and v.position_refusal(spec.kind):
      spec = None                       # _check_pattern allowed it: the layer has none
    if spec is not None:
      why = v.position_refusal(spec.kind)
      need(why is None, "positions",
           f"attention variant '{name}' ({role}) does not take positions="
           f"'{spec.kind}': {why}; variants that take it: " + ", ".join(
               n for n in attention.names() if attention.variant(n).takes(spec.kind)))
    if role == "encoder_attention":
      need(not v.causal_only, key,
           f"attention variant '{name}' is defined causally only (an RNN over its own "
           "sequence), and an encoder attends both ways; use it as decoder_attention, "
           "e.g. with softmax as encoder_attention")
    opts = self.options_for(name)
    try:                                        # options that shape its parameters
      v.param_shapes(self.num_heads, self.dh, self.max_len, opts)
      v.input_shapes(1, self.max_len, self.num_heads, self.kv_heads, self.dh, opts)
      items = tuple(sorted(opts.items()))
      causal = role == "decoder_attention"         # the roles below refuse the others
      if (opts or spec) and (v.causal if causal else not v.causal_only) \
          and _hashable(items):
        _trace_options(name, causal, self.num_heads, self.kv_heads,
                       self.dh, self.max_len, items, spec)
    except AttentionError as e:
      raise ConfigError(f"model config 'attention_options.{name}': {e}") from None
    if role == "decoder_attention":
      need(v.causal, key,
           f"attention variant '{name}' cannot be causal, and decoder self-attention "
           "must not see future tokens; causal variants: "
           + ", ".join(n for n in attention.names() if attention.variant(n).causal))
    if role == "cross_attention":
      need(v.cross, key,
           f"attention variant '{name}' is defined on one sequence (it needs Tq == Tk), "
           "so it cannot attend from the target to the source; use another "
           "cross_attention, e.g. softmax")
      need(not v.positional, key,
           f"attention variant '{name}' picks a query's keys by the query's position in "
           "its own sequence, which says nothing about where to look in the source "
           "(and decoding one target token at a time would see other source keys than "
           "training did); use another cross_attention, e.g. softmax")
    if self.kind != "lm" and role != "decoder_attention":
      need(v.masks != "none", key,
           f"attention variant '{name}' takes no padding mask, and source batches are padded")
    need(self.attention_dropout == 0.0 or v.dropout, "attention_dropout",
         f"attention variant '{name}' ({role}) never forms the attention probabilities, "
         "so it cannot drop them out; variants with attention dropout: "
         + ", ".join(n for n in attention.names() if attention.variant(n).dropout))


LAYER_BASES = ("published", "bare")


def parse_pattern(spec: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
  """The layers of one period of a `layer_attention` pattern: ((variant, changes), ...)
  with each entry's `*n` expanded and its "+piece" / "-piece" changes as `gated_layer`
  tokens ("piece", "-piece"). Raises ValueError (one line) for an empty entry, a bad
  count or an unknown variant (naming the registered ones)."""
  out = []
  for entry in str(spec).split(","):
    entry = entry.strip()
    body, _, count = entry.partition("*")
    try:
      n = int(count) if count else 1
    except ValueError:
      n = 0
    if not body or n < 1:
      raise ValueError(f"{spec!r}: entry {entry!r} is not variant[+piece|-piece...][*n] "
                       "with n >= 1, e.g. 'gated_deltanet*3,softmax+attn_gate'")
    parts = [p.strip() for p in body.replace("-", "+-").split("+")]
    name, changes = parts[0], tuple(p for p in parts[1:] if p)
    if name not in attention.names():
      raise ValueError(f"{spec!r}: unknown attention variant {name!r}; variants: "
                       + ", ".join(attention.names()))
    out += [(name, changes)] * n
  return tuple(out)


def layer_pieces(spec: str, published: tuple[str, ...]) -> tuple[str, ...]:
  """The layer pieces of `spec` (a model's `gated_layer`) for a variant whose paper's
  layer is `published` (its record's `layer`), in `LAYER_PIECES` order.

  spec: "published" or "bare", then comma-separated changes: "piece" adds it, "-piece"
  removes it, e.g. "published,-out_gate" (the published layer less its output gate) or
  "bare,rms_norm", or "published,attn_gate" (softmax with Qiu et al.'s sigmoid gate).
  Raises ValueError (one line: the token and the valid ones) for an unknown token, two
  output normalisations or two pieces that exclude each other (out_gate and
  attn_gate: two gates on one output)."""
  from attention.core.registry import EXCLUSIVE_PIECES, LAYER_PIECES, OUTPUT_NORMS
  tokens = [t.strip() for t in str(spec).split(",")]
  if tokens[0] not in LAYER_BASES:
    raise ValueError(f"{spec!r} must start with one of {LAYER_BASES}, then ',piece' or "
                     f"',-piece' (pieces: {', '.join(LAYER_PIECES)})")
  pieces = set(published if tokens[0] == "published" else ())
  for t in tokens[1:]:
    piece = t[1:] if t.startswith("-") else t
    if piece not in LAYER_PIECES:
      raise ValueError(f"{spec!r}: unknown layer piece {piece!r}; pieces: "
                       + ", ".join(LAYER_PIECES))
    (pieces.discard if t.startswith("-") else pieces.add)(piece)
  norms = sorted(pieces & set(OUTPUT_NORMS))
  if len(norms) > 1:
    raise ValueError(f"{spec!r} gives two output normalisations {norms}; keep one "
                     f"(e.g. ',-{norms[0]}')")
  for a, b in EXCLUSIVE_PIECES:
    if a in pieces and b in pieces:
      raise ValueError(f"{spec!r} gives both {a} and {b}, two gates on the operator's "
                       f"one output; keep one (e.g. ',-{a},{b}' for the published "
                       f"layer with {b} in place of {a})")
  return tuple(p for p in LAYER_PIECES if p in pieces)


def _hashable(x) -> bool:
  """Options with unhashable values (lists) are not traced here (the cache needs a
  key): the model's first call checks them."""
  try:
    hash(x)
    return True
  except TypeError:
    return False


@functools.lru_cache(maxsize=256)
def _trace_options(name, causal, H, K, dh, T, options, spec=None, L=None,
                   segments=False) -> None:
  """Traces (jax.eval_shape: no compilation, no FLOPs) one call of variant `name`
  with its options and positions at the model's shapes (sequences of T; parameters
  for max_len L, default T; with segment ids (1, T) int32 if `segments`), so that an
  option the variant does not take, or a value it refuses, is a config error and not
  a failure at the first training step. Raises the variant's AttentionError."""
  import jax
  import jax.numpy as jnp
  v = attention.variant(name)
  shapes, kw = v.param_shapes(H, dh, L or T, dict(options))
  if spec is not None:
    kw["positions"] = spec
  params = {p: jax.ShapeDtypeStruct(s, jnp.float32) for p, s in shapes.items()}
  params.update({n: jax.ShapeDtypeStruct(s, jnp.float32)      # per-token inputs
                 for n, s in v.input_shapes(1, T, H, K, dh, dict(options)).items()})
  q = jax.ShapeDtypeStruct((1, T, H, dh), jnp.float32)
  dk, dv = v.kv_dims(dh, dict(options))            # the widths of its k and v
  k = jax.ShapeDtypeStruct((1, T, K, dk), jnp.float32)
  val = jax.ShapeDtypeStruct((1, T, K, dv), jnp.float32)
  if segments:
    params["q_seg"] = jax.ShapeDtypeStruct((1, T), jnp.int32)
  jax.eval_shape(lambda q, k, val, p: v.fn(q, k, val, causal=causal, **kw, **p),
                 q, k, val, params)
