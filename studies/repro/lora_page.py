"""results/lora_mnist/README.md: the page of the LoRA study (`studies.repro.lora`),
its plots, and what of the seed report each table reproduces.
"""
from __future__ import annotations

import os

import numpy as np

from data import shifts
from studies.core import pages, plots, protocol
from studies.repro.lora import LR_FIELD, METHODS, REPORT, SHIFTS

METHOD_NAMES = {"full_ft": "full fine-tuning", "lora_ft": "LoRA fine-tuning",
                "lora_scratch": "LoRA from scratch"}


def _pm(accs):
  a = 100 * np.asarray(accs)
  return f"{a.mean():.2f} ± {a.std():.2f}"


def _runs(res, kind):
  return {(r["shift"], r["rank"]): r for r in res["runs"] if r["kind"] == kind}


def plot_ranks(res, path):
  plt = plots.pyplot()
  ft, sc, full = _runs(res, "lora_ft"), _runs(res, "lora_scratch"), _runs(res, "full_ft")
  ranks = sorted({r for _, r in ft})
  fig, axes = plt.subplots(1, 3, figsize=(10, 3.8), sharey=True)
  for j, (ax, name) in enumerate(zip(axes, SHIFTS)):
    for runs, rep, label, c in ((ft, REPORT["lora_ft"], "LoRA fine-tuning", "C0"),
                                (sc, REPORT["lora_scratch"], "LoRA from scratch", "C1")):
      a = np.array([100 * np.asarray(runs[(name, r)]["acc"]) for r in ranks])
      ax.errorbar(ranks, a.mean(1), yerr=a.std(1), marker="o", ms=3, color=c,
                  capsize=2, label=f"{label} (ours)")
      ax.plot(ranks, [rep[r][j] for r in ranks], "x--", color=c, alpha=0.6,
              label=f"{label} (report)")
    ax.axhline(100 * np.mean(full[(name, 0)]["acc"]), color="k", lw=1,
               label="full fine-tuning (ours)")
    ax.axhline(REPORT["full_ft"][name], color="k", ls=":", lw=1,
               label="full fine-tuning (report)")
    ax.axhline(100 * np.mean(res["calibration"][name]["base_acc"]), color="gray",
               lw=1, ls="-.", label="base, no tuning")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.set_title(f"{name} MNIST", fontsize=10)
    ax.set_xlabel("rank r")
    ax.grid(alpha=0.3)
  axes[0].set_ylabel("test accuracy (%)")
  h, l = axes[0].get_legend_handles_labels()
  fig.legend(h, l, loc="lower center", ncol=4, fontsize=7, frameon=False)
  fig.tight_layout(rect=(0, 0.14, 1, 1))
  plots.save(fig, path, dpi=80)


