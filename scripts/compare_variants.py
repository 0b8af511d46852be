"""Every attention variant on one task, under one budget: quality against cost.

  python -m scripts.compare_variants --task=copy --variants=all --preset=cpu
  python -m scripts.compare_variants --task=shakespeare --variants=softmax,linear \
      --preset=gpu
  python -m scripts.compare_variants --task=copy --page_only      # rewrite the pages only

For each variant it trains the task's preset config with `config.attention=<variant>`
through `train.train_and_evaluate` (the project's one training loop), then evaluates
the workdir with `eval.evaluate_workdir` (test split, the task metric, samples and
generation speed), and writes workdir/result.json. A workdir that already holds a
result.json of this config is not retrained (resumable); an interrupted one resumes
from its checkpoint, as train.py does; one trained under another config (the preset's
budget changed) is set aside as <workdir>.stale-<fingerprint> and trained afresh.
Each variant runs in a subprocess of its own, so its peak memory is its own and a
crash stops one row, not the study.

A variant the task cannot use (a decoder needs causal attention; an encoder-decoder
self-attention role needs padding masks, ...) is refused by the model config's own
validation; its row carries that message. Nothing is silently missing.

Writes results/variants_<task>/README.md (one table, variant | quality | train
steps/s | peak memory | parameters | decode speed, a plot of quality against training
time, the reference points with their sources), results/variants_<task>/results.json,
and regenerates the variant x task summary table in the top-level README.md between
its marker comments.

Per row: quality is the task metric on the test (or held-out) split; train steps/s
is the rate of training alone, over the log intervals after the first (which holds
the compilation) that hold no evaluation or checkpoint save; peak memory is the
device's peak bytes in use on a GPU and, on a CPU (where XLA keeps no such counter),
XLA's compiled memory plan (arguments + outputs + temporaries) of one
forward+backward step on a train batch;
decode speed is eval.py's generation timing, with the variant's decode state
(mode=cache) where it has one, else recomputing the prefix (mode=recompute).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time

TASKS = ("copy", "shakespeare", "multi30k", "mnist", "listops")

# Presets: (config module, overrides). The model and budget are the same for every
# variant of a task; only `attention` changes. `attention_options` gives the variants
# whose defaults do not fit the task's length their options (stated on the page).
# Options of the efficient variants for sequences of at most 64 tokens (multi30k).
SHORT_OPTIONS = {"local": {"window": 16}, "reformer": {"chunk_size": 16},
                 "linformer": {"k_proj": 16}, "sparse": {"stride": 8}}

PRESETS = {
    "copy": {
        # configs/copy.py's 2-layer 64-wide model with 2 heads of 32 (linear attention
        # needs the wider feature map to single out a position), 16 symbols (length
        # 34), 1000 steps at lr 2e-3. The copied symbol is 17 positions back: one local
        # window of 16 cannot reach it, two layers of it can. At 500 steps linear's
        # result was the seed's: 99.88, 99.93 and 95.19% for seeds 0-2, the last still
        # learning (held-out loss 0.52 -> 0.24 -> 0.16 over its last three evals).
        "cpu": dict(copy_len=16, num_train_steps=1000, learning_rate=2e-3,
                    eval_every=100, log_every=25, checkpoint_every=500, progress=False,
                    model=dict(num_heads=2,
                               attention_options={"local": {"window": 16},
                                                  "reformer": {"chunk_size": 16}})),
        "gpu": dict(copy_len=63, num_train_steps=10000, eval_every=1000, log_every=100,
                    checkpoint_every=1000, batch_size=64, progress=False,
                    model=dict(d_model=128, num_heads=8, d_ff=512, num_layers=4,
                               max_len=128,
                               attention_options={"local": {"window": 32},
                                                  "reformer": {"chunk_size": 32}})),
    },
    "shakespeare": {
        # nanoGPT's shakespeare_char CPU config (4 layers, 4 heads, 128 wide, block 64,
        # batch 12, 2000 iterations, no dropout) and its GPU config (6 x 6 x 384, block
        # 256, batch 64, dropout 0.2, 5000 iterations).
        "cpu": dict(seq_len=64, batch_size=12, num_train_steps=2000, eval_every=250,
                    log_every=50, checkpoint_every=500, eval_batches=0,
                    eval_batch_size=64, warmup_steps=100, progress=False,
                    model=dict(d_model=128, num_heads=4, d_ff=512, num_layers=4,
                               max_len=256, dropout=0.0,
                               attention_options={"local": {"window": 16},
                                                  "reformer": {"chunk_size": 16}})),
        "gpu": dict(seq_len=256, batch_size=64, num_train_steps=5000, eval_every=500,
                    log_every=100, checkpoint_every=1000, eval_batches=0,
                    eval_batch_size=64, learning_rate=1e-3, warmup_steps=100,
                    b2=0.99, weight_decay=0.1, progress=False,
                    model=dict(d_model=384, num_heads=6, d_ff=1536, num_layers=6,
                               max_len=256, dropout=0.2,
                               attention_options={"local": {"window": 64},
                                                  "reformer": {"chunk_size": 64}})),
    },
    "multi30k": {
        # configs/multi30k.py's 3+3-layer, 256-wide model with length-bucketed batches
        # (about 1 step/s on 2 cores): 1600 steps of 64 pairs, about 3.5 epochs, in
        # under 30 minutes; a higher peak lr than the config's 5e-4 for so few steps.
        # Sentences are at most 64 tokens: the efficient variants get options that make
        # them differ from full attention at that length (their defaults, a window of
        # 128 and 64-slot projections or chunks, would attend to every token): a local
        # window and LSH chunk of 16, linformer's 16 slots, sparse stride 8 = sqrt(64)
        # fixed (its default depends on each batch's length). Both presets: the
        # sentences are as short on a GPU.
        "cpu": dict(num_train_steps=1600, eval_every=800, log_every=50,
                    checkpoint_every=800, eval_batches=4, bleu_sentences=256,
                    learning_rate=1e-3, warmup_steps=300, progress=False,
                    model=dict(attention_options=SHORT_OPTIONS)),
        "gpu": dict(num_train_steps=10000, eval_every=2000, log_every=100,
                    checkpoint_every=2000, batch_size=128, eval_batches=0,
                    bleu_sentences=1014, progress=False,
                    model=dict(d_model=512, num_heads=8, d_ff=2048, num_layers=3,
                               dropout=0.1, attention_options=SHORT_OPTIONS)),
    },
    "mnist": {
        # configs/mnist.py's 2-layer 64-wide DMOL model on the 14×14 task of `make demo`
        # (configs/mnist_demo.py: 196 pixels, batch 32, lr 3e-3), 300 steps instead of
        # the demo's 800, so that every variant fits in about 45 minutes on 2 cores. A
        # local window / LSH chunk of 28 pixels is two image rows.
        "cpu": dict(image_size=14, batch_size=32, learning_rate=3e-3,
                    num_train_steps=300, eval_every=150, checkpoint_every=150,
                    log_every=25, progress=False,
                    model=dict(max_len=196,
                               attention_options={"local": {"window": 28},
                                                  "reformer": {"chunk_size": 28}})),
        "gpu": dict(num_train_steps=10000, batch_size=32, eval_every=2000,
                    checkpoint_every=2000, log_every=100, eval_batches=0,
                    progress=False, model=dict(d_model=256, num_heads=8, d_ff=1024,
                                               num_layers=8)),
    },
    "listops": {
        # configs/listops.py is LRA's data and model. The CPU preset fits every variant
        # in 45 minutes on 2 cores: lengths 32..128 (LRA's 500..2000 scaled by 1/16,
        # the same 1:4 ratio), 20k training sequences, a 2-layer 64-wide model, 600
        # steps of 32 (about 6 steps/s for softmax; at lengths up to 512 it was 0.65),
        # evaluated every 50 steps (about 1 s each) so the curves show the learning,
        # not two points; logged every 25, so that half the log intervals hold no
        # evaluation and time training alone (`_rates`).
        "cpu": dict(listops=dict(min_length=32, max_length=128, num_train=20000),
                    num_train_steps=600, eval_every=50, log_every=25,
                    checkpoint_every=300, eval_batches=0, progress=False,
                    learning_rate=1e-3, warmup_steps=100,
                    model=dict(d_model=64, num_heads=4, d_ff=256, num_layers=2,
                               max_len=128, dropout=0.0,
                               attention_options={"local": {"window": 32},
                                                  "reformer": {"chunk_size": 32}})),
        "gpu": dict(progress=False,
                    model=dict(attention_options={"local": {"window": 256},
                                                  "reformer": {"chunk_size": 128}})),
    },
}

# The quality metric of each task: (key in eval.json, label, higher is better, format).
METRIC = {
    "copy": ("token_accuracy", "token accuracy (copied half)", True, "{:.2%}"),
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

# Variants that run, but not in this preset, and why (the row says so).
SKIP = {"cpu": {"flash_pallas": "skipped by the cpu preset: off a GPU its Pallas kernels "
                                "run in interpret mode (a correctness path, orders of "
                                "magnitude slower); run the gpu preset"}}

# A row that has no result, in one word (the summary table, the listops LRA table).
STATUS_SHORT = {"refused": "cannot", "skipped": "not run", "failed": "failed"}

# The exact reference that fills a role a variant cannot (see make_config).
EXACT = "softmax"
ROLE_NAMES = {"encoder_attention": "encoder self-attention",
              "decoder_attention": "decoder self-attention",
              "cross_attention": "cross-attention"}

OUT = "results/variants_{task}"
README_BEGIN = "<!-- variants summary: written by scripts/compare_variants.py -->"
README_END = "<!-- end variants summary -->"


# ---- configs ------------------------------------------------------------------------

def make_config(task: str, preset: str, variant: str, overrides: dict | None = None):
  """The task's config module, the preset's overrides, then `attention=variant`."""
  import importlib
  if task not in PRESETS:
    raise ValueError(f"--task: unknown task {task!r}; valid: {sorted(PRESETS)}")
  if preset not in PRESETS[task]:
    raise ValueError(f"--preset: unknown preset {preset!r}; valid: {sorted(PRESETS[task])}")
  c = importlib.import_module(f"configs.{task}").get_config()
  for ov in (PRESETS[task][preset], overrides or {}):
    ov = dict(ov)
    model = dict(ov.pop("model", {}))
    opts = model.pop("attention_options", None)
    c.update(ov)
    c.model.update(model)
    if opts:
      for name, o in opts.items():
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


def config_fingerprint(config) -> str:
  """A short hash of everything in the config but the variant, the data dir and the
  options of variants the model does not use: two rows with the same fingerprint were
  trained under the same budget and model."""
  import hashlib
  d = json.loads(config.to_json_best_effort(sort_keys=True))
  d.pop("attention", None)
  d.pop("data_dir", None)
  used = {config.attention} | {config.model.get(r) for r in ROLE_NAMES}
  opts = d["model"].get("attention_options") or {}
  d["model"]["attention_options"] = {k: v for k, v in opts.items() if k in used}
  return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def refusal(config) -> str | None:
  """The reason the project refuses this variant for this task, or None.

  It is the model config's own validation (train.validate), so the row quotes the
  same message a user running train.py would see."""
  import train
  from models import ConfigError
  try:
    train.validate(config)
  except ConfigError as e:
    return str(e)
  except KeyError as e:       # train.validate's per-task tables lack this task
    raise RuntimeError(f"train.py does not know task {config.task!r} yet (train.validate "
                       f"has no entry {e}); nothing was trained") from None
  return None


# ---- one variant --------------------------------------------------------------------

def _timeline(workdir):
  """(records of workdir/metrics.jsonl, [(train record, wall seconds of training
  before it, segment index)]) over every segment of a run. train.py's steps_per_s
  counts from the step a process started at (0, or the `resumed_at_step` record of a
  resume), so a record's time in its segment is (step - start) / steps_per_s; a
  segment starts where the ones before it ended (the steps an interrupted process
  ran past its last checkpoint are counted: that time was spent). A segment written
  before those records existed counts from its first train record."""
  recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  out, offset, start, last, seg = [], 0.0, None, None, -1
  for r in recs:
    restart = "resumed_at_step" in r or "params" in r or (
        "steps_per_s" in r and last is not None and r["step"] <= last["step"])
    if restart:
      if last is not None:
        offset += (last["step"] - start) / last["steps_per_s"]
      last, seg = None, seg + 1
      start = r.get("resumed_at_step", 0 if "params" in r else None)
    if "steps_per_s" in r:
      if start is None:                 # an unmarked restart: from this record on
        start = r["step"]
      last = r
      out.append((r, offset + (r["step"] - start) / r["steps_per_s"], seg))
  return recs, out


def _busy_steps(workdir, recs) -> set:
  """Steps after whose train record the loop evaluated or saved a checkpoint (the
  eval records, and multiples of the run's checkpoint_every from workdir/config.json)."""
  busy = {r["step"] for r in recs if "eval_loss" in r}
  try:
    every = int(json.load(open(os.path.join(workdir, "config.json")))["config"]
                ["checkpoint_every"])
  except (OSError, KeyError, ValueError, TypeError):
    return busy
  last = max((r["step"] for r in recs), default=0)
  return busy | set(range(every, last + 1, every))


def _rates(workdir):
  """(training steps/s, [(step, training seconds, record)] of the evaluations, params)
  from workdir/metrics.jsonl.

  The steps/s is of training alone: over the log intervals of the last segment but
  its first (which holds the compilation), leaving out each interval that begins
  with an evaluation or a checkpoint save (`_busy_steps`); where every interval does,
  it is over the whole segment, those included."""
  recs, tl = _timeline(workdir)
  params = next((r["params"] for r in recs if "params" in r), None)
  seg = [(r, t) for r, t, g in tl if g == tl[-1][2]] if tl else []
  busy = _busy_steps(workdir, recs)
  pairs = list(zip(seg, seg[1:]))
  clean = [((a, ta), (b, tb)) for (a, ta), (b, tb) in pairs if a["step"] not in busy]
  steps = sum(b["step"] - a["step"] for (a, _), (b, _) in clean or pairs)
  secs = sum(tb - ta for (_, ta), (_, tb) in clean or pairs)
  rate = steps / secs if secs > 0 else None
  t_of = {r["step"]: t for r, t, _ in tl}           # a later segment's record wins
  evals = [(r["step"], t_of.get(r["step"]), r) for r in recs if "eval_loss" in r]
  return rate, evals, params


def train_seconds(workdir) -> float:
  """Wall seconds of training (compilation and in-loop evaluations included) over every
  segment of a run in workdir/metrics.jsonl (see `_timeline`)."""
  tl = _timeline(workdir)[1]
  return tl[-1][1] if tl else 0.0


def _train_memory(workdir, config) -> dict:
  """Peak memory of training: the GPU's peak bytes in use, or (CPU) XLA's compiled
  memory plan of one forward+backward on a train batch."""
  import jax
  dev = jax.devices()[0]
  stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
  if stats and stats.get("peak_bytes_in_use"):
    return {"peak_bytes": int(stats["peak_bytes_in_use"]), "memory_kind": "device peak"}
  import jax.numpy as jnp
  from flax import nnx
  import input_pipeline
  import train
  _, model, _ = train.load_model(workdir)
  model.train()
  task = input_pipeline.create(config)
  batch = {k: jnp.asarray(v) for k, v in task.train_batch(0).items()}
  gdef, params, rest = nnx.split(model, nnx.Param, ...)

  def fwd_bwd(params, rest, batch):
    # nnx.value_and_grad, not jax's: dropout advances the RNG count inside the trace
    m = nnx.merge(gdef, params, rest)
    return nnx.value_and_grad(lambda m: train.loss_fn(m, batch)[0])(m)

  ma = jax.jit(fwd_bwd).lower(params, rest, batch).compile().memory_analysis()
  total = (ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
           - ma.alias_size_in_bytes)
  return {"peak_bytes": int(total), "memory_kind": "XLA plan, fwd+bwd"}


def run_one(task: str, preset: str, variant: str, workdir: str,
            overrides: dict | None = None) -> dict:
  """Trains (or resumes) and evaluates one variant; writes and returns workdir/result.json.

  A variant refused by the config validation, or skipped by the preset, gets
  `why_not`'s row (status 'refused' / 'skipped' and the reason); nothing is trained
  or written.
  """
  not_run = why_not(task, preset, variant, overrides)
  if not_run:
    return not_run
  import train
  config = make_config(task, preset, variant, overrides)
  res = {"variant": variant, "task": task, "preset": preset,
         "config": config_fingerprint(config)}
  train.train_and_evaluate(config, workdir)
  res["train_seconds"] = train_seconds(workdir)         # all segments of a resumed run
  res["steps_per_s"], evals, res["params"] = _rates(workdir)
  res["curve"] = _curve(task, evals)
  res.update(_solved_at(task, evals))
  res.update(_evaluate(task, variant, workdir, config))
  return _write(res, workdir)


def why_not(task, preset, variant, overrides=None) -> dict | None:
  """The row of a variant that this task refuses or this preset skips (nothing is
  trained), else None. It is derived from the code at each call and never stored in
  a workdir, so that a variant which gains the support it lacked is trained by the
  next run, and a row's reason is always the current one."""
  config = make_config(task, preset, variant, overrides)
  why = refusal(config)
  skip = SKIP.get(preset, {}).get(variant)
  if not (why or skip):
    return None
  return {"variant": variant, "task": task, "preset": preset,
          "config": config_fingerprint(config),
          "status": "refused" if why else "skipped", "reason": why or skip}


def _curve(task, evals) -> list:
  """[(step, training seconds, the task's in-training metric)] from _rates' evals."""
  key = TRAIN_METRIC[task]
  return [(s, sec, r.get(key)) for s, sec, r in evals if key in r]


# The copy task counts as solved at the first in-training evaluation that copies this
# share of its held-out sequences exactly: every variant reaches 100% token accuracy
# at the cpu preset's budget, so the step that gets there is what tells them apart
# (the paper compares the variants by their convergence, section 4.1).
SOLVED = {"copy": ("accuracy", 0.99)}


def _solved_at(task, evals) -> dict:
  """{"solved_at": [step, training seconds] of the first eval with SOLVED[task]'s
  metric at or over its threshold, or None} for a task in SOLVED, else {}."""
  if task not in SOLVED:
    return {}
  key, at = SOLVED[task]
  hit = next(([s, sec] for s, sec, r in evals if r.get(key, -1) >= at), None)
  return {"solved_at": hit}


def _evaluate(task, variant, workdir, config) -> dict:
  """eval.py's evaluation of a trained workdir, plus the training memory."""
  import jax
  import eval as evaluation
  over = {}
  if task == "multi30k":
    over["bleu_sentences"] = 100000       # the whole test set
  if task == "mnist":
    over["eval_batches"] = 0               # test bits/dim on the whole test split
  if task == "shakespeare":               # no positions beyond those trained on
    over["sample_len"] = int(config.seq_len) - len(config.prompt)
  # the variant's decode state where its decoder role has one, else recompute
  ev = evaluation.evaluate_workdir(workdir, decode_mode="auto", **over)
  res = dict(status="ok", eval=ev, decode_mode=ev["decode_mode"],
             **_train_memory(workdir, config))
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
  res = _finished(workdir)
  res.update(_evaluate(task, variant, workdir, make_config(task, preset, variant,
                                                            overrides)))
  return _write(res, workdir)


def _write(res, workdir) -> dict:
  res["date"] = datetime.date.today().isoformat()
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "result.json"), "w") as f:
    json.dump(res, f, indent=1)
  return res


