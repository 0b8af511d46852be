"""The positions study (results/positions/README.md): length extrapolation on Tiny
Shakespeare, the MNIST demo model under three position schemes, and RoPE's cost.

  extrapolation  Press et al. 2022, Figure 1, at CPU scale: a character LM
            (configs/shakespeare.py at the preset's sizes) trained on windows of L
            characters, model.max_len = L, then evaluated (`trainer.evaluate.
            evaluate_lengths`) on the validation split cut into non-overlapping
            windows of L, 2L, 4L and 8L, for each scheme x {softmax, linear}. Learned
            positions have no vector past L (ModelConfig.check_length refuses it):
            they are evaluated at L only, and the page says so. The figure: loss
            (bits/char) against the evaluation length, one line per scheme, one panel
            per variant; the table: every loss and the ratio loss(4L) / loss(L).
  images    configs/mnist_demo.py (the demo's 14x14 linear-attention pixel model)
            under model.positions = sinusoidal, learned and rope2d, trained with the
            same steps and seed: test bits/dim (± one standard error, from the spread
            of the per-batch means of equal batches of test images) and the
            completion figures of `trainer.evaluate.completion_metric`, judged by
            trainer/digit_judge.py with the verdict of `studies.core.completion`.
  rope cost `studies.bench.rope_cost` (its own script; the page states its JSON).

Each part stores its figures with its run record in results/positions/<part>.json;
`write_page` writes the page from the JSON alone (scripts/positions.py --page_only).
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time

import numpy as np

from studies.bench import rope_cost
from studies.core import completion, pages, plots, protocol

SCHEMES = ("sinusoidal", "learned", "rope", "alibi", "none")
VARIANTS = ("softmax", "linear")
IMAGE_SCHEMES = ("sinusoidal", "learned", "rope2d")
FACTORS = (1, 2, 4, 8)
ALIBI_TARGET = 0.02          # issue 39: ALiBi's loss at 4L within 2% of its loss at L


@dataclasses.dataclass(frozen=True)
class Preset:
  L: int                   # training context (characters)
  lm: dict                 # configs/shakespeare.py model overrides
  lm_batch: int
  lm_steps: int
  lm_lr: float
  lm_eval_batches: int     # validation batches per length (0: the whole split)
  mnist_steps: int         # steps of each MNIST run (the demo's budget is 800)
  mnist_overrides: dict    # configs/mnist_demo.py overrides (smoke: tiny model)
  bits_batches: int        # test batches of bits_batch images for bits/dim
  bits_batch: int
  completion_images: int
  what: str


PRESETS = {
    "smoke": Preset(8, dict(d_model=16, num_heads=2, d_ff=32, num_layers=1), 4, 3, 3e-3,
                    2, 2, dict(image_size=4, **{"model.d_model": 16, "model.d_ff": 32,
                                                "model.num_layers": 1,
                                                "model.max_len": 16}),
                    2, 4, 0, "tiny shapes: a test of the study, not a measurement"),
    "full": Preset(64, dict(d_model=64, num_heads=4, d_ff=256, num_layers=2), 32, 400,
                   3e-3, 0, 400, {}, 50, 100, 500,
                   "LM: d_model 64, 4 heads, 2 layers, L = 64, 400 steps of batch 32; "
                   "MNIST: configs/mnist_demo.py at 400 steps (half the demo's 800), "
                   "bits/dim on 5000 test images, completions of 500"),
}


def _set(c, dotted: str, v):
  *path, leaf = dotted.split(".")
  for p in path:
    c = c[p]
  if leaf not in c:
    raise KeyError(f"override {dotted!r}: no such config field")
  c[leaf] = v


# ---- length extrapolation -------------------------------------------------------------

def lm_config(p: Preset, scheme: str, variant: str, data_dir: str = "", seed: int = 0):
  """configs/shakespeare.py at the preset's sizes, trained at L = max_len."""
  from configs import shakespeare
  c = shakespeare.get_config()
  c.model.update(p.lm)
  c.model.update(positions=scheme, attention=variant, max_len=p.L, dropout=0.0)
  c.update(dict(seq_len=p.L, batch_size=p.lm_batch, num_train_steps=p.lm_steps,
                learning_rate=p.lm_lr, warmup_steps=min(50, p.lm_steps),
                eval_every=p.lm_steps, checkpoint_every=p.lm_steps,
                log_every=min(50, p.lm_steps), eval_batches=max(p.lm_eval_batches, 1),
                progress=False, data_dir=data_dir, seed=seed,
                test_fraction=0.0))    # trained on all the training text, as its page
  return c