def plot_calibration(res, path):
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), sharey=True)
  for ax, name in zip(axes, SHIFTS):
    c = res["calibration"][name]
    ax.plot(c["grid"], 100 * np.asarray(c["curve"]), ".-", ms=3)
    ax.axhline(100 * c["target"], color="C3", ls="--", lw=1, label="report's base acc.")
    ax.axvline(c["param"], color="k", lw=1, label=f"chosen {c['param']:.3f}")
    ax.set_xlabel(f"{name}: {c['param_name']}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
  axes[0].set_ylabel("base accuracy (%)")
  fig.tight_layout()
  plots.save(fig, path, dpi=80)


def plot_shifts(res, x_test_N28, path):
  plt = plots.pyplot()
  imgs = x_test_N28[:4]
  rows = [("MNIST", imgs.astype(np.float32) / 255)] + [
      (n, shifts.apply(n, imgs, res["calibration"][n]["param"])) for n in SHIFTS]
  fig, axes = plt.subplots(len(imgs), len(rows), figsize=(len(rows) * 1.1, len(imgs) * 1.1))
  for j, (n, x) in enumerate(rows):
    for i in range(len(imgs)):
      axes[i, j].imshow(x[i], cmap="gray", vmin=0, vmax=1)
      axes[i, j].axis("off")
    axes[0, j].set_title(n, fontsize=8)
  fig.tight_layout()
  plots.save(fig, path, dpi=80)


def agreement(cells, seeds) -> str:
  """What of the report a table reproduces: cells [(label, our accuracies per seed in
  [0, 1], the report's %)]; a cell agrees when the report's figure lies within two
  standard deviations of our seeds' mean, or within 1 point."""
  ok, worst = [], None
  for label, accs, rep in cells:
    a = 100 * np.asarray(accs)
    d = a.mean() - rep
    if abs(d) <= max(2 * a.std(), 1.0):
      ok.append(label)
    if worst is None or abs(d) > abs(worst[3]):
      worst = (label, a.mean(), rep, d)
  return (f"**Reproduced in {len(ok)} of {len(cells)} cells** (the report's figure within "
          f"two standard deviations of our {seeds} seeds' mean, or within 1 point)"
          + (f": {', '.join(ok)}" if ok else "") + f". The largest difference: "
          f"{worst[0]}, ours {worst[1]:.2f} against the report's {worst[2]:.2f} "
          f"({worst[3]:+.1f} points).")


def tuning_lines(P, tuning) -> list[str]:
  """How the fine-tuning learning rates were chosen, from tuning.json (the `tune` run)."""
  lrs = {k: P[LR_FIELD[k]] for k in METHODS}
  if not tuning:
    return [f"- Fine-tuning learning rates: " + ", ".join(
        f"{METHOD_NAMES[k]} {v:g}" for k, v in lrs.items()) + "; no tuning record "
            "(tuning.json) beside this page: they were not chosen by `tune`."]
  same = all(abs(tuning["chosen"][k] - lrs[k]) < 1e-12 for k in METHODS)
  grid = ", ".join(f"{x:g}" for x in tuning["grid"])
  lines = [f"- Fine-tuning learning rates, one procedure for every method "
           f"(`{tuning['run']['command']}`, {tuning['run']['date']}, `tuning.json`): "
           "on held-out training images (the base models trained on the first 50k, the "
           "shifts calibrated and every method judged on the last 10k, never on the "
           f"test set), each method trained at every lr of {{{grid}}} on every shift "
           "(and rank); the lr with the highest mean held-out accuracy is chosen. Mean "
           "held-out accuracy (%) per lr:", "",
           "  | method | " + " | ".join(f"{x:g}" for x in tuning["grid"]) + " | chosen |",
           "  |---|" + "---|" * (len(tuning["grid"]) + 1)]
  for k in METHODS:
    sc = tuning["scores"][k]
    lines.append(f"  | {METHOD_NAMES[k]} | " + " | ".join(
        f"{100 * sc[str(x)]:.2f}" for x in tuning["grid"]) + f" | {tuning['chosen'][k]:g} |")
  edge = [METHOD_NAMES[k] for k in METHODS
          if tuning["chosen"][k] in (min(tuning["grid"]), max(tuning["grid"]))]
  if edge:
    lines += ["", f"  The choice of {', '.join(edge)} is at the edge of the grid: an lr "
              "beyond it was not tried, so its best may lie further out."]
  lines += ["", "  This run used " + ", ".join(f"{METHOD_NAMES[k]} {v:g}"
                                             for k, v in lrs.items())
            + ("." if same else ": **not** the tuned choices above.")]
  return lines


def mlp_section(res, tuning=None) -> str:
  P = res["preset"]
  cal, ft, sc = res["calibration"], _runs(res, "lora_ft"), _runs(res, "lora_scratch")
  full = _runs(res, "full_ft")
  base = res["runs"][0]
  ranks = sorted({r for _, r in ft})
  lines = [
      "## The report's study: MLP 784-64-64-10 on shifted MNIST",
      "",
      f"Base model: {res['params']:,} parameters, {P['base_epochs']} epoch(s) of Adam "
      f"(lr {P['lr']}, batch {P['batch']}) on {P['n_train']:,} MNIST training images. "
      f"Test accuracy on {P['n_test']:,} clean test images: **{_pm(base['acc'])}%** "
      f"(report: about {REPORT['base_clean']}%). Every cell is mean ± std over "
      f"{P['seeds']} seeds (each seed trains its own base model, adapters and data order).",
      "",
      "### Calibrated shifts",
      "",
      "The report gives the base model's accuracy on each shifted test set but not the "
      "transforms. Each shift in `data/shifts.py` has one strength parameter, chosen so "
      "that the base models' mean accuracy equals the report's: the first crossing on a "
      f"{P['grid']}-point grid (mildest shift first), refined by bisection "
      "(`calibration.png`).",
      "",
      "| shift | transform | parameter | base accuracy (ours) | report |",
      "|---|---|---|---|---|"]
  what = {"quantized": "1-bit: pixel > threshold",
          "rotated": "rotation about the centre, bilinear",
          "inverted": "x → (1−s)·x + s·(1−x)"}
  for n in SHIFTS:
    c = cal[n]
    miss = "" if c["reached"] else " (target not reached on the grid: closest)"
    lines.append(f"| {n} | {what[n]} | {c['param_name']} = {c['param']:.3f}{miss} | "
                 f"{_pm(c['base_acc'])} | {REPORT['base'][n]:.2f} |")
  lines += ["", "![the shifts](shifts.png) ![calibration](calibration.png)", "",
            "### Fine-tuning (test accuracy %, ours | report)", "",
            "The base rows match the report by construction (the calibration above). "
            + agreement([(f"full fine-tuning on {n}", full[(n, 0)]["acc"],
                          REPORT["full_ft"][n]) for n in SHIFTS]
                        + [(f"r={r} on {n}", ft[(n, r)]["acc"], REPORT["lora_ft"][r][j])
                           for r in ranks for j, n in enumerate(SHIFTS)], P["seeds"]), "",
            "| method | r | trainable | " + " | ".join(SHIFTS) + " |",
            "|---|---|---|---|---|---|",
            "| base, no tuning | – | 0 | " + " | ".join(
                f"{_pm(cal[n]['base_acc'])} \\| {REPORT['base'][n]:.2f}" for n in SHIFTS)
            + " |",
            f"| full fine-tuning | – | {res['params']:,} | " + " | ".join(
                f"{_pm(full[(n, 0)]['acc'])} \\| {REPORT['full_ft'][n]:.2f}"
                for n in SHIFTS) + " |"]
  for r in ranks:
    lines.append(f"| LoRA fine-tuning | {r} | {ft[(SHIFTS[0], r)]['trainable']:,} | "
                 + " | ".join(f"{_pm(ft[(n, r)]['acc'])} \\| "
                              f"{REPORT['lora_ft'][r][j]:.2f}"
                              for j, n in enumerate(SHIFTS)) + " |")
  lines += ["", "### LoRA from scratch (frozen random base + adapters; test accuracy %, "
            "ours | report)", "",
            agreement([(f"r={r} on {n}", sc[(n, r)]["acc"], REPORT["lora_scratch"][r][j])
                       for r in ranks for j, n in enumerate(SHIFTS)], P["seeds"]), "",
            "| r | trainable | " + " | ".join(SHIFTS) + " |", "|---|---|---|---|---|"]
  for r in ranks:
    lines.append(f"| {r} | {sc[(SHIFTS[0], r)]['trainable']:,} | "
                 + " | ".join(f"{_pm(sc[(n, r)]['acc'])} \\| "
                              f"{REPORT['lora_scratch'][r][j]:.2f}"
                              for j, n in enumerate(SHIFTS)) + " |")
  start = max(abs(np.asarray(ft[k]["acc_start"]) -
                  np.asarray(cal[k[0]]["base_acc"])).max() for k in ft)
  secs = {k: sum(r["seconds"] for r in res["runs"] if r["kind"] == k)
          for k in ("base", "full_ft", "lora_ft", "lora_scratch")}
  lines += ["", "![accuracy vs rank](accuracy_vs_rank.png)", "", reading(res), "",
            "### Training settings", "",
            f"- Epochs: base {P['base_epochs']}; full fine-tuning and LoRA fine-tuning "
            f"{P['ft_epochs']} on the shifted training set; LoRA from scratch "
            f"{P['scratch_epochs']} (the base model's budget). Adam, batch "
            f"{P['batch']}, cross-entropy, linear warmup over 10% of the steps then "
            "cosine decay. The report states none of these. The base model's peak lr "
            f"({P['lr']:g}) was chosen so that it lands at the report's 93.2%."]
  lines += tuning_lines(P, tuning)
  lines += [
            f"- LoRA: `models.lora.apply_lora` (nnx.LoRALinear) on all three layers, "
            f"A ~ N(0, 1/fan_in), B = 0, update scaled by alpha/r with alpha = "
            f"{P['lora_alpha']:g}; biases frozen, so r · 1050 values train. LoRA "
            "fine-tuning starts exactly at the base model: before the first step, the "
            "adapted models' test accuracy differs from the base models' by at most "
            f"{100 * start:g} points over all {len(ft)} configurations.",
            f"- Wall time of this run: {res['seconds'] / 60:.1f} min in total (base "
            f"{secs['base']:.0f} s, full fine-tuning {secs['full_ft']:.0f} s, LoRA "
            f"fine-tuning {secs['lora_ft']:.0f} s, LoRA from scratch "
            f"{secs['lora_scratch']:.0f} s, calibration the rest), all seeds of a "
            "configuration trained at once (vmap).",
            ""]
  return "\n".join(lines)


def reading(res) -> str:
  """What the tables say, with every figure taken from `res`."""
  cal, ft, sc = res["calibration"], _runs(res, "lora_ft"), _runs(res, "lora_scratch")
  full = {n: np.mean(_runs(res, "full_ft")[(n, 0)]["acc"]) for n in SHIFTS}
  ranks = sorted({r for _, r in ft})
  clean = np.mean(res["runs"][0]["acc"])

  def first_rank(runs, n, frac):
    ok = [r for r in ranks if np.mean(runs[(n, r)]["acc"]) >= frac * full[n]]
    return f"r = {ok[0]}" if ok else f"no r ≤ {ranks[-1]}"

  fails = [(n, r, a) for (n, r), run in ft.items() for a in run["acc"] if a < 0.2]
  text = ["### Reading the tables", "",
          "- Rank needed to reach 95% of full fine-tuning's accuracy: "
          + "; ".join(f"{n}: LoRA fine-tuning {first_rank(ft, n, 0.95)}, from scratch "
                      f"{first_rank(sc, n, 0.95)}" for n in SHIFTS) + ".",
          f"- Quantized: the calibrated 1-bit threshold ({cal['quantized']['param']:.3f}) "
          "keeps only the brightest stroke cores, so information is lost: full "
          f"fine-tuning reaches {100 * full['quantized']:.2f}%, below the clean "
          f"{100 * clean:.2f}% (the report's fine-tuning recovered it, so its quantizer "
          "was probably milder; it is not stated)."]
  if fails:
    text.append(
        f"- {len(fails)} of {sum(len(run['acc']) for run in ft.values())} LoRA "
        "fine-tuning runs ended below 20% test accuracy (" + ", ".join(
            f"{n} r={r}: {100 * a:.1f}%" for n, r, a in fails) + "), the level of "
        "predicting one class for every image; these seeds make the large std cells. "
        "Our reading, not checked unit by unit: with the base and its biases frozen, "
        "the adapters cannot bring back first-layer ReLUs that a large early step "
        "silenced on the shifted inputs.")
  return "\n".join(text)


def write_page(out):
  """README.md of `out` from its mlp.json (with tuning.json, and pixel.json if that
  study ran)."""
  res = pages.read_json(os.path.join(out, "mlp.json"))
  head = [
      "# LoRA on MNIST: the seed report's study, redone",
      "",
      protocol.other_line("lora_mnist"),
      "",
      pages.header(res["run"]) + " Every number below comes from that run (`mlp.json` "
      "holds each seed's), except the learning-rate choice, from the tuning run it names."
      + (" **Held-out run: 'test' accuracies are on the last 10k training images.**"
         if res.get("holdout") else ""),
      "",
      "Each table says which of its cells reproduce the report's; the shift strengths "
      "are calibrated to the report's base accuracies, so those match by construction.",
      ""]
  body = [mlp_section(res, pages.read_json(os.path.join(out, "tuning.json")))]
  pix = pages.read_json(os.path.join(out, "pixel.json"))
  if pix:
    body.append(pixel_section(pix))
  pages.write_text(os.path.join(out, "README.md"), "\n".join(head + body))


def write_mlp(res, out, x_test_N28) -> None:
  """mlp.json, its plots and the page (x_test: the test images the shifts are drawn on)."""
  pages.write_json(os.path.join(out, "mlp.json"), res)
  plot_ranks(res, os.path.join(out, "accuracy_vs_rank.png"))
  plot_calibration(res, os.path.join(out, "calibration.png"))
  plot_shifts(res, x_test_N28, os.path.join(out, "shifts.png"))
  write_page(out)


def write_pixel(res, out) -> None:
  """pixel.json, its plot, and the page if the MLP study is there too."""
  pages.write_json(os.path.join(out, "pixel.json"), res)
  plot_pixel(res, os.path.join(out, "pixel_curves.png"))
  if os.path.exists(os.path.join(out, "mlp.json")):
    write_page(out)


def plot_pixel(res, path):
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(4.5, 3))
  for name, label in (("full_ft", "full fine-tuning"),
                      ("lora", f"LoRA r={res['preset']['rank']} on q,k,v,o")):
    s, l = zip(*res[name]["curve"])
    ax.plot(s, np.asarray(l) / np.log(2), ".-", ms=3, label=label)
  ax.axhline(res["base"]["inverted"], color="gray", ls="--", lw=1, label="base, no tuning")
  ax.set_xlabel("fine-tuning step")
  ax.set_ylabel("train bits/dim (Inverted MNIST)")
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  plots.save(fig, path, dpi=80)