def ensure(task, preset, variant, workdir, overrides=None, subprocess_run=True) -> dict:
  """workdir/result.json if the variant finished there (it is never retrained), else
  `why_not`'s row if it is not to be trained, else runs it (in a subprocess of its own
  unless subprocess_run=False)."""
  path = os.path.join(workdir, "result.json")
  config = make_config(task, preset, variant, overrides)
  done = _finished(workdir, config)
  if done:
    return done
  _set_aside(workdir, config)
  if not subprocess_run:
    return run_one(task, preset, variant, workdir, overrides)   # it asks why_not
  not_run = why_not(task, preset, variant, overrides)    # no process spawned for it
  if not_run:
    return not_run
  cmd = [sys.executable, "-m", "scripts.compare_variants", f"--task={task}",
         f"--preset={preset}", f"--one={variant}",
         f"--workdir_root={os.path.dirname(workdir)}",
         f"--one_dir={os.path.basename(workdir)}"]
  if overrides:
    cmd.append("--overrides=" + json.dumps(overrides))
  t = time.perf_counter()
  p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "log.txt"), "a") as f:
    f.write(p.stdout)
  if p.returncode == 0 and os.path.exists(path):
    return json.load(open(path))
  tail = [l for l in p.stdout.strip().splitlines() if l.strip()][-1:] or ["(no output)"]
  # a failure is a row too, but not a result: the next call tries again
  return {"variant": variant, "task": task, "preset": preset, "status": "failed",
          "reason": f"exit {p.returncode} after {time.perf_counter() - t:.0f} s: {tail[0]}"
                    f" (full log: {workdir}/log.txt)"}