def reachable(mcfg, T: int) -> bool:
  """Whether the model can run on T positions (ModelConfig.check_length)."""
  from models import ConfigError
  try:
    mcfg.check_length(T)
    return True
  except ConfigError:
    return False


def extrapolation_run(p: Preset, scheme: str, variant: str, root: str, data_dir: str,
                      seed: int = 0) -> dict:
  """Trains one (scheme, variant) LM in root and evaluates it at every reachable
  length: {"loss": {T: bits/char}, "refused": [T...], "train_cpu_seconds"}."""
  import trainer
  from trainer import evaluate
  c = lm_config(p, scheme, variant, data_dir, seed)
  wd = os.path.join(root, f"lm_{variant}_{scheme}")
  shutil.rmtree(wd, ignore_errors=True)
  cpu = time.process_time()
  trainer.train_and_evaluate(c, wd)
  mcfg = trainer.validate(c)
  lengths = [f * p.L for f in FACTORS]
  ok = [T for T in lengths if reachable(mcfg, T)]
  at = evaluate.evaluate_lengths(wd, ok, eval_batches=p.lm_eval_batches,
                                 eval_batch_size=8)
  return {"scheme": scheme, "variant": variant, "seed": seed,
          "loss": {str(T): at[T]["bits_per_char"] for T in ok},
          "sequences": {str(T): at[T]["eval_sequences"] for T in ok},
          "refused": [T for T in lengths if T not in ok],
          "train_cpu_seconds": time.process_time() - cpu}


def ratio(r: dict, L: int, f: int = 4) -> float | None:
  """loss(f L) / loss(L) of one run, None where f L was not reachable."""
  hi = r["loss"].get(str(f * L))
  return None if hi is None else hi / r["loss"][str(L)]


def shape_holds(runs_: list, L: int) -> dict:
  """Press et al.'s shape on softmax: sinusoidal degrades past L (its 4L loss above its
  L loss by more than ALiBi's target), ALiBi stays flat (within ALIBI_TARGET)."""
  by = {(r["variant"], r["scheme"]): r for r in runs_}
  out = {}
  for v in VARIANTS:
    s, a = by.get((v, "sinusoidal")), by.get((v, "alibi"))
    if s is None or a is None:
      continue
    rs, ra = ratio(s, L), ratio(a, L)
    out[v] = {"sinusoidal_degrades": rs > 1 + ALIBI_TARGET, "alibi_flat":
              abs(ra - 1) <= ALIBI_TARGET, "sinusoidal_ratio": rs, "alibi_ratio": ra}
  return out


