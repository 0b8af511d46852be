"""Every attention variant on one task, under one budget: quality against cost
(`results/variants_<task>/`; the page: `studies.variants_page`).

For each variant it trains the task's preset config with `config.attention=<variant>`
through `trainer.train_and_evaluate` (the project's one training loop), then evaluates
the workdir with `eval.evaluate_workdir` (test split, the task metric, samples and
generation speed), and writes workdir/result.json. A workdir that already holds a
result.json of this config is not retrained (resumable); an interrupted one resumes
from its checkpoint, as train.py does; one trained under another config (the preset's
budget changed) is set aside as <workdir>.stale-<fingerprint> and trained afresh
(studies.sweep, the runner of every sweep). Each run trains in a child process of its
own (`python -m studies.compare_variants <job>`), so its peak memory is its own (a GPU
row's is the device's peak of its process) and a crash stops one row, not the study.

A variant the task cannot use (a decoder needs causal attention; an encoder-decoder
self-attention role needs padding masks, ...) is refused by the model config's own
validation; its row carries that message. Nothing is silently missing.

Every row records the run that trained and timed it (`run`: the command, its start,
the machine): speeds are compared only between rows of one run.

Per row: quality is the task metric on the test (or held-out) split; train steps/s
is the rate of training alone, over the log intervals after the first (which holds
the compilation) that hold no evaluation or checkpoint save; peak memory is the
device's peak bytes in use on a GPU and, on a CPU (where XLA keeps no such counter),
XLA's compiled memory plan (arguments + outputs + temporaries) of one
forward+backward step on a train batch; decode speed is eval.py's generation timing,
with the variant's decode state (mode=cache) where it has one, else recomputing the
prefix (mode=recompute).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

from studies import pages, protocol, runs, sweep
from studies.sweep import config_fingerprint, finished, fingerprints

TASKS = ("copy", "shakespeare", "multi30k", "mnist", "listops")

# The presets of this study are the task configs' own (`configs/<task>.py:cpu|gpu`,
# base.with_preset): the model and budget are the same for every variant of a task;
# only `attention` changes, and the preset's `attention_options` give the variants
# whose defaults do not fit the task's length their options (stated on the page).

class Pct(str):
  """The format string "{:.2%}" (a str, so code that reads the format still can),
  except that a fraction short of 1 never prints as 100.00%, nor a nonzero one as
  0.00%: it gets the decimals (up to 6) that show it apart (a copy seed with one wrong
  token in 32,768 once read '100.00%' beside exact ones, and its row 'Δ −0.00% ± 0.00%'
  against them)."""

  def format(self, x: float) -> str:
    for d in range(2, 7):
      s = f"{x:.{d}%}"
      if not ((x < 1 and s.startswith("100.")) or (x != 0 and s.strip("-0.%") == "")):
        return s
    return s


# The quality metric of each task: (key in eval.json, label, higher is better, format).
METRIC = {
    "copy": ("token_accuracy", "token accuracy (copied half)", True, Pct("{:.2%}")),
    "shakespeare": ("eval_loss", "val loss (nats/char)", False, "{:.3f}"),
    "multi30k": ("bleu", "BLEU (test2016)", True, "{:.1f}"),
    "mnist": ("bits_per_dim", "test bits/dim", False, "{:.3f}"),
    "listops": ("accuracy", "test accuracy", True, "{:.1%}"),
}
# The metric as train.py records it during training (for the quality-vs-time curve).
TRAIN_METRIC = {"copy": "eval_loss", "shakespeare": "eval_loss", "multi30k": "bleu",
                "mnist": "bits_per_dim", "listops": "accuracy"}
DECODE = {"copy": ("tokens_per_s", "tok/s"), "shakespeare": ("tokens_per_s", "tok/s"),
          "multi30k": ("sentences_per_s", "sent/s"),
          "mnist": ("completion_images_per_s", "img/s"), "listops": (None, "")}

# Variants that run, but not in a CPU preset ("cpu", "cpu_*"), and why (the row says so).
SKIP_ON_CPU = {"flash_pallas": "skipped by the {preset} preset: off a GPU its Pallas "
                               "kernels run in interpret mode (a correctness path, orders "
                               "of magnitude slower); run the gpu preset"}

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


# A row that has no result, in one word (the summary table, the listops LRA table).
STATUS_SHORT = {"refused": "cannot", "skipped": "not run", "failed": "failed"}

# The exact reference that fills a role a variant cannot (see make_config).
EXACT = "softmax"
ROLE_NAMES = {"encoder_attention": "encoder self-attention",
              "decoder_attention": "decoder self-attention",
              "cross_attention": "cross-attention"}

OUT = "results/variants_{task}"


def out_dir(task: str, preset: str) -> str:
  """The page of a task's preset: results/variants_<task> for the cpu preset (the one
  the README's summary table reads), results/variants_<task>_<preset> for the others,
  so that no preset's run overwrites another's page."""
  return OUT.format(task=task) + ("" if preset == "cpu" else f"_{preset}")


# ---- where a run's page goes: the committed one, or an untracked one ------------------

# The page of a run that is not the committed page's (a budget of its own, or variants
# the committed page does not hold): under workdirs/, which git ignores, so such a run
# leaves the tracked files as they were.
SCRATCH = "workdirs/pages/{task}_{preset}{tag}"


def budget_overrides(overrides=None, *, steps=None, eval_batches=None) -> dict | None:
  """The config overrides of a run's budget flags, None at the preset's own budget.

  overrides: a dict of config overrides (--overrides), or None; steps: the training
  steps of every run (num_train_steps), or None; eval_batches: the evaluation batches
  (eval_batches: those of the in-training evaluations; the row's final evaluation
  keeps its task's rule), or None."""
  ov = dict(overrides or {})
  for key, value in (("num_train_steps", steps), ("eval_batches", eval_batches)):
    if value is not None:
      if int(value) < 0 or (key == "num_train_steps" and int(value) < 1):
        raise ValueError(f"--{'steps' if key == 'num_train_steps' else key}={value}: must "
                         f"be {'>= 1' if key == 'num_train_steps' else '>= 0'}")
      ov[key] = int(value)
  return ov or None


def budget_tag(overrides=None) -> str:
  """A short name of a run's budget for its folders: "" at the preset's own budget, else
  "_steps<N>", "_eval<N>" and "_ov<hash>" of any other overrides (e.g. "_steps50")."""
  ov = dict(overrides or {})
  parts = []
  if "num_train_steps" in ov:
    parts.append(f"steps{ov.pop('num_train_steps')}")
  if "eval_batches" in ov:
    parts.append(f"eval{ov.pop('eval_batches')}")
  if ov:
    parts.append("ov" + runs.fingerprint(ov)[:6])
  return "".join("_" + p for p in parts)


def committed_rows(task: str, preset: str, page: str | None = None) -> dict:
  """{variant: row} of the finished rows of the committed page (`page`, default
  out_dir(task, preset)) for this task and preset, each marked `committed` (the page,
  its date and machine) so that a page showing it beside rows of another run says
  where it comes from. {} where there is no committed page."""
  page = page or out_dir(task, preset)
  rows = pages.read_json(os.path.join(page, "results.json"), [])
  out = {}
  for r in rows:
    if r.get("status") == "ok" and r.get("task") == task and r.get("preset") == preset:
      out[r["variant"]] = dict(r, committed={
          "page": page, "date": r.get("date"),
          "host": r.get("eval", {}).get("host") or "host not recorded"})
  return out


def on_committed_page(task: str, preset: str, variant: str) -> bool:
  """Whether the committed page has a row of `variant` that is not "yet to be trained"
  (trained, refused or skipped there)."""
  rows = pages.read_json(os.path.join(out_dir(task, preset), "results.json"), [])
  return any(r.get("variant") == variant and not r.get("pending") for r in rows)


def page_dir(task: str, preset: str, variants, overrides=None, page_only=False) -> str:
  """Where a run writes its page by default: the committed page (out_dir) when it
  runs the preset's own budget over variants that page holds (or only rewrites the
  page: `page_only`); else an untracked folder, SCRATCH (workdirs/pages/<task>_
  <preset>[_<budget_tag>]), so that a small run or a new variant never rewrites a
  committed page. variants: the chosen names; overrides: budget_overrides' dict."""
  if overrides or not (page_only or all(on_committed_page(task, preset, v)
                                        for v in variants)):
    return SCRATCH.format(task=task, preset=preset, tag=budget_tag(overrides))
  return out_dir(task, preset)


def is_committed_path(path: str) -> bool:
  """Whether `path` (relative to the repository root) lies under results/."""
  parts = os.path.normpath(path).split(os.sep)
  return parts[0] == "results"

# The lr sweep (`--lr_sweep`): each chosen variant trains from seed 0 at every rate of
# its task's grid, the preset's rate times LR_FACTORS (half a decade either side); its
# row is then the run at the rate `runs.choose_lr` picks (the rule studies.mqar uses
# too), and its extra seeds train at that rate. One procedure for every variant, so
# that no row hinges on a rate tuned for another variant (the presets' rates were set
# on softmax or linear).
LR_FACTORS = (0.3, 1.0, 3.0)
# A variant whose best rate is an end of the grid, better than the rate next to it
# beyond LR_TIE, might do better still beyond it: the sweep then adds the next rate out
# (x3 above, x0.3 below), at most LR_EXTEND times on each side.
LR_EXTEND = 2
# Differences of the task metric that one seed does not resolve (about the seed spread
# the pages measured): rates within it of the best tie in the lr sweep.
LR_TIE = {"copy": 0.01, "listops": 0.01, "mnist": 0.005, "shakespeare": 0.02,
          "multi30k": 0.5}



# ---- configs ------------------------------------------------------------------------

# The layer around the gated variants in every study (ModelConfig.gated_layer; the
# studies of compare_variants and mqar): their committed rows were trained with the bare
# operators, before issue 76 built the layers their papers use, so the studies train
# "bare" until they are re-run with the papers' layers: set this to "published" and run
# the studies again (only the rows of variants with a layer, `Variant.layer`, train
# afresh: the field enters their fingerprints only, studies.sweep.config_dict).
STUDY_GATED_LAYER = "bare"

def presets(task: str) -> dict:
  """{name: function} of the presets of configs/<task>.py (base.with_preset)."""
  import importlib
  if task not in TASKS:
    raise ValueError(f"--task: unknown task {task!r}; valid: {sorted(TASKS)}")
  return importlib.import_module(f"configs.{task}").PRESETS


def make_config(task: str, preset: str, variant: str, overrides: dict | None = None):
  """configs/<task>.py's `preset` (no progress bar: each variant logs to a file), the
  overrides, then `attention=variant`."""
  import importlib
  if preset not in presets(task):
    raise ValueError(f"--preset: unknown preset {preset!r}; valid: {sorted(presets(task))}")
  c = importlib.import_module(f"configs.{task}").get_config(preset)
  c.progress = False
  c.model.gated_layer = STUDY_GATED_LAYER
  ov = dict(overrides or {})
  model = dict(ov.pop("model", {}))
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


# ---- learning rates -------------------------------------------------------------------

def base_lr(task, preset, overrides=None) -> float:
  """The preset's learning rate (with `overrides`): the middle of the lr grid."""
  return float(make_config(task, preset, EXACT, overrides).learning_rate)


def lr_grid(task, preset, overrides=None) -> list[float]:
  """The rates of the lr sweep, smallest first: base_lr times LR_FACTORS (3 digits)."""
  b = base_lr(task, preset, overrides)
  return sorted({b if f == 1.0 else float(f"{b * f:.3g}") for f in LR_FACTORS})


def lr_rule(task, preset, overrides=None) -> sweep.LrRule:
  """The lr sweep's rule (sweep.LrRule, the one of every sweep) over this task's grid:
  LR_EXTEND rates more past each end (x0.3 below, x3 above), ties within LR_TIE."""
  return sweep.LrRule(tuple(lr_grid(task, preset, overrides)), LR_EXTEND, LR_TIE[task],
                      METRIC[task][2])


def with_lr(overrides, lr, base) -> dict | None:
  """`overrides` with learning_rate=lr, or unchanged where lr is None or the preset's
  own rate (so that a row at the preset's rate keeps its fingerprint and workdir)."""
  if lr is None or lr == base:
    return overrides
  return {**(overrides or {}), "learning_rate": lr}


def run_dir(root, variant, lr=None, base=None, seed=None) -> str:
  """The workdir of one run: <root>/<variant>[@lr<rate>][@seed<s>]; the rate is named
  only where it is not the preset's, the seed only where it is not the row's."""
  name = variant + ("" if lr is None or lr == base else f"@lr{lr:g}")
  return os.path.join(root, name + ("" if seed is None else f"@seed{seed}"))


def _record(out, name, res, key, value) -> None:
  """Adds one finished run to out/<name>.json (the lr sweep's, or the extra seeds'),
  keyed by variant, preset, config and `key` (lr or seed) = `value`."""
  entry = {"variant": res["variant"], "task": res["task"], "preset": res["preset"],
           key: value, "quality": quality(res), "config": res["config"],
           "cpu_seconds": res.get("cpu_seconds"), "date": res["date"],
           "host": res.get("eval", {}).get("host") or "host not recorded"}
  if res.get("protocol"):       # studies.protocol: the validation figure beside the test
    entry.update(validation=res.get("validation"), protocol=res["protocol"])
  same = ("variant", key, "preset", "config")
  pages.update_json(os.path.join(out, name), lambda done: sorted(
      [r for r in done if any(r.get(k) != entry[k] for k in same)] + [entry],
      key=lambda r: (r["variant"], r[key])), [])


def record_lr(out, res, lr) -> None:
  """Adds one run of the lr sweep (a finished result, seed 0) to out/lr.json."""
  _record(out, "lr.json", res, "lr", lr)


def lr_choices(task, preset, out, overrides=None) -> dict:
  """{variant: {"grid": {rate: quality}, "chosen": rate or None}} from out/lr.json, the
  runs of this preset's ladder under this config (a sweep of another budget is not
  this page's); "chosen" is None until the sweep is complete (`lr_rule`)."""
  rule, base = lr_rule(task, preset, overrides), base_lr(task, preset, overrides)
  ladder = rule.ladder
  new = protocol.page_version(out) == protocol.VERSION
  by = {}
  for r in pages.read_json(os.path.join(out, "lr.json"), []):
    if r["preset"] != preset or r["task"] != task or r["lr"] not in ladder:
      continue
    want = fingerprints(make_config(task, preset, r["variant"],
                                    with_lr(overrides, r["lr"], base)))
    if r["config"] not in want:
      continue
    if new:     # the protocol's runs only; the rule sees their validation figures
      if r.get("protocol") == protocol.VERSION:
        by.setdefault(r["variant"], {})[r["lr"]] = protocol.Scores(r["validation"],
                                                                   r["quality"])
    else:       # a page before the protocol: its rates were chosen on the test figure
      by.setdefault(r["variant"], {})[r["lr"]] = protocol.Scores(r["quality"])
  return {v: {"grid": dict(sorted(protocol.Validation.of(q).items())),
              "chosen": protocol.select(rule, q)} for v, q in sorted(by.items())}


def by_rule(choices: dict) -> dict:
  """{variant: softmax's chosen rate} for the kernels of softmax attention (registry
  family "exact": sdpa, flash, flash_pallas, ring, fp8) that were not swept themselves:
  they compute softmax's function (up to rounding; fp8's up to its quantisation), so
  they share the rate softmax's sweep chose, by rule, rather than each sweeping a grid
  whose answer is softmax's. `choices`: lr_choices; {} until softmax's sweep is
  complete."""
  import attention
  ref = choices.get(EXACT, {}).get("chosen")
  if ref is None:
    return {}
  return {v: ref for v in attention.names() if v != EXACT and v not in choices
          and attention.variant(v).family == "exact"}


def chosen_lrs(task, preset, out, overrides=None) -> dict:
  """{variant: the rate its row runs at} for the variants whose lr sweep is complete,
  and for the unswept kernels of softmax attention, softmax's chosen rate (`by_rule`)."""
  ch = lr_choices(task, preset, out, overrides)
  return {**{v: c["chosen"] for v, c in ch.items() if c["chosen"] is not None},
          **by_rule(ch)}


# ---- one variant --------------------------------------------------------------------

def train_memory(workdir, config) -> dict:
  """Peak memory of training: the GPU's peak bytes in use, or (CPU) XLA's compiled
  memory plan of one forward+backward on a train batch."""
  import jax
  dev = jax.devices()[0]
  stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
  if stats and stats.get("peak_bytes_in_use"):
    return {"peak_bytes": int(stats["peak_bytes_in_use"]), "memory_kind": "device peak"}
  import jax.numpy as jnp
  from flax import nnx
  from data import pipeline
  import trainer
  _, model, _ = trainer.load_model(workdir)
  model.train()
  task = pipeline.create(config)
  batch = {k: jnp.asarray(v) for k, v in task.train_batch(0).items()}
  gdef, params, rest = nnx.split(model, nnx.Param, ...)

  def fwd_bwd(params, rest, batch):
    # nnx.value_and_grad, not jax's: dropout advances the RNG count inside the trace
    m = nnx.merge(gdef, params, rest)
    return nnx.value_and_grad(lambda m: trainer.loss_fn(m, batch)[0])(m)

  ma = jax.jit(fwd_bwd).lower(params, rest, batch).compile().memory_analysis()
  total = (ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
           - ma.alias_size_in_bytes)
  return {"peak_bytes": int(total), "memory_kind": "XLA plan, fwd+bwd"}


def run_one(task: str, preset: str, variant: str, workdir: str,
            overrides: dict | None = None, run: dict | None = None,
            proto: bool = False) -> dict:
  """Trains (or resumes) and evaluates one variant; writes and returns workdir/result.json,
  with `run` (the record of the study's run that trains it) as its "run".

  A variant refused by the config validation, or skipped by the preset, gets
  `why_not`'s row (status 'refused' / 'skipped' and the reason); nothing is trained
  or written.
  """
  not_run = why_not(task, preset, variant, overrides)
  if not_run:
    return not_run

  def measure(config, workdir):
    res = {"variant": variant, "task": task, "preset": preset}
    if run:
      res["run"] = run
    res["train_seconds"] = runs.train_seconds(workdir)  # all segments of a resumed run
    res["steps_per_s"], evals, res["params"] = runs.rates(workdir)
    res["curve"] = curve(task, evals)
    res.update(solved_at(task, evals))
    res.update(_evaluate(task, variant, workdir, config, "test") if proto
               else _evaluate(task, variant, workdir, config))
    if proto:    # studies.protocol: the row reports test; the rule reads validation
      res.update(validation=validation_figure(task, workdir), protocol=protocol.VERSION)
    return res

  # its CPU time (sweep.train_run): training (of this segment, if resumed), evaluation,
  # memory estimate
  return sweep.train_run(make_config(task, preset, variant, overrides), workdir, measure)


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


def curve(task, evals) -> list:
  """[(step, training seconds, the task's in-training metric)] from runs.rates' evals."""
  key = TRAIN_METRIC[task]
  return [(s, sec, r.get(key)) for s, sec, r in evals if key in r]


# The copy task counts as solved at the first in-training evaluation that copies this
# share of its held-out sequences exactly: every variant reaches 100% token accuracy
# at the cpu preset's budget, so the step that gets there is what tells them apart
# (the paper compares the variants by their convergence, section 4.1).
SOLVED = {"copy": ("accuracy", 0.99)}


def solved_at(task, evals) -> dict:
  """{"solved_at": [step, training seconds] of the first eval with SOLVED[task]'s
  metric at or over its threshold, or None} for a task in SOLVED, else {}."""
  if task not in SOLVED:
    return {}
  key, at = SOLVED[task]
  hit = next(([s, sec] for s, sec, r in evals if r.get(key, -1) >= at), None)
  return {"solved_at": hit}


def validation_figure(task, workdir) -> float:
  """The task metric of a trained workdir on its validation split (the whole split;
  no sampling, completions or timing): what the protocol's rate selection reads."""
  from trainer import evaluate as evaluation
  over = {"completion_images": 0} if task == "mnist" else {}
  if task == "multi30k":
    over["bleu_sentences"] = 100000
  ev = evaluation.evaluate_workdir(workdir, split="validation", eval_batches=0,
                                   out=os.path.join(workdir, "eval_validation"), **over)
  return float(ev[METRIC[task][0]])


def _evaluate(task, variant, workdir, config, split=None) -> dict:
  """eval.py's evaluation of a trained workdir, plus the training memory."""
  import jax
  from trainer import evaluate as evaluation
  over = {"eval_batches": None}           # the preset's own eval_batches, unless below
  if task == "multi30k":
    over["bleu_sentences"] = 100000       # the whole test set
  if task in ("mnist", "listops"):       # the metric on the whole test split (a preset
    over["eval_batches"] = 0               # may evaluate a subset during training)
  if task == "shakespeare":               # no positions beyond those trained on
    over["sample_len"] = int(config.seq_len) - len(config.prompt)
  # the variant's decode state where its decoder role has one, else recompute
  ev = evaluation.evaluate_workdir(workdir, decode_mode="auto", split=split, **over)
  res = dict(status="ok", eval=ev, decode_mode=ev["decode_mode"],
             **train_memory(workdir, config))
  if task == "multi30k":
    res["bleu_signature"] = bleu_signature()
  if task == "shakespeare":
    res["sample"] = open(os.path.join(workdir, "eval", "samples.txt")).read() \
        .split("\n\n-----\n\n")[0]
  res["jax"] = jax.__version__
  res["device"] = jax.devices()[0].device_kind
  return res


def bleu_signature() -> str:
  """sacreBLEU's signature of the BLEU that trainer.step.bleu computes (corpus_bleu with
  one reference and the defaults). sacreBLEU states the number of references only after
  a scoring call, hence the one-sentence corpus."""
  import sacrebleu
  b = sacrebleu.BLEU()
  b.corpus_score(["a"], [["a"]])
  return str(b.get_signature())


def reevaluate(task, preset, variant, workdir, overrides=None) -> dict:
  """Runs the evaluation of a finished variant again (after a change to it), keeping
  its training measurements; returns the updated result.json."""
  res = finished(workdir)
  res.update(_evaluate(task, variant, workdir, make_config(task, preset, variant,
                                                            overrides)))
  return sweep.write_result(res, workdir)


def ensure(task, preset, variant, workdir, overrides=None, subprocess_run=True,
           run=None, proto=False) -> dict:
  """workdir/result.json if the variant finished there (it is never retrained), else
  `why_not`'s row if it is not to be trained, else runs it under the study's `run`
  record (in a subprocess of its own unless subprocess_run=False)."""
  path = os.path.join(workdir, "result.json")
  config = make_config(task, preset, variant, overrides)
  done = sweep.done_or_clear(workdir, config)
  if done:
    return done
  if not subprocess_run:
    return run_one(task, preset, variant, workdir, overrides, run, proto)  # asks why_not
  not_run = why_not(task, preset, variant, overrides)    # no process spawned for it
  if not_run:
    return not_run
  code, tail, secs = sweep.spawn("studies.compare_variants", dict(
      task=task, preset=preset, variant=variant, workdir=workdir, overrides=overrides,
      run=run, protocol=proto), os.path.join(workdir, "log.txt"))
  if code == 0 and os.path.exists(path):
    return pages.read_json(path)
  # a failure is a row too, but not a result: the next call tries again
  return {"variant": variant, "task": task, "preset": preset, "status": "failed",
          "reason": f"exit {code} after {secs:.0f} s: {tail} (full log: {workdir}/log.txt)"}


def child(job_json: str) -> dict:
  """The child process of `ensure` (one run): run_one of the job it was given."""
  return sweep.child(job_json, lambda j: run_one(
      j["task"], j["preset"], j["variant"], j["workdir"], j["overrides"], j["run"],
      *((True,) if j.get("protocol") else ())))


def lr_sweep(task, preset, variants, root, out, overrides=None, *, run, kept=None,
             log=print) -> None:
  """Trains each of `variants` at the rates `lr_rule` asks for, the grid and where its
  best rate is an end of it the rates beyond, that out/lr.json does not hold yet (seed
  0; the preset's rate is the row's own run, or the page's kept row), and records each
  there."""
  base, rule = base_lr(task, preset, overrides), lr_rule(task, preset, overrides)
  proto = on_protocol(out)
  kept = None if proto else kept      # a row from before the protocol chose on test
  for n in variants:
    if why_not(task, preset, n, overrides):
      continue                                  # refused or skipped: its row says so
    tried = set()
    while True:      # what is recorded (on this machine or another) is not trained again
      q = lr_choices(task, preset, out, overrides).get(n, {}).get("grid", {})
      lr = rule.next(q)
      if lr is None or lr in tried:             # complete, or a run that failed
        break
      tried.add(lr)
      ov, wd = with_lr(overrides, lr, base), run_dir(root, n, lr, base)
      r = (kept[n] if lr == base and kept and n in kept
           and finished(wd, make_config(task, preset, n, ov)) is None
           else ensure(task, preset, n, wd, ov, run=run, proto=proto))
      log(f"{n} lr {lr:g}: {r['status']} {quality_str(r)}")
      if r.get("status") == "ok":
        record_lr(out, r, lr)


def _train_variant(task, preset, n, root, out, overrides, *, run, seeds, sweep_lr,
                   ignore_page, log) -> dict | None:
  """One chosen variant's runs, in order: its learning-rate sweep (with `sweep_lr`), its
  row at the rate `chosen_lrs` picks (unless it finished here before, or the committed
  page keeps it, trained elsewhere), then its extra `seeds`. Returns the row's result
  where it ran now (a failure included, so that it is not run twice), else None."""
  base = base_lr(task, preset, overrides)
  if sweep_lr:
    lr_sweep(task, preset, [n], root, out, overrides, run=run,
             kept=published(task, preset, out, overrides), log=log)
  lrs = chosen_lrs(task, preset, out, overrides)
  lr = lrs.get(n)
  ov, wd = with_lr(overrides, lr, base), run_dir(root, n, lr, base)
  row = None
  if on_protocol(out):        # the rate's runs are not reported: the reporting seeds are
    if lr is None and not why_not(task, preset, n, overrides):
      return None             # the sweep is incomplete (a failed run): nothing to report
    for s in reporting(task, preset):
      r = ensure(task, preset, n, run_dir(root, n, lr, base, s), {**(ov or {}), "seed": s},
                 run=run, proto=True)
      log(f"{n} seed {s}: {r['status']}")
      if r.get("status") == "ok":
        record_seed(out, r, s)
      row = row or r
    return row
  if (finished(wd, make_config(task, preset, n, ov)) is None
      and (ignore_page or n not in published(task, preset, out, overrides, lrs))):
    t = time.perf_counter()
    row = ensure(task, preset, n, wd, ov, run=run)
    log(f"{n}: {row['status']} {row.get('eval', {}).get(METRIC[task][0], '-')} "
        f"({time.perf_counter() - t:.0f} s)")
  for s in seeds:
    if s == int(make_config(task, preset, n, ov).seed):
      continue                                    # that run is the variant's row
    r = ensure(task, preset, n, run_dir(root, n, lr, base, s), {**(ov or {}), "seed": s},
               run=run)
    log(f"{n} seed {s}: {r['status']}")
    if r.get("status") == "ok":
      record_seed(out, r, s)
  return row


def study(task, preset, variants, root, out, overrides=None, *, command, page_only=False,
          reeval=False, ignore_page=False, seeds=(), sweep_lr=False, beside=None,
          log=print) -> list[dict]:
  """The rows of the page, one per registered variant: `variants` (names) trained
  and evaluated here, or kept (a finished workdir under `root`; else the committed
  page's row in `out`, trained elsewhere); with `page_only`, nothing is trained.
  The chosen variants train one after another, each whole (`_train_variant`): with
  `sweep_lr`, first at every rate of `lr_grid` (out/lr.json), then its row, and its
  extra `seeds` (out/seeds.json), at the rate `chosen_lrs` picks.
  Each run here is marked with this study's run record (the command, its start, the
  machine). beside: {variant: row} (`committed_rows`) that fill the rows neither run
  here nor kept in `out` (a page under workdirs/ shows the committed rows beside its
  own, marked, instead of "not run yet")."""
  import attention
  run = sweep.started(command, preset)
  if variants and not page_only:
    # the machine's speed as the run starts: the page compares times only within a run
    run["matmul_peak"] = sweep.gauge()
  base = base_lr(task, preset, overrides)
  now = {}             # variant by variant: a study cut short leaves whole rows
  for n in ([] if page_only else variants):
    now[n] = _train_variant(task, preset, n, root, out, overrides, run=run, seeds=seeds,
                            sweep_lr=sweep_lr, ignore_page=ignore_page, log=log)
  lrs = chosen_lrs(task, preset, out, overrides)
  kept = published(task, preset, out, overrides, lrs)
  results = []
  for n in attention.names():           # the page has a row for every variant
    ov, wd = with_lr(overrides, lrs.get(n), base), run_dir(root, n, lrs.get(n), base)
    if on_protocol(out):    # the row: the first reporting seed's run
      s = reporting(task, preset)[0]
      ov, wd = {**(ov or {}), "seed": s}, run_dir(root, n, lrs.get(n), base, s)
      if n in now and now[n] is not None:
        results.append(now[n])
        continue
    ran_here = finished(wd, make_config(task, preset, n, ov)) is not None
    keep = n in kept and not ran_here and not ignore_page    # finished elsewhere
    if page_only or n not in variants or keep:
      results.append(stored_row(task, preset, n, wd, ov, kept, beside))
      if keep and not page_only and n in variants:
        log(f"{n}: kept from {out}/results.json (trained {kept[n]['date']}; its workdir "
            "is not on this machine)")
      continue
    results.append(now.get(n) or (reevaluate(task, preset, n, wd, ov) if reeval and ran_here
                                  else ensure(task, preset, n, wd, ov, run=run)))
  return results


def on_protocol(out) -> bool:
  """Whether the page in `out` follows studies.protocol (its protocol.json: `--protocol`
  marked it): rates chosen on validation, rows and seeds from the reporting seeds."""
  return protocol.page_version(out) == protocol.VERSION


def reporting(task, preset) -> tuple:
  """The reporting seeds of this task's preset page (studies.protocol.REPORTING)."""
  return protocol.reporting_seeds(os.path.basename(out_dir(task, preset)))


def quality(res) -> float | None:
  if res.get("status") != "ok":
    return None
  return res["eval"].get(METRIC[res["task"]][0])


def quality_str(res) -> str:
  q = quality(res)
  if q is None:
    return "-"
  s = METRIC[res["task"]][3].format(q)
  if res["task"] == "shakespeare":
    s += f" ({q / math.log(2):.3f} bits/char)"
  return s


def record_seed(out, res, seed) -> None:
  """Adds one extra-seed run (a finished result) to out/seeds.json."""
  _record(out, "seeds.json", res, "seed", seed)


def published(task, preset, out, overrides=None, lrs=None) -> dict:
  """{variant: row} of the finished rows in out/results.json (the committed page) that
  this preset would train again: the same preset, and the same config fingerprint
  where the row records one (rows written before fingerprints existed were trained
  under the preset the page states). A workdir lives on the machine that trained it;
  the page is what a later session or another machine has of that run, so a variant
  finished there is kept from the page, not trained again (nor lost from it). `lrs`
  ({variant: rate}, chosen_lrs): a row counts at its variant's chosen rate."""
  p = os.path.join(out, "results.json")
  if not os.path.exists(p):
    return {}
  keep, base = {}, base_lr(task, preset, overrides)
  for r in json.load(open(p)):
    if r.get("status") != "ok" or r.get("preset") != preset or r.get("task") != task:
      continue
    if on_protocol(out) and r.get("protocol") != protocol.VERSION:
      continue                  # a row from before the protocol is not this page's
    ov = with_lr(overrides, (lrs or {}).get(r["variant"]), base)
    if on_protocol(out):
      ov = {**(ov or {}), "seed": reporting(task, preset)[0]}      # its row's run
    want = fingerprints(make_config(task, preset, r["variant"], ov))
    if r.get("config", min(want)) in want:
      keep[r["variant"]] = r
  return keep


def stored_row(task, preset, variant, workdir, overrides=None, kept=None,
               beside=None) -> dict:
  """workdir/result.json if the variant ran, else its row kept from the page
  (`published`), else its committed row (`beside`: committed_rows, marked as such),
  else a row saying why it did not run: the task refuses it, the preset skips it, or
  it has not been run yet."""
  res = finished(workdir, make_config(task, preset, variant, overrides))
  if res:
    if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
      # recomputed from the metrics: older results timed one process (or read a
      # resumed segment's clock from step 0), and the plotted metric may change
      rate, evals, _ = runs.rates(workdir)
      res.update(train_seconds=runs.train_seconds(workdir), steps_per_s=rate,
                 curve=curve(task, evals), **solved_at(task, evals))
    return res
  if kept and variant in kept:
    return kept[variant]
  if beside and variant in beside:
    return beside[variant]
  res = {"variant": variant, "task": task, "preset": preset}
  try:
    not_run = why_not(task, preset, variant, overrides)
  except RuntimeError as e:               # train.py does not know the task
    return dict(res, status="failed", reason=str(e))
  return not_run or dict(res, status="skipped", pending=True, reason="yet to be trained: "
                         f"`{train_command(task, preset, [variant])}` trains it")


def train_command(task, preset, variants) -> str:
  """The command that trains `variants` (names) on `task` under `preset`."""
  return (f"python -m scripts.compare_variants --task={task} --preset={preset} "
          f"--variants={','.join(variants)}")


if __name__ == "__main__":     # the per-variant child of `ensure`
  child(sys.argv[1])