# ---- the page -----------------------------------------------------------------------

def _mib(b):
  return f"{b / 2 ** 20:.1f} MiB" if b is not None else "-"


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


def host(res) -> str:
  """The machine a row was trained and evaluated on (eval.json's runtime record)."""
  return res.get("eval", {}).get("host") or "host not recorded"


def row(res, mark: str = "", exact: list[str] = ()) -> str:
  """The page's table row; `mark` tags the speed cells when the rows come from
  several machines; `exact` names the roles that keep exact softmax."""
  v = f"`{res['variant']}`" + (f" ({', '.join(exact)}: {EXACT})" if exact else "")
  if res.get("status") != "ok":
    label = {"refused": "cannot do this task", "skipped": "not run",
             "failed": "failed"}[res["status"]]
    reason = res["reason"].replace("|", "\\|").replace("\n", " ")
    return f"| {v} | {label}: {reason} | | | | |"
  dk, unit = DECODE[res["task"]]
  dec = res["eval"].get(dk) if dk else None
  dec = (f"{dec:,.0f} {unit} ({res['decode_mode']})" if dec is not None
         else "n/a (a classifier)" if res["task"] == "listops" else "-")
  sps = f"{res['steps_per_s']:.2f}" if res.get("steps_per_s") else "-"
  if mark:
    sps, dec = f"{sps} ({mark})", f"{dec} ({mark})"
  return (f"| {v} | {quality_str(res)} | {sps} | {_mib(res.get('peak_bytes'))} | "
          f"{res['params']:,} | {dec} |")


