"""What one row of a variants page trains (studies.variants.compare): its config, and
whether the task refuses the variant or the preset skips it.

The presets of the variants study are the task configs' own (`configs/<task>.py:cpu|
gpu`, base.with_preset): the model and budget are the same for every variant of a
task; only `attention` changes, and the preset's `attention_options` give the variants
whose defaults do not fit the task's length their options (stated on the page).
"""
from __future__ import annotations

import os

from data import tasks
from studies.core import protocol, sweep
from studies.core.sweep import config_fingerprint

# The tasks with a variants page (their record's Study.metric), in the summary's order
# (Study.order).
TASKS = tuple(tasks.variants_tasks())

# Variants that run, but not in a CPU preset ("cpu", "cpu_*"), and why (the row says so).
SKIP_ON_CPU = {"flash_pallas": "skipped by the {preset} preset: off a GPU its Pallas "
                               "kernels run in interpret mode (a correctness path, orders "
                               "of magnitude slower); run the gpu preset",
               "flash_mgpu": "skipped by the {preset} preset: its Mosaic GPU kernels are "
                             "for Hopper GPUs, and off one they run in Mosaic GPU's "
                             "interpret mode (a correctness path, seconds per call); run "
                             "the gpu preset on an H100/H200"}

# Presets that skip every variant whose time or memory grows with the square of the
# sequence length (the registry's cost strings), and why.
SKIP_QUADRATIC = {"cpu_long": "skipped by the cpu_long preset: its cost grows with the "
                              "square of the length, and at 2000 tokens its 600 steps "
                              "take hours on 2 CPU cores; run the gpu preset"}


def skip_reason(preset: str, variant: str) -> str | None:
  """Why `preset` skips `variant` (SKIP_ON_CPU, SKIP_QUADRATIC), else None."""
  import attention
  cpu = preset == "cpu" or preset.startswith("cpu_")
  why = SKIP_ON_CPU[variant].format(preset=preset) if cpu and variant in SKIP_ON_CPU else None
  v = attention.variant(variant)
  if why is None and preset in SKIP_QUADRATIC and ("N²" in v.time or "N²" in v.memory):
    why = f"{SKIP_QUADRATIC[preset]} (time {v.time}, memory {v.memory})"
  return why


# The exact reference that fills a role a variant cannot (see make_config).
EXACT = "softmax"
ROLE_NAMES = {"encoder_attention": "encoder self-attention",
              "decoder_attention": "decoder self-attention",
              "cross_attention": "cross-attention"}

# Data fields a shipped config sets to hold out a test split, which the studies' runs
# take at their neutral value (sweep.NEUTRAL: the old behaviour) unless overridden
STUDY_NEUTRAL_DATA = ("test_fraction",)

def presets(task: str) -> dict:
  """{name: function} of the presets of configs/<task>.py (base.with_preset)."""
  import importlib
  if task not in TASKS:
    raise ValueError(f"--task: unknown task {task!r}; valid: {sorted(TASKS)}")
  return importlib.import_module(f"configs.{task}").PRESETS


def make_config(task: str, preset: str, variant: str, overrides: dict | None = None):
  """configs/<task>.py's `preset` (no progress bar: each variant logs to a file), the
  overrides, then `attention=variant`. The gated variants' layer (model.gated_layer) is
  set once, to the one the run's protocol version says (studies.core.protocol.
  gated_layer): a protocol page's overrides name VERSION's (protocol.overrides), any
  other run trains version 0's, as the pages not yet re-run did."""
  import importlib
  if preset not in presets(task):
    raise ValueError(f"--preset: unknown preset {preset!r}; valid: {sorted(presets(task))}")
  c = importlib.import_module(f"configs.{task}").get_config(preset)
  c.progress = False
  # the held-out test split a shipped config takes by default (configs/shakespeare.py's
  # test_fraction): the committed rows trained without it, its neutral value in
  # sweep.NEUTRAL, and keep their identity; the protocol's overrides set its own
  for key in STUDY_NEUTRAL_DATA:
    if key in c:
      c[key] = sweep.NEUTRAL[key]
  ov = dict(overrides or {})
  model = dict(ov.pop("model", {}))
  c.model.gated_layer = model.pop("gated_layer", protocol.gated_layer(0))
  opts = model.pop("attention_options", None)
  c.update(ov)
  c.model.update(model)
  for name, o in (opts or {}).items():
    c.model.attention_options[name] = dict(o)
  c.attention = variant
  if c.model.kind == "encdec":
    # the variant goes in the self-attention roles, and in cross-attention where it
    # can attend across two sequences; a role it cannot fill keeps exact softmax
    import attention
    v = attention.variant(variant)
    if not v.cross_attends:
      c.model.cross_attention = EXACT
    if not v.causal:
      c.model.decoder_attention = EXACT
    if v.causal_only:
      c.model.encoder_attention = EXACT
  if not c.data_dir and os.environ.get("ATTNLAB_DATA_DIR"):
    c.data_dir = os.environ["ATTNLAB_DATA_DIR"]
  return c