def pixel_section(res) -> str:
  m, c, b = res["model"], res["config"], res["base"]
  full, lora = res["full_ft"], res["lora"]
  rows = []
  for name, r in (("full fine-tuning", full),
                  (f"LoRA r={res['preset']['rank']} on q, k, v, o", lora)):
    rows.append(f"| {name} | {r['trainable']:,} / {r['params']:,} "
                f"({100 * r['trainable'] / r['params']:.2f}%) | {b['inverted']:.4f} | "
                f"**{r['inverted']:.4f}** | {r['clean']:.4f} | {r['steps']} | "
                f"{r['seconds']:.0f} s ({r['steps_per_s']:.2f} steps/s) |")
  return "\n".join([
      "",
      "## Beyond the report: LoRA on the pixel Transformer (Inverted MNIST)",
      "",
      f"The image-completion model of `configs/mnist.py` ({m['attention']} attention, "
      f"{m['num_layers']} layers, d_model {m['d_model']}, {m['num_heads']} heads, d_ff "
      f"{m['d_ff']}, {m['head']} head, {c['image_size']}×{c['image_size']} pixels), trained "
      f"by `train.py` on plain MNIST for {b['steps']} steps (batch {c['batch_size']}, "
      f"{c['optimizer']}, lr {c['base_lr']}; "
      + ("reused from an earlier run of the script" if b.get("reused") else
         f"{b['seconds']:.0f} s") + "), then adapted to "
      f"Inverted MNIST (the full negative, `--config.shift=inverted`) for "
      f"{full['steps']} steps each (same schedule; peak lr {res['preset']['ft_lr']} for "
      f"full fine-tuning, {res['preset']['lora_lr']} for the adapters): full "
      "fine-tuning (`--config.init_from`) against LoRA on the attention projections "
      f"(`--config.lora.rank={res['preset']['rank']} --config.lora.targets=q,k,v,o "
      "--config.lora.base_workdir`). Test bits/dim on the first "
      f"{c['eval_images']:,} test images. Base model on clean MNIST: {b['clean']:.4f} "
      "bits/dim.",
      "",
      "| fine-tuning | trainable / total params | bits/dim before (inverted) | after "
      "(inverted) | after, on clean MNIST | steps | wall time |",
      "|---|---|---|---|---|---|---|",
      *rows,
      "",
      "LoRA leaves the base weights untouched: removing the adapters gives back the base "
      f"model's {b['clean']:.4f} bits/dim on clean MNIST exactly, while full fine-tuning "
      "overwrites it (the column 'after, on clean MNIST').",
      "",
      "![fine-tuning curves](pixel_curves.png)",
      ""])