def plot(results, task, path):
  """Quality (the training-time metric) against training seconds: one panel per
  variant family (`attention.registry.FAMILIES`), one line per variant, softmax
  repeated in grey as the reference in the panels it is not in. All panels share
  both axes, so a line can be read against any other."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import matplotlib.ticker
  import attention
  from attention.registry import FAMILIES

  def pts(r):
    return [(sec, q) for _, sec, q in r["curve"] if sec is not None and q is not None]

  ok = [r for r in results if r.get("status") == "ok" and r.get("curve") and pts(r)]
  fams = [f for f in FAMILIES if any(attention.variant(r["variant"]).family == f
                                     for r in ok)] or ["exact"]
  fig, axes = plt.subplots(1, len(fams), figsize=(3.9 * len(fams) + 0.4, 4.1), dpi=100,
                           sharex=True, sharey=True, squeeze=False)
  axes = axes[0]
  ref = next((r for r in ok if r["variant"] == "softmax"), None)
  cmap = plt.get_cmap("tab10")
  for ax, fam in zip(axes, fams):
    rows = [r for r in ok if attention.variant(r["variant"]).family == fam]
    if ref is not None and ref not in rows:
      xs, ys = zip(*pts(ref))
      ax.plot(xs, ys, color="0.6", lw=2.2, alpha=0.7, label="softmax (reference)")
    for i, r in enumerate(rows):
      xs, ys = zip(*pts(r))
      # exact-family lines overlap by design: styles and markers keep them apart
      ax.plot(xs, ys, ls=("-", "--", ":", "-.")[i % 4], marker="os^vDP"[i % 6], ms=3.5,
              lw=1.3, color=cmap(i % 10), label=r["variant"])
    ax.set_title(FAMILIES[fam], fontsize=9)
    ax.grid(alpha=0.3)
    if rows or ref is not None:
      ax.legend(fontsize=7, frameon=False, ncol=2, loc="upper center",
                bbox_to_anchor=(0.5, -0.16))
  key = TRAIN_METRIC[task]
  cpu = ok and ok[0].get("device", "").lower().startswith("cpu")
  for ax in axes:
    ax.set_xlabel("training time (s, 2 shared CPU cores)" if cpu else "training time (s)",
                  fontsize=8)
  axes[0].set_ylabel({"eval_loss": "held-out loss (nats/token)",
                      "bleu": "BLEU, in-training evals (validation)",
                      "bits_per_dim": "bits/dim, in-training evals",
                      "accuracy": "validation accuracy, in-training evals"}.get(key, key))
  ax = axes[0]                       # the axes are shared: scales set once
  if key == "eval_loss":
    ax.set_yscale("log")
  times = [sec for r in ok for sec, _ in pts(r) if sec]
  if times and max(times) > 5 * min(times):     # one slow variant would squash the rest
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  if key == "accuracy":
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=1))
  lo, hi = ax.get_ylim()
  if key == "eval_loss" and ok and hi < 10 * lo:     # under a decade: plain tick labels
    for set_fmt in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
      set_fmt(matplotlib.ticker.StrMethodFormatter("{x:.1f}"))
  fig.suptitle(f"{task}: quality against training time", fontsize=11)
  if not ok:
    ax.text(0.5, 0.5, "no variant has run yet", ha="center", transform=ax.transAxes)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def write_page(task, preset, results, out, references="", overrides=None, command=None):
  """results/variants_<task>/README.md, results.json and quality_vs_time.png."""
  import jax
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
  plot(results, task, os.path.join(out, "quality_vs_time.png"))
  ok = [r for r in results if r.get("status") == "ok"]
  dates = sorted({r["date"] for r in ok}) or [datetime.date.today().isoformat()]
  devices = sorted({r.get("device", "?") for r in ok})
  jaxes = sorted({r.get("jax", jax.__version__) for r in ok}) or [jax.__version__]
  config = make_config(task, preset, "softmax", overrides)
  command = command or (f"python -m scripts.compare_variants --task={task} "
                        f"--variants=all --preset={preset}")
  train_s = sum(r.get("train_seconds", 0.0) for r in ok)
  mem = sorted({r.get("memory_kind") for r in ok if r.get("memory_kind")})
  hosts = list(dict.fromkeys(host(r) for r in ok))
  marks = {h: "ABCDEFGH"[i] for i, h in enumerate(hosts)} if len(hosts) > 1 else {}
  cpu = bool(devices) and devices[0].lower() == "cpu"
  if marks:
    where = ("- machines: " + "; ".join(f"({m}) {h}" for h, m in marks.items())
             + f" ({', '.join(devices)}). The rows were trained on different machines: "
             "compare train steps/s and decode speed only between rows of one machine "
             "(the letter in those cells)")
  else:
    where = f"- machine: {', '.join(devices)}, {hosts[0] if hosts else '-'}"
  lines = [
      f"# Attention variants on {task}: quality against cost",
      "",
      f"Written by `{command}`; every number of ours below comes from that script's "
      "runs.",
      "",
      where + ("; CPU cores shared with other jobs while it ran: timings are indicative "
               "only, re-run on a quiet machine for speed claims" if cpu else ""),
      f"- date: {', '.join(dates)}; jax {', '.join(jaxes)}; preset `{preset}`; "
      f"{len(ok)} variant(s) trained, {train_s / 60:.1f} min of training in all "
      "(compilation and evaluations included; each variant's evaluation comes on top)",
      f"- the same config for every variant, only `attention` differs: "
      f"`{_config_summary(config)}`"
      + ("; the variant fills the encoder's and the decoder's self-attention and the "
         "cross-attention, and a role it cannot fill keeps exact softmax (its row says "
         "which)" if config.model.kind == "encdec" else ""),
      f"- one training run per variant, each from seed {config.seed} (the same data "
      "order)" + ("; other seeds of some variants under \"Seed spread\" below"
                  if os.path.exists(os.path.join(out, "seeds.json")) else
                  ": the spread between seeds was not measured, so a small gap between "
                  "two rows is not evidence that one variant is better"),
      "- train steps/s: training alone (the log intervals after the first, which holds "
      "the compilation, that hold no evaluation or checkpoint save)",
      f"- peak memory: {', '.join(mem) or '-'}; decode speed: eval.py's generation "
      "timing (after a warm-up call), `cache` = the variant's decode state, "
      "`recompute` = the full forward pass per new token (variants without a state)",
      "",
      f"| variant | {METRIC[task][1]} | train steps/s | peak memory | parameters | "
      "decode speed |",
      "|---|---|---|---|---|---|",
  ]
  lines += [row(r, marks.get(host(r), "") if r.get("status") == "ok" else "",
                exact_roles(make_config(task, preset, r["variant"], overrides)))
            for r in results]
  lines += ["", "![quality against training time](quality_vs_time.png)", ""]
  if task == "copy":
    lines += _copy_notes(results, config)
  if task == "mnist":
    lines += _completion_notes(results)
  if task == "listops":
    lines += _listops_notes(results, config)
  if task == "shakespeare":
    lines += _samples(results)
  if task == "multi30k":
    sig = sorted({r["bleu_signature"] for r in ok if "bleu_signature" in r})
    lines += [f"sacreBLEU signature: `{s}`" for s in sig] + [""]
  lines += seed_spread(task, preset, results, out, overrides)
  if references:
    lines += ["## Reference points", "", references.strip(), ""]
  with open(os.path.join(out, "README.md"), "w") as f:
    f.write("\n".join(lines) + "\n")


def _config_summary(c) -> str:
  m = c.model
  keys = {"copy": ["copy_len"], "shakespeare": ["seq_len"], "listops": ["listops"],
          "multi30k": ["src_len", "tgt_len", "length_buckets"],
          "mnist": ["image_size"]}[c.task]
  s = [f"{k}={c[k].to_dict() if hasattr(c[k], 'to_dict') else c[k]}" for k in keys]
  s += [f"layers={m.num_layers}", f"d_model={m.d_model}", f"heads={m.num_heads}",
        f"d_ff={m.d_ff}", f"dropout={m.dropout}", f"batch={c.batch_size}",
        f"steps={c.num_train_steps}", f"lr={c.learning_rate}"]
  opts = {k: dict(v) for k, v in c.model.attention_options.items()}
  if opts:
    s.append(f"attention_options={opts}")
  return ", ".join(s)


def _copy_notes(results, config):
  key, at = SOLVED["copy"]
  n = (f"{config.eval_batches * (config.get('eval_batch_size') or config.batch_size)} "
       "held-out sequences" if config.eval_batches else "the whole held-out split")
  lines = ["Other measures of the same runs (test batches from a held-out seed). "
           f"Solved at: the first in-training evaluation (every {config.eval_every} "
           f"steps, {n}) with at least {at:.0%} of "
           "the sequences copied exactly, and the training time to it: the accuracy "
           "columns end alike, this one tells how fast a variant gets there.", "",
           "| variant | sequences copied exactly (teacher-forced) | token accuracy of the "
           "greedy generated copy | solved at (step, training time) |",
           "|---|---|---|---|"]
  for r in results:
    if r.get("status") == "ok":
      e, hit = r["eval"], r.get("solved_at")
      when = (f"{hit[0]} ({hit[1]:.1f} s)" if hit and hit[1] is not None
              else f"{hit[0]}" if hit
              else f"not within {config.num_train_steps} steps" if "solved_at" in r
              else "-")
      lines.append(f"| `{r['variant']}` | {e['accuracy']:.1%} | "
                   f"{e['generated_token_accuracy']:.2%} | {when} |")
  return lines + [""]


def _completion_notes(results):
  ev = [r for r in results if r.get("status") == "ok" and
        "completion_accuracy" in r["eval"]]
  if not ev:
    return []
  e0 = ev[0]["eval"]
  lines = [f"Completions read right: eval.py completes the bottom half of the first "
           f"{e0['n_images']} test images once each (temperature 1) and the project's "
           f"digit classifier (models/classifier.py, {e0.get('classifier_test_accuracy', 0):.1%} "
           "on the test split) reads them; the baselines are the same top halves over a "
           "blank bottom and over the bottom half of another test image. A completion "
           "model is only as good as its lead over the blank bottom. (± one standard "
           "error over the images.)", "",
           "| variant | completions read right | blank bottom | another image's bottom | "
           "lead over blank (points) |", "|---|---|---|---|---|"]
  for r in ev:
    e = r["eval"]
    lines.append(
        f"| `{r['variant']}` | {e['completion_accuracy']:.1%} ± "
        f"{e['completion_accuracy_se']:.1%} | {e['blank_accuracy']:.1%} | "
        f"{e['random_bottom_accuracy']:.1%} | {100 * e['completion_lead_over_blank']:+.1f} |")
  ahead = [r["variant"] for r in ev if r["eval"]["completion_lead_over_blank"]
           > 2 * r["eval"]["completion_accuracy_se"]]
  lines += ["", (f"Completions read right more often than the blank bottom (by more than two "
                 f"standard errors) for {', '.join(f'`{v}`' for v in ahead)}." if ahead else
                 "No variant's completions are read right more often than the top halves "
                 "over a blank bottom: at this budget the models draw strokes that mislead "
                 "the classifier as often as they help, and the test bits/dim column is the "
                 "informative one (configs/mnist_demo.py's page, results/mnist_demo, "
                 "measures how the completion metric grows with training steps).")]
  return lines + [""]


def _listops_notes(results, config):
  """Our accuracy next to LRA's published one, and the constant-answer baseline."""
  import numpy as np
  import input_pipeline
  from scripts import variant_references as refs
  sp = input_pipeline.create(config).splits
  y, y_val = sp["test"][1], sp["validation"][1]
  top = np.bincount(y, minlength=10)
  const = top.max() / len(y)
  lines = [f"A constant answer (the test split's most frequent label, {int(top.argmax())}) "
           f"scores {const:.1%} on our {len(y)} test sequences; chance is 10%."]
  acc = {r["variant"]: quality(r) for r in results if quality(r) is not None}
  if acc:
    lo, hi = min(acc.values()), max(acc.values())
    se = math.sqrt(hi * (1 - hi) / len(y))
    lines[-1] += (f" Every variant that ran scores {lo:.1%} to {hi:.1%}, {100 * (lo - const):.0f}"
                  f" or more points above it; one standard error over {len(y)} sequences "
                  f"is about {100 * se:.1f} points, so differences of two or three points "
                  "between variants are hardly resolved by one run.")
    weak = {v: p for v, (_, p) in refs.LRA_LISTOPS_ACC.items() if p < 20 and v in acc}
    if weak and "softmax" in acc:
      gap = max(acc["softmax"] - acc[v] for v in weak)
      lines[-1] += (f" In LRA's table {', '.join(f'`{v}`' for v in sorted(weak))} stay at "
                    f"{min(weak.values()):.1f} to {max(weak.values()):.1f}%, near a constant "
                    f"answer, at lengths up to 2000; at this preset's lengths they are within "
                    f"{100 * gap:.1f} points of `softmax`.")
  # the plot's curves are validation accuracy, the tables test accuracy
  last_val = {r["variant"]: r["curve"][-1][2] for r in results
              if r["variant"] in acc and r.get("curve") and r["curve"][-1][2] is not None}
  if last_val:
    gap = 100 * float(np.median([last_val[v] - acc[v] for v in last_val]))
    ends = lambda y: float(np.mean((y == 0) | (y == 9)))
    lines[-1] += (f" The plot's curves are validation accuracy, which at the last step runs "
                  f"{abs(gap):.1f} points {'above' if gap >= 0 else 'below'} test accuracy "
                  f"(the median over the variants): "
                  f"the two splits are drawn alike and differ by chance; the validation "
                  f"split holds {ends(y_val):.1%} of the extreme answers 0 and 9 (what MAX "
                  f"and MIN most often give) against the test split's {ends(y):.1%}.")
  lines += ["",
           "| variant | ours (this preset) | LRA, published (its model) |", "|---|---|---|"]
  for r in results:
    pub = refs.LRA_LISTOPS_ACC.get(r["variant"])
    pub = f"{pub[1]:.2f}% ({pub[0]})" if pub else "- (not in LRA's table)"
    ours = quality_str(r) if r.get("status") == "ok" else STATUS_SHORT[r["status"]]
    lines.append(f"| `{r['variant']}` | {ours} | {pub} |")
  return lines + ["", "LRA's numbers are at lengths up to 2000 with a 6-layer 512-wide "
                  "model; the comparison is of the ranking, not the values (see below).",
                  ""]