def exact_roles(config) -> list[str]:
  """The attention roles of `config` that keep the exact reference instead of the
  variant under test (an encoder-decoder's roles the variant cannot fill)."""
  from models.config import ROLES
  return [ROLE_NAMES[r] for r in ROLES
          if config.model.get(r) and config.model[r] != config.attention]


def attention_notes(config, device_count: int | None = None) -> list[str]:
  """The notes the trainer records (runtime.json's `attention_notes`) for a run of
  `config`: its variants that compute as another one on the config's mesh
  (`Variant.runs_as`: ring with no 'seq' axis of size > 1 is flash). The mesh is the
  config's mesh sizes over `device_count` devices (None: mesh.data 0 or -1 taken as 1);
  a config without a mesh section is no mesh. [] when the config is not a valid model."""
  import jax
  from models import ConfigError, ModelConfig
  from trainer.config import model_dict
  from trainer.loop import attention_notes as notes
  from trainer.parallel import AXES, mesh_shape
  try:
    mcfg = ModelConfig.from_dict(model_dict(config))
  except (ConfigError, ValueError, TypeError, KeyError):
    return []
  mesh_cfg = config.get("mesh")
  mesh = None
  if mesh_cfg is not None:
    sizes = [mesh_cfg.get(a, 0 if a == "data" else 1) for a in AXES]
    try:
      sizes = mesh_shape(mesh_cfg, device_count) if device_count else sizes
    except Exception:     # the recorded device count does not fit the sizes
      pass
    mesh = jax.sharding.AbstractMesh(tuple(max(int(n), 1) for n in sizes), AXES)
  return notes(mcfg, mesh) + layer_notes(config)


def layer_notes(config) -> list[str]:
  """A note for each self-attention variant of `config` whose paper builds a layer
  around it (`Variant.layer`) that the model's `gated_layer` leaves out, in whole
  ("bare operator: ...") or in part ("layer in part: ..."); [] when the config is not a
  valid model. A config without the field (rows trained before it) is "bare"."""
  import attention
  from models import ConfigError, ModelConfig
  from trainer.config import model_dict
  try:
    d = model_dict(config)
    mcfg = ModelConfig.from_dict({**d, "gated_layer": d.get("gated_layer", "bare")})
  except (ConfigError, ValueError, TypeError, KeyError):
    return []
  out = []
  roles = [r for r in mcfg.roles if r != "cross_attention"]
  for name in dict.fromkeys(mcfg.attention_for(r) for r in roles):
    have = mcfg.layer_pieces(name)
    missing = [p for p in attention.variant(name).layer if p not in have]
    if missing:
      out.append(f"{'bare operator' if not have else 'layer in part'}: {name} without "
                 f"{', '.join(missing)} of the layer its paper builds around it "
                 f"(model.gated_layer={mcfg.gated_layer!r}; "
                 "attention.core.registry.LAYER_PIECES)")
  return out


def refusal(config) -> str | None:
  """The reason the project refuses this variant for this task, or None.

  It is the model config's own validation (trainer.validate), so the row quotes the
  same message a user running train.py would see."""
  import trainer
  from models import ConfigError
  try:
    trainer.validate(config)
  except ConfigError as e:
    return str(e)
  except KeyError as e:       # trainer.validate's per-task tables lack this task
    raise RuntimeError(f"train.py does not know task {config.task!r} yet (trainer.validate "
                       f"has no entry {e}); nothing was trained") from None
  return None


def why_not(task, preset, variant, overrides=None) -> dict | None:
  """The row of a variant that this task refuses or this preset skips (nothing is
  trained), else None. It is derived from the code at each call and never stored in
  a workdir, so that a variant which gains the support it lacked is trained by the
  next run, and a row's reason is always the current one."""
  config = make_config(task, preset, variant, overrides)
  why = refusal(config)
  skip = skip_reason(preset, variant)
  if not (why or skip):
    return None
  return {"variant": variant, "task": task, "preset": preset,
          "config": config_fingerprint(config),
          "status": "refused" if why else "skipped", "reason": why or skip}


# ---- learning rates (the rates of a row: studies.variants.compare sweeps them) ------

def base_lr(task, preset, overrides=None) -> float:
  """The preset's learning rate (with `overrides`): the middle of the lr grid."""
  return float(make_config(task, preset, EXACT, overrides).learning_rate)


def with_lr(overrides, lr, base) -> dict | None:
  """`overrides` with learning_rate=lr, or unchanged where lr is None or the preset's
  own rate (so that a row at the preset's rate keeps its fingerprint and workdir)."""
  if lr is None or lr == base:
    return overrides
  return {**(overrides or {}), "learning_rate": lr}
