"""Packed against length-bucketed Multi30k training batches (issue 42's targets):

  padding     the share of the computed tokens (source + target columns of every
              train batch) that are padding, over the first `pad_steps` train batches
              of configs/multi30k.py:cpu (bucketed: 64 pairs cut to the smallest of
              length_buckets) and :cpu_packed (16 rows of 64 + 64 tokens, ~61 pairs);
              target <= 5% packed.
  throughput  real (non-padding) source + target tokens per CPU-second of training
              steps, both arms in one process at the preset's model: each arm a
              trainer.step.TrainStep over its first `time_steps` batches already on
              the device (`studies.bench.train.Bare`; every bucket shape compiled
              first), one step of each arm in turn, each step timed to
              block_until_ready by this process's CPU time (`time.process_time`, all
              its threads: on a shared machine, time spent waiting for a core does not
              count). The steps are cut into `rounds` consecutive rounds; per round the
              ratio packed / bucketed of real tokens per CPU-second; the page gives
              the median ratio with the median's distribution-free 95% interval
              (`studies.core.timing.median_interval`); target >= 1.2.
  bleu        short trainings of each arm at the cpu preset's model and learning rate
              for `bleu_steps` steps (cosine schedule over them, warmup scaled as the
              preset's 300 of 1600), per seed, then test BLEU (eval.py's
              `evaluate_workdir` on the first `bleu_batches` x 64 sentences of the
              test split, beam 4); results are added to the JSON run by run, so an
              interrupted sweep keeps what it finished.

Results: results/packing/packing.json, and the page results/packing/README.md written
from it alone (`page`).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time

import jax
import numpy as np

from studies.core import pages, protocol, timing

ARMS = {"bucketed": "cpu", "packed": "cpu_packed"}     # configs/multi30k.py presets
PAD_TARGET, SPEED_TARGET = 0.05, 1.2                    # issue 42


@dataclasses.dataclass(frozen=True)
class Preset:
  model: dict          # overrides of the cpu preset's model ({}: as it is)
  pad_steps: int       # train batches scanned for the padding share
  time_steps: int      # timed steps per arm
  rounds: int          # rounds the timed steps are cut into (ratios per round)
  bleu_steps: int      # training steps per BLEU run
  bleu_batches: int    # test batches of 64 sentences scored by BLEU
  what: str


PRESETS = {
    "smoke": Preset(dict(d_model=16, num_heads=2, d_ff=32, num_layers=1), 4, 4, 2, 2, 1,
                    "a tiny model: a test of the study, not a measurement"),
    "cpu": Preset({}, 471, 60, 6, 100, 2,
                  "configs/multi30k.py:cpu and :cpu_packed as they are (3+3 layers, "
                  "d_model 256); padding over one packed epoch of steps"),
}


def config(arm: str, p: Preset, data_dir: str = "", seed: int = 0):
  """configs/multi30k.py at the arm's preset, with the study preset's model."""
  from configs import multi30k
  c = multi30k.get_config(ARMS[arm])
  c.model.update(p.model)
  c.seed, c.data_dir, c.progress = seed, data_dir, False
  return c


def batch_counts(b: dict) -> dict:
  """Computed and real (non-padding) tokens, and pairs, of one Multi30k train batch
  (packed or not): source and target columns together."""
  real = int(np.sum(b["src"] != 0) + np.sum(b["y"] != 0))
  pairs = (int(np.sum((b["y_seg"] > 0) & (b["y_pos"] == 0))) if "y_seg" in b
           else int(np.sum(np.any(b["y"] != 0, axis=1))))
  return {"computed": int(b["src"].size + b["y"].size), "real": real, "pairs": pairs}


def padding(p: Preset, data_dir: str = "") -> dict:
  """{arm: padding share of computed tokens, and per step: computed and real tokens,
  pairs} over train steps 0 .. pad_steps - 1."""
  from data import pipeline
  out = {}
  for arm in ARMS:
    task = pipeline.create(config(arm, p, data_dir))
    n = [batch_counts(task.train_batch(s)) for s in range(p.pad_steps)]
    tot = {k: sum(x[k] for x in n) for k in n[0]}
    out[arm] = {"padding": 1 - tot["real"] / tot["computed"], "steps": p.pad_steps,
                **{f"{k}_per_step": tot[k] / p.pad_steps for k in tot}}
  return out


def _arm(c, n: int):
  """studies.bench.train.Bare over the arm's first n batches, every batch shape
  compiled; and the real tokens of each batch."""
  from studies.bench.train import Bare
  b = Bare(c, n)
  with b._ctx():
    seen = {jax.tree.map(lambda x: x.shape, b.batches[0])["y"]}
    for x in b.batches:
      if x["y"].shape not in seen:         # a bucket's first step compiles it
        seen.add(x["y"].shape)
        b.step(x)
    jax.block_until_ready(b.step.leaves)
  real = [batch_counts({k: np.asarray(v) for k, v in x.items()})["real"]
          for x in b.batches]
  return b, real


def throughput(p: Preset, data_dir: str = "") -> dict:
  """Real tokens per CPU-second of each arm's training steps, interleaved step by step
  (module docstring); per round ratios packed / bucketed, their median and interval."""
  arms = {a: _arm(config(a, p, data_dir), p.time_steps) for a in ARMS}
  cpu = {a: [] for a in ARMS}
  wall = {a: [] for a in ARMS}
  for i in range(p.time_steps):
    for a, (b, _) in arms.items():
      with b._ctx():
        c, t = time.process_time(), time.perf_counter()
        b.step(b.batches[i])
        jax.block_until_ready(b.step.leaves)
        wall[a].append(time.perf_counter() - t)
        cpu[a].append(time.process_time() - c)
  k = p.time_steps // p.rounds
  rate = lambda a, r: (sum(arms[a][1][r * k:(r + 1) * k])
                       / sum(cpu[a][r * k:(r + 1) * k]))
  ratios = [rate("packed", r) / rate("bucketed", r) for r in range(p.rounds)]
  lo, hi, cov = timing.median_interval(ratios)
  out = {a: {"real_tokens_per_cpu_s": sum(arms[a][1]) / sum(cpu[a]),
             "cpu_s_per_step": float(np.mean(cpu[a])),
             "wall_s_per_step": float(np.mean(wall[a])),
             "real_tokens_per_step": float(np.mean(arms[a][1]))} for a in ARMS}
  out["ratio"] = {"median": float(np.median(ratios)), "lo": lo, "hi": hi,
                  "coverage": cov, "per_round": ratios, "steps": p.time_steps,
                  "rounds": p.rounds}
  return out


def bleu_run(arm: str, seed: int, p: Preset, workdir: str, data_dir: str = "") -> dict:
  """One short training of `arm` (module docstring) and its test BLEU."""
  import trainer
  from trainer import evaluate
  c = config(arm, p, data_dir, seed)
  c.num_train_steps = p.bleu_steps
  c.warmup_steps = max(1, round(p.bleu_steps * 300 / 1600))   # the preset's share
  c.eval_every = c.checkpoint_every = p.bleu_steps
  c.log_every = min(c.log_every, p.bleu_steps)
  c.bleu_sentences = 64        # the end of training's validation BLEU: one batch (the
                               # test BLEU below is the figure)
  c0, t0 = time.process_time(), time.perf_counter()
  last = trainer.train_and_evaluate(c, workdir)
  train_cpu, train_wall = time.process_time() - c0, time.perf_counter() - t0
  res = evaluate.evaluate_workdir(workdir, eval_batches=p.bleu_batches)
  return {"arm": arm, "seed": seed, "steps": p.bleu_steps, "test_bleu": res["bleu"],
          "test_sentences": res["eval_sequences"], "test_loss": res["eval_loss"],
          "val_bleu": last.get("bleu"), "train_loss": last.get("train_loss"),
          "train_cpu_s": train_cpu, "train_wall_s": train_wall}


def bleu_summary(runs: list[dict]) -> dict:
  """{arm: {"bleu": [per seed], "mean", "sd" (n-1; nan for one seed)}} and whether the
  packed mean lies within the bucketed seeds' range widened by 2 standard errors of
  the difference ("unresolved" without two seeds of each)."""
  out = {}
  for a in ARMS:
    xs = [r["test_bleu"] for r in runs if r["arm"] == a]
    out[a] = {"bleu": xs, "mean": float(np.mean(xs)) if xs else math.nan,
              "sd": float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan}
  b, pk = out["bucketed"], out["packed"]
  if len(b["bleu"]) > 1 and pk["bleu"]:
    out["packed_within_bucketed_range"] = bool(min(b["bleu"]) <= pk["mean"]
                                               <= max(b["bleu"]))
  if len(b["bleu"]) > 1 and len(pk["bleu"]) > 1:
    se = math.sqrt(b["sd"] ** 2 / len(b["bleu"]) + pk["sd"] ** 2 / len(pk["bleu"]))
    d = pk["mean"] - b["mean"]
    out["difference"] = {"packed_minus_bucketed": d, "se": se,
                         "verdict": ("packed lower" if d < -2 * se else "packed higher"
                                     if d > 2 * se else "no difference resolved")}
  elif b["bleu"] and pk["bleu"]:
    if len(b["bleu"]) > 1:
      inside = min(b["bleu"]) <= pk["mean"] <= max(b["bleu"])
      verdict = (f"{'within' if inside else 'outside'} the bucketed seeds' range "
                 "(one packed seed: no standard error of the difference)")
    else:
      verdict = "unresolved: one seed per arm, no seed spread to compare with"
    out["difference"] = {"packed_minus_bucketed": pk["mean"] - b["mean"], "se": math.nan,
                         "verdict": verdict}
  return out


def page(d: dict) -> list[str]:
  """results/packing/README.md from the JSON alone."""
  L = ["# Packed Multi30k batches against length-bucketed ones", "",
       protocol.other_line("packing"), "",
       "Packing (`config.packing`, data.pipeline.Packer, data/packing.py) lays several "
       "sentence pairs end to end in each 64 + 64-token row, with segment ids that keep "
       "every attention within its pair and positions that restart per pair; the "
       "bucketed batches (configs/multi30k.py:cpu) cut 64 pairs to the smallest of "
       "`length_buckets` (16, 24, 32, 48, 64) that holds them. Packed: :cpu_packed, 16 "
       "rows per step. Method: studies/mechanisms/packing.py.", ""]
  pad = d.get("padding")
  if pad:
    L += ["## Padding", "", *pages.table(
        ["batches", "padding share of computed tokens", "computed tokens / step",
         "real tokens / step", "pairs / step"],
        [[a, f"{pad[a]['padding']:.1%}", f"{pad[a]['computed_per_step']:.0f}",
          f"{pad[a]['real_per_step']:.0f}", f"{pad[a]['pairs_per_step']:.1f}"]
         for a in ARMS]), "", pages.header(pad["run"]),
        f"Over the first {pad['packed']['steps']} train steps of each. Target: at most "
        f"{PAD_TARGET:.0%} packed: " + ("met" if pad["packed"]["padding"] <= PAD_TARGET
                                        else "not met") + ".", ""]
  tp = d.get("throughput")
  if tp:
    r = tp["ratio"]
    L += ["## Real tokens per CPU-second of training steps", "", *pages.table(
        ["batches", "real tokens / CPU-s", "CPU s / step", "wall s / step",
         "real tokens / step"],
        [[a, f"{tp[a]['real_tokens_per_cpu_s']:.0f}", f"{tp[a]['cpu_s_per_step']:.3f}",
          f"{tp[a]['wall_s_per_step']:.3f}", f"{tp[a]['real_tokens_per_step']:.0f}"]
         for a in ARMS]), "", pages.header(tp["run"]),
        f"Packed / bucketed: median {r['median']:.2f}x over {r['rounds']} rounds of "
        f"{r['steps'] // r['rounds']} steps each (95% interval of the median "
        f"{r['lo']:.2f}..{r['hi']:.2f}x, coverage {r['coverage']:.0%}; per round: "
        + ", ".join(f"{x:.2f}" for x in r["per_round"]) + f"). Target: at least "
        f"{SPEED_TARGET}x: " + ("met" if r["lo"] >= SPEED_TARGET else "met by the median, "
                                 "not by the whole interval" if r["median"] >= SPEED_TARGET
                                 else "not met") + ". The steps of both arms ran "
        "interleaved in one process and are timed by its CPU time (the machine is shared)."]
    if pad:
      bound = (1 - pad["packed"]["padding"]) / (1 - pad["bucketed"]["padding"])
      L += ["", f"Removing the padding alone would give {bound:.2f}x (the real share of "
            "the computed tokens, packed over bucketed). A packed step runs every "
            "attention at the full 64 columns with a segment mask where a bucketed one "
            "runs it at its bucket's width, and the optimizer's update costs the same "
            "per step in both while a packed step holds "
            f"{pad['packed']['real_per_step'] / pad['bucketed']['real_per_step']:.0%} of "
            "a bucketed one's real tokens."]
    L += [""]
  bl = d.get("bleu")
  if bl and bl.get("runs"):
    s = bleu_summary(bl["runs"])
    L += ["## Test BLEU of short trainings", "", *pages.table(
        ["batches", "seed", "steps", "test BLEU", "test sentences", "test loss",
         "train CPU s"],
        [[r["arm"], r["seed"], r["steps"], f"{r['test_bleu']:.2f}", r["test_sentences"],
          f"{r['test_loss']:.3f}", f"{r['train_cpu_s']:.0f}"] for r in bl["runs"]]), "",
        pages.header(bl["run"]), ""]
    diff = s.get("difference")
    txt = ", ".join(f"{a}: mean {s[a]['mean']:.2f} over {len(s[a]['bleu'])} seed(s)"
                    for a in ARMS if s[a]["bleu"])
    loss = {a: np.mean([r["test_loss"] for r in bl["runs"] if r["arm"] == a])
            for a in ARMS if s[a]["bleu"]}
    rng = ""
    if "packed_within_bucketed_range" in s:
      rng = (f" The packed mean lies {'within' if s['packed_within_bucketed_range'] else 'outside'}"
             f" the bucketed seeds' range, {min(s['bucketed']['bleu']):.2f}.."
             f"{max(s['bucketed']['bleu']):.2f}.")
    L += [f"{txt}." + (f" Packed minus bucketed: {diff['packed_minus_bucketed']:+.2f} "
                       f"BLEU (two standard errors decide); {diff['verdict']}." if diff
                       else "") + rng
          + (f" Mean test loss (nats per target token, teacher-forced; less noisy than "
             f"BLEU this early): bucketed {loss['bucketed']:.3f}, packed "
             f"{loss['packed']:.3f}." if len(loss) == 2 else "")
          + " Train CPU s counts the whole training call, compilation included (the "
          "bucketed arm compiles one step per bucket).",
          "", f"Each run trains {bl['runs'][0]['steps']} steps, the cpu preset's model "
          "and peak learning rate with its warmup share, then scores the first "
          f"{bl['runs'][0]['test_sentences']} sentences of the test split (beam 4). The "
          "cpu preset trains 1600 steps; on the shared machine of this run a step took "
          + ", ".join(f"{r['train_wall_s'] / r['steps']:.1f}" for r in bl["runs"])
          + " s of wall time (training, per run), so the budget allowed short "
          "trainings only, and BLEU this early is far below the preset's: the "
          "comparison says whether packing changes what the first steps learn, not the "
          "converged score.", ""]
  return L