def _samples(results):
  lines = ["Samples (prompt `ROMEO:`, temperature 0.8; the first of eval.py's four), as "
           "long as the context the model was trained on (`seq_len`): it has never seen "
           "later positions.", ""]
  for r in results:
    if r.get("status") == "ok" and r.get("sample"):
      lines += [f"`{r['variant']}`:", "", "```", r["sample"].strip(), "```", ""]
  return lines


def summary_table(root="results") -> str:
  """The variant x task table from every results/variants_<task>/results.json."""
  import attention
  by_task = {}
  for task in TASKS:
    p = os.path.join(root, f"variants_{task}", "results.json")
    if os.path.exists(p):
      by_task[task] = {r["variant"]: r for r in json.load(open(p))}
  tasks = [t for t in TASKS if t in by_task]
  head = ["| variant | " + " | ".join(
      f"[{t}](results/variants_{t}/README.md) ({METRIC[t][1]})" for t in tasks) + " |",
      "|---|" + "---|" * len(tasks)]
  body = []
  for v in attention.names():
    cells = []
    for t in tasks:
      r = by_task[t].get(v)
      if r is None:
        cells.append("not run")
      elif r["status"] == "ok":
        cells.append(quality_str(r))
      else:
        cells.append(STATUS_SHORT[r["status"]])
      if r is not None and r["status"] != "refused" and exact_roles(
          make_config(t, r.get("preset", "cpu"), v)):
        cells[-1] += " *"
    body.append(f"| `{v}` | " + " | ".join(cells) + " |")
  foot = ["", "\\* with exact softmax in the roles the variant cannot fill (the task's page "
          "names them)"] if any(" *" in line for line in body) else []
  return "\n".join(head + body + foot)