def plot_extrapolation(d: dict, path: str) -> None:
  """Loss against evaluation length, one line per scheme, a panel per variant."""
  plt = plots.pyplot()
  L = d["L"]
  fig, axs = plt.subplots(1, len(VARIANTS), figsize=(9, 3.6), sharey=True, dpi=90)
  for ax, v in zip(axs, VARIANTS):
    for r in (r for r in d["runs"] if r["variant"] == v):
      Ts = sorted(int(t) for t in r["loss"])
      ax.plot(Ts, [r["loss"][str(t)] for t in Ts], marker="o", label=r["scheme"])
    ax.axvline(L, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks([f * L for f in FACTORS], [f"{f}L" if f > 1 else "L" for f in FACTORS])
    ax.set_title(f"{v} attention, trained at L = {L}", fontsize=10)
    ax.set_xlabel("evaluation window (characters)")
    ax.grid(alpha=0.3)
  axs[0].set_ylabel("validation bits/char")
  axs[-1].legend(fontsize=8)
  fig.suptitle(f"Length extrapolation on Tiny Shakespeare ({d['run']['date']}, seed "
               f"{d['seed']}); learned: L only", fontsize=9)
  fig.tight_layout()
  plots.save(fig, path)


# ---- images ---------------------------------------------------------------------------

def mnist_config(p: Preset, scheme: str, data_dir: str = "", seed: int = 0):
  """configs/mnist_demo.py under `scheme`, for the preset's steps."""
  from configs import mnist_demo
  c = mnist_demo.get_config()
  for k, v in p.mnist_overrides.items():
    _set(c, k, v)
  c.model.positions = scheme
  s = p.mnist_steps
  c.update(dict(num_train_steps=s, eval_every=s, checkpoint_every=s,
                warmup_steps=min(int(c.warmup_steps), s), log_every=min(int(c.log_every), s),
                eval_batches=1, completion_images=0, progress=False, data_dir=data_dir,
                seed=seed))
  return c


def bits_with_se(model, task) -> tuple[float, float, int]:
  """(bits/dim, its standard error, images) over the task's eval batches (all of equal
  size): the mean of the per-batch means, and their spread / sqrt(batches)."""
  import jax
  import jax.numpy as jnp
  from trainer.step import eval_step
  model.eval()
  per = []
  for b in task.eval_batches():
    tot, wt, _, n = jax.device_get(eval_step(model, {k: jnp.asarray(v) for k, v in
                                                     b.items()}, metric=task.metric))
    per.append((float(tot) / float(wt) / math.log(2), int(n)))
  means = np.array([m for m, _ in per])
  se = float(means.std(ddof=1) / math.sqrt(len(means))) if len(means) > 1 else math.nan
  return float(means.mean()), se, sum(n for _, n in per)


def _saved_config(wd: str) -> dict | None:
  import json
  try:
    with open(os.path.join(wd, "config.json")) as f:
      return json.load(f)["config"]
  except (OSError, KeyError, ValueError):
    return None


def image_run(p: Preset, scheme: str, root: str, data_dir: str, seed: int = 0) -> dict:
  """Trains the demo model under `scheme` in root (resuming, or reusing, a run of the
  same settings there; one of other settings is set aside), then its test bits/dim
  ± se and the judged completions."""
  import jax
  from data import pipeline
  import trainer
  from studies.core import runs
  from trainer import evaluate
  c = mnist_config(p, scheme, data_dir, seed)
  wd = os.path.join(root, f"mnist_{scheme}")
  old = _saved_config(wd)
  runs.set_aside(wd, None if old is None else runs.fingerprint(old),
                 runs.fingerprint(c.to_dict()))
  cpu = time.process_time()
  trainer.train_and_evaluate(c, wd)
  train_cpu = time.process_time() - cpu
  runs.require_finished(wd, p.mnist_steps)
  config, model, step = trainer.load_model(wd)
  config.eval_batches, config.eval_batch_size = p.bits_batches, p.bits_batch
  config.completion_images = p.completion_images
  task = pipeline.create(config)
  bits, se, n = bits_with_se(model, task)
  out = {"scheme": scheme, "seed": seed, "steps": step, "bits_per_dim": bits,
         "bits_per_dim_se": se, "bits_images": n, "train_cpu_seconds": train_cpu}
  if p.completion_images:
    model.eval()
    ev = os.path.join(wd, "eval")
    os.makedirs(ev, exist_ok=True)
    out["completion"] = evaluate.completion_metric(config, task, model, ev, "cache",
                                                   jax.random.PRNGKey(seed))
  return out


def store_image_run(path: str, r: dict, run: dict, side: int) -> dict:
  """Adds (or replaces) scheme r["scheme"]'s result in the images JSON at `path`, in
  IMAGE_SCHEMES order, with this run's record; returns the stored dict."""
  d = pages.read_json(path) or {"runs": []}
  keep = {x["scheme"]: x for x in d["runs"]}
  keep[r["scheme"]] = r
  d.update(run=run, side=side, seed=r["seed"],
           runs=[keep[s] for s in IMAGE_SCHEMES if s in keep])
  pages.write_json(path, d)
  return d


def difference(a: dict, b: dict, key: str, se_key: str) -> tuple[float, float, str]:
  """(a - b, its standard error as if independent, 'a lower' | 'b lower' |
  'unresolved' by the house's two-standard-error rule)."""
  d, se = a[key] - b[key], math.hypot(a[se_key], b[se_key])
  return d, se, ("unresolved" if abs(d) <= 2 * se else "a lower" if d < 0 else "b lower")


# ---- the page -------------------------------------------------------------------------

def _f(x, digits=3):
  return "—" if x is None else f"{x:.{digits}f}"


def extrapolation_section(d: dict) -> list[str]:
  L = d["L"]
  rows = []
  for r in d["runs"]:
    cells = [_f(r["loss"].get(str(f * L))) if str(f * L) in r["loss"] else "refused"
             for f in FACTORS]
    rows.append([f"`{r['variant']}`", f"`{r['scheme']}`", *cells, _f(ratio(r, L))])
  shape = shape_holds(d["runs"], L)
  lines = [pages.header(d["run"]) + f" {d['run'].get('what', '')}.", "",
           "![loss against evaluation length](extrapolation.png)", "",
           *pages.table(["variant", "positions"] + [f"{f}L = {f * L}" if f > 1
                                                     else f"L = {L}" for f in FACTORS]
                        + ["loss(4L) / loss(L)"], rows), ""]
  for v, s in shape.items():
    lines.append(
        f"- `{v}`: sinusoidal's 4L/L ratio {s['sinusoidal_ratio']:.3f} "
        f"({'degrades' if s['sinusoidal_degrades'] else 'does not degrade'} past L), "
        f"ALiBi's {s['alibi_ratio']:.3f} ({'flat, within' if s['alibi_flat'] else 'not within'}"
        f" {100 * ALIBI_TARGET:.0f}%): the paper's shape "
        f"{'holds' if s['sinusoidal_degrades'] and s['alibi_flat'] else 'does not hold'} "
        "here.")
  if "softmax" in shape:
    ok = shape["softmax"]["alibi_flat"]
    lines += ["", f"Target (ALiBi, softmax: loss(4L) within {100 * ALIBI_TARGET:.0f}% "
              f"of loss(L)): **{'met' if ok else 'missed'}** "
              f"({shape['softmax']['alibi_ratio']:.3f})."]
  lines += ["", "Learned positions have one trained vector per position up to L and none "
            "past it: the model cannot run at 2L, 4L or 8L (`ModelConfig.check_length` "
            "refuses it), so its row has L only. One seed per cell "
            f"(seed {d['seed']}): no spread across seeds is measured, so a difference "
            "between two schemes at the same length is not resolved here; what each "
            "scheme does past L (its own ratio) is the study's point."]
  return lines


def images_section(d: dict) -> list[str]:
  by = {r["scheme"]: r for r in d["runs"]}
  rows = [[f"`{s}`", f"{r['bits_per_dim']:.4f} ± {r['bits_per_dim_se']:.4f}"]
          + ([c for c in completion.cells(r["completion"])] if "completion" in r else [])
          for s, r in by.items()]
  head = ["positions", "test bits/dim"] + (completion.HEAD if any(
      "completion" in r for r in by.values()) else [])
  from configs import mnist_demo
  full, steps = int(mnist_demo.get_config().num_train_steps), d["runs"][0]["steps"]
  budget = ("the demo's full budget" if steps == full else
            f"a smaller equal budget than the demo's {full} (what the shared 2-core "
            "machine allowed in this session): the figures compare the schemes with "
            "each other, not with the demo page's")
  lines = [pages.header(d["run"]) + f" {d['run'].get('what', '')}.", "",
           f"Each scheme trained {steps} steps with seed {d['seed']}, {budget}. Each "
           "scheme's result is stored as it comes in (`--schemes` runs a subset); the "
           "line above names the last command that stored one.", "",
           *pages.table(head, rows), ""]
  first = next((r for r in by.values() if "completion" in r), None)
  if first is not None:
    lines += [completion.method(first["completion"], d["side"]), ""]
  if "rope2d" in by and "sinusoidal" in by:
    a, b = by["rope2d"], by["sinusoidal"]
    db, sb, vb = difference(a, b, "bits_per_dim", "bits_per_dim_se")
    text = {"a lower": "rope2d lower", "b lower": "sinusoidal lower",
            "unresolved": "unresolved (within two standard errors)"}
    lines.append(f"rope2d − sinusoidal, at equal steps ({a['steps']}) and seed: bits/dim "
                 f"{db:+.4f} ± {sb:.4f}, {text[vb]}. One seed per scheme: the ± is the "
                 "spread over the test images, not over training seeds, so this reads "
                 "these two runs, not the schemes (no verdict under the protocol).")
    if "completion" in a and "completion" in b:
      ca, cb = a["completion"], b["completion"]
      dc = 100 * (ca["completion_accuracy"] - cb["completion_accuracy"])
      sc = 100 * math.hypot(ca["completion_accuracy_se"], cb["completion_accuracy_se"])
      lines.append(f"Completions read right: {dc:+.1f} ± {sc:.1f} points "
                   f"({'unresolved' if abs(dc) <= 2 * sc else 'rope2d ahead' if dc > 0 else 'sinusoidal ahead'}).")
    lines.append("The errors of a difference add the two standard errors in quadrature, "
                 "as if independent; the runs share their test images, so this is "
                 "conservative.")
  return lines


PARTS = (   # (JSON file, heading, the paragraph before the figures, section, command)
    ("extrapolation.json", "Length extrapolation (Press et al. 2022, Figure 1, at CPU scale)",
     "Press et al. train at L and evaluate at longer inputs: sinusoidal positions "
     "degrade past L, ALiBi stays flat. Here a character LM on Tiny Shakespeare, "
     "trained on windows of L characters, is evaluated on the validation split cut "
     "into non-overlapping windows of L, 2L, 4L and 8L (the loss averages every "
     "position of each window, as in the paper); the paper's models are 247M "
     "parameters on WikiText-103 at L = 512 and longer, these are tiny and short, and "
     "linear attention is not in the paper.",
     extrapolation_section, "python -m scripts.positions --part=extrapolation"),
    ("images.json", "Images: the MNIST demo model with sinusoidal, learned and 2D RoPE",
     "configs/mnist_demo.py (14×14 MNIST, linear attention, a 2-layer d_model 64 pixel "
     "model) under three position schemes, trained alike. `rope2d` rotates half of "
     "each head's pairs by the pixel's row and half by its column (the linear model "
     "takes it in RoFormer's form, in the numerator); sinusoidal and learned give a 1D "
     "raster position.",
     images_section, "python -m scripts.positions --part=images"),
    ("rope_cost.json", "What RoPE costs in a training step",
     "The issue's target: applying RoPE costs ≤ 5% of a training step at the "
     "shakespeare config (`studies/bench/rope_cost.py`).",
     rope_cost.section, "python -m scripts.rope_cost"),
)


def write_page(out: str) -> str:
  """results/positions/README.md from the JSON in `out` (parts not yet run are named)."""
  lines = ["# Positions: length extrapolation, 2D RoPE on MNIST, RoPE's cost", "",
           protocol.other_line("positions"), "",
           "How a model's position scheme (`model.positions`: sinusoidal, learned, rope, "
           "rope2d, alibi, none; docs/variants.md, *Positions*) changes what it learns. Study "
           "logic in `studies/mechanisms/positions.py` and `studies/bench/rope_cost.py`; the page is "
           "written from the JSON beside it by `python -m scripts.positions --page_only`."]
  for file, heading, intro, section, cmd in PARTS:
    d = pages.read_json(os.path.join(out, file))
    if d is not None and file == "extrapolation.json":
      plot_extrapolation(d, os.path.join(out, "extrapolation.png"))
    lines += ["", f"## {heading}", "", intro, "",
              *(section(d) if d is not None else [f"Not run yet: `{cmd}`."])]
  path = os.path.join(out, "README.md")
  pages.write_text(path, lines)
  return path