def update_readme(path="README.md", root="results"):
  """Rewrites the summary between README_BEGIN and README_END in `path`."""
  text = open(path).read()
  if README_BEGIN not in text or README_END not in text:
    raise ValueError(f"{path} has no '{README_BEGIN}' ... '{README_END}' markers")
  pre, rest = text.split(README_BEGIN, 1)
  _, post = rest.split(README_END, 1)
  with open(path, "w") as f:
    f.write(pre + README_BEGIN + "\n" + summary_table(root) + "\n" + README_END + post)


def references(task) -> str:
  from scripts import variant_references
  return variant_references.TEXT.get(task, "")


def record_seed(out, res, seed) -> None:
  """Adds one extra-seed run (a finished result) to out/seeds.json."""
  p = os.path.join(out, "seeds.json")
  runs = json.load(open(p)) if os.path.exists(p) else []
  runs = [r for r in runs if not (r["variant"] == res["variant"] and r["seed"] == seed
                                  and r["preset"] == res["preset"])]
  runs.append({"variant": res["variant"], "task": res["task"], "preset": res["preset"],
               "seed": seed, "quality": quality(res), "config": res["config"],
               "date": res["date"], "host": host(res)})
  os.makedirs(out, exist_ok=True)
  with open(p, "w") as f:
    json.dump(sorted(runs, key=lambda r: (r["variant"], r["seed"])), f, indent=1)


def seed_spread(task, preset, results, out, overrides=None) -> list:
  """Page lines: per variant with extra-seed runs in out/seeds.json (of this preset,
  under the config its row was trained with), its metric per seed, mean and range."""
  p = os.path.join(out, "seeds.json")
  if not os.path.exists(p):
    return []
  rows = {r["variant"]: r for r in results if r.get("status") == "ok"}
  by = {}
  for s in json.load(open(p)):
    r0 = rows.get(s["variant"])
    if s["preset"] != preset or s["task"] != task or r0 is None:
      continue
    want = config_fingerprint(make_config(task, preset, s["variant"],
                                          {**(overrides or {}), "seed": s["seed"]}))
    if s["config"] == want:
      seed0 = int(make_config(task, preset, s["variant"], overrides).seed)
      by.setdefault(s["variant"], {seed0: quality(r0)})        # the row's own run
      by[s["variant"]][s["seed"]] = s["quality"]
  if not by:
    return []
  fmt = METRIC[task][3]
  lines = ["## Seed spread", "",
           "The same variant trained again from other seeds (initialisation, data order, "
           "dropout), by `--seeds`: a gap between two rows smaller than this spread is "
           "not evidence that one variant is better.", "",
           f"| variant | {METRIC[task][1]} per seed | mean | max − min |", "|---|---|---|---|"]
  for v, q in sorted(by.items()):
    vals = [q[k] for k in sorted(q)]
    lines.append(f"| `{v}` | " + ", ".join(f"{fmt.format(q[k])} ({k})" for k in sorted(q))
                 + f" | {fmt.format(sum(vals) / len(vals))} | "
                 f"{fmt.format(max(vals) - min(vals))} |")
  return lines + [""]


def published(task, preset, out, overrides=None) -> dict:
  """{variant: row} of the finished rows in out/results.json (the committed page) that
  this preset would train again: the same preset, and the same config fingerprint
  where the row records one (rows written before fingerprints existed were trained
  under the preset the page states). A workdir lives on the machine that trained it;
  the page is what a later session or another machine has of that run, so a variant
  finished there is kept from the page, not trained again (nor lost from it)."""
  p = os.path.join(out, "results.json")
  if not os.path.exists(p):
    return {}
  keep = {}
  for r in json.load(open(p)):
    if r.get("status") != "ok" or r.get("preset") != preset or r.get("task") != task:
      continue
    want = config_fingerprint(make_config(task, preset, r["variant"], overrides))
    if r.get("config", want) == want:
      keep[r["variant"]] = r
  return keep


def _unrun(task, preset, variant, workdir, overrides=None, kept=None) -> dict:
  """workdir/result.json if the variant ran, else its row kept from the page
  (`published`), else a row saying why it did not run: the task refuses it, the
  preset skips it, or it has not been run yet."""
  res = _finished(workdir, make_config(task, preset, variant, overrides))
  if res:
    if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
      # recomputed from the metrics: older results timed one process (or read a
      # resumed segment's clock from step 0), and the plotted metric may change
      rate, evals, _ = _rates(workdir)
      res.update(train_seconds=train_seconds(workdir), steps_per_s=rate,
                 curve=_curve(task, evals), **_solved_at(task, evals))
    return res
  if kept and variant in kept:
    return kept[variant]
  res = {"variant": variant, "task": task, "preset": preset}
  try:
    not_run = why_not(task, preset, variant, overrides)
  except RuntimeError as e:               # train.py does not know the task
    return dict(res, status="failed", reason=str(e))
  return not_run or dict(res, status="skipped", reason="yet to be trained (the command "
                         "above runs it; finished variants are kept)")


def _finished(workdir, config=None) -> dict | None:
  """workdir/result.json if the variant was trained and evaluated there (status ok)
  under `config` (when given): a result of another config (the preset changed since:
  budget, model, options) is stale, and a refusal or skip stored by an older version
  of this script is not a result either. Results written before fingerprints were
  recorded count as this config's."""
  p = os.path.join(workdir, "result.json")
  if os.path.exists(p):
    res = json.load(open(p))
    if res.get("status") == "ok" and (
        config is None or res.get("config", config_fingerprint(config))
        == config_fingerprint(config)):
      return res
  return None


def _trained_under(workdir) -> str | None:
  """The config fingerprint a workdir was trained under: its result.json's, else (a
  run stopped before its evaluation) that of the config train.py stored in
  workdir/config.json; None for a workdir with neither."""
  import ml_collections
  for name, get in (("result.json", lambda d: d.get("config")),
                    ("config.json", lambda d: config_fingerprint(
                        ml_collections.ConfigDict(d["config"])))):
    p = os.path.join(workdir, name)
    if os.path.exists(p):
      fp = get(json.load(open(p)))
      if fp:
        return fp
  return None


def _set_aside(workdir, config) -> str | None:
  """Renames a workdir trained (or partly trained) under another config than `config`
  to <workdir>.stale-<its fingerprint>, kept, never deleted, so that the variant trains
  afresh instead of resuming, or reusing, a run of another budget (train.py refuses
  only another model, not another step count or learning rate); returns the new path."""
  old = _trained_under(workdir)
  if old is None or old == config_fingerprint(config):
    return None
  dest = f"{workdir}.stale-{old}"
  while os.path.exists(dest):
    dest += "+"
  os.rename(workdir, dest)
  print(f"{workdir}: trained under another config (the preset changed); set aside as "
        f"{dest}, training afresh", flush=True)
  return dest


def main(argv=None):
  import attention
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--task", required=True, choices=TASKS)
  ap.add_argument("--variants", default="all", help="all, or a comma-separated list")
  ap.add_argument("--preset", default="cpu", choices=("cpu", "gpu"))
  ap.add_argument("--workdir_root", default=None,
                  help="default: workdirs/variants_<task>_<preset>")
  ap.add_argument("--out", default=None, help="default: results/variants_<task>")
  ap.add_argument("--overrides", default="", help="JSON of config overrides (tests)")
  ap.add_argument("--page_only", action="store_true",
                  help="write the page from the finished results; train nothing")
  ap.add_argument("--reeval", action="store_true",
                  help="evaluate the finished variants again (training is kept)")
  ap.add_argument("--ignore_page", action="store_true",
                  help="train the chosen --variants again where the committed page "
                       "holds them but this machine has no workdir (e.g. to time every "
                       "row on one machine); default: keep the page's rows")
  ap.add_argument("--seeds", default="",
                  help="extra training seeds for the chosen --variants (e.g. 1,2): each "
                       "is trained and evaluated like its row, and the page gets their "
                       "spread beside seed 0's row (out/seeds.json keeps them)")
  ap.add_argument("--one", default="", help=argparse.SUPPRESS)   # the per-variant child
  ap.add_argument("--one_dir", default="", help=argparse.SUPPRESS)  # its workdir's name
  a = ap.parse_args(argv)
  root = a.workdir_root or f"workdirs/variants_{a.task}_{a.preset}"
  ov = json.loads(a.overrides) if a.overrides else None
  if a.one:
    from absl import logging
    logging.set_verbosity(logging.WARNING)
    run_one(a.task, a.preset, a.one, os.path.join(root, a.one_dir or a.one), ov)
    return
  names = attention.names() if a.variants == "all" else a.variants.split(",")
  for n in names:
    attention.variant(n)        # an unknown name lists the valid ones, before any run
  out = a.out or OUT.format(task=a.task)
  kept = published(a.task, a.preset, out, ov)
  results = []
  for n in attention.names():           # the page has a row for every variant
    wd = os.path.join(root, n)
    ran_here = _finished(wd, make_config(a.task, a.preset, n, ov)) is not None
    keep = n in kept and not ran_here and not a.ignore_page    # finished elsewhere
    if a.page_only or n not in names or keep:
      results.append(_unrun(a.task, a.preset, n, wd, ov, kept))
      if keep and not a.page_only and n in names:
        print(f"{n}: kept from {out}/results.json (trained {kept[n]['date']}; "
              f"its workdir is not on this machine)", flush=True)
      continue
    if a.reeval and ran_here:
      results.append(reevaluate(a.task, a.preset, n, wd, ov))
      continue
    t = time.perf_counter()
    r = ensure(a.task, a.preset, n, wd, ov)
    print(f"{n}: {r['status']} {quality_str(r)} ({time.perf_counter() - t:.0f} s)",
          flush=True)
    results.append(r)
  for s in (int(x) for x in a.seeds.split(",") if x):
    for n in names:
      if s == int(make_config(a.task, a.preset, n, ov).seed):
        continue                                    # that run is the variant's row
      wd = os.path.join(root, f"{n}@seed{s}")
      r = ensure(a.task, a.preset, n, wd, {**(ov or {}), "seed": s})
      print(f"{n} seed {s}: {r['status']} {quality_str(r)}", flush=True)
      if r.get("status") == "ok":
        record_seed(out, r, s)
  # the command that rewrites this page (every variant; a local --workdir_root left out)
  cmd = (f"python -m scripts.compare_variants --task={a.task} --variants=all "
         f"--preset={a.preset}" + (f" --out={a.out}" if a.out else "")
         + (f" --overrides='{a.overrides}'" if a.overrides else ""))
  write_page(a.task, a.preset, results, out, references(a.task), ov, cmd)
  if a.out is None:
    update_readme()
  print(f"wrote {out}/README.md")


if __name__ == "__main__":
  main()
