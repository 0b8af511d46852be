"""Attention heat maps of a trained workdir, per layer and head, for every variant:
`results/attention_maps/`.

For one test input it runs the model's forward pass once with every attention layer
recording the weights it applies to its values (the model's own hook,
`models.layers.attention_weights`, which records `attention.implied_weights`: the
softmax probabilities of the exact family, φ(q)·φ(k) normalised for linear and
performer, the closed forms of retention, gla and deltanet (decayed or gated q·k, not
normalised; deltanet's signed), the window / strided pattern / LSH buckets of local,
sparse and reformer, exactly as the variant computes them):
  <out>/<layer>.png    one panel per head, queries down, keys across (a square-root
                       colour scale, so small weights stay visible)
  MNIST (pixel LM):    <out>/query_pixel.png  the weights of one query pixel over the
                       image, per layer and head, over the test image (the query is
                       the pixel marked with a box: its weights are over the pixels
                       before it, which is all a causal pixel model sees)
  Multi30k (encdec):   <out>/cross_alignment.png  the cross-attention of the greedy
                       translation of test sentence `index`: target tokens down,
                       source tokens across, per layer and head
`draw` returns what the page needs (<out>/maps.json); `write_page` writes the page from
those records and the PNGs beside it, so that it is rewritten without the workdirs.
"""
from __future__ import annotations

import os
import shutil

import jax.numpy as jnp
import numpy as np
from flax import nnx

import attention
from data import tasks
from models import layers
from studies.core import pages, plots, runs


def recorded(model, *inputs) -> list[dict]:
  """Every attention call of one forward pass model(*inputs), in call order: dicts
  (path, name, w: (H, Tq, Tk) float32 weights of batch row 0), recorded by the model
  itself (`models.layers.attention_weights`, the model's recording hook)."""
  _, maps = layers.attention_weights(lambda m, *a: m(*a), model, *inputs)
  mods = dict(nnx.iter_graph(model))
  calls = [dict(path="/".join(map(str, p)), name=mods[p].name,
                w=np.asarray(w[0], np.float32)) for p, ws in maps.items() for w in ws]
  # maps are sorted by path; an encoder runs before the decoder's blocks
  return sorted(calls, key=lambda c: not c["path"].startswith("encoder"))


def signed(w) -> bool:
  """Whether weights take both signs (deltanet's: its delta rule subtracts), beyond
  float rounding, so that they need a diverging colour scale."""
  w = np.asarray(w)
  return bool(w.min() < -1e-6 * max(float(np.abs(w).max()), 1e-30))


def colour_scale(w):
  """(cmap, norm) of one map: viridis on a square-root scale from 0 for weights >= 0;
  for signed weights a diverging map (red +, blue -) on a signed square root,
  symmetric about 0, so that a negative weight is never drawn as a small one."""
  from matplotlib.colors import FuncNorm, PowerNorm
  top = max(float(np.abs(w).max()), 1e-9)
  if not signed(w):
    return "viridis", PowerNorm(0.5, 0, top)
  f = lambda x: np.sign(x) * np.sqrt(np.abs(x))
  return "RdBu_r", FuncNorm((f, lambda y: np.sign(y) * y * y), -top, top)


def draw_heads(path, w_HQK, title, q_labels=None, k_labels=None, size=3.0):
  """One panel per head of (H, Tq, Tk) weights, sqrt colour scale (`colour_scale`: a
  diverging one for signed weights), optional tokens."""
  plt = plots.pyplot()
  H = len(w_HQK)
  fig, axs = plt.subplots(1, H, figsize=(size * H + 0.6, size + 0.7), squeeze=False,
                          dpi=80 if q_labels is None else 90)
  cmap, norm = colour_scale(w_HQK)                   # one scale for all heads
  for h, ax in enumerate(axs[0]):
    im = ax.imshow(w_HQK[h], cmap=cmap, norm=norm, interpolation="nearest",
                   aspect="auto")
    ax.set_title(f"head {h}", fontsize=9)
    if q_labels is not None:
      ax.set_yticks(range(len(q_labels)), q_labels, fontsize=6)
      ax.set_xticks(range(len(k_labels)), k_labels, fontsize=6, rotation=90)
    else:
      ax.set_xlabel("key position", fontsize=8)
      ax.tick_params(labelsize=7)
      if h == 0:
        ax.set_ylabel("query position", fontsize=8)
  fig.colorbar(im, ax=axs[0].tolist(), fraction=0.02, pad=0.01)
  fig.suptitle(title, fontsize=10)
  plots.save(fig, path)


def mnist_maps(config, model, task, out, index, query, meta):
  """Per-layer maps and the one-query-pixel overlay for test image `index`."""
  from models.transformer import shift_right
  side = task.side
  img = np.asarray(task.test_x[index])
  r, c = query if query else (side // 2, side // 2)
  if not (0 <= r < side and 0 <= c < side and r * side + c > 0):
    raise ValueError(f"--query={r},{c}: must be a pixel of the {side}x{side} image, "
                     "not the first")
  p = r * side + c                       # the query at input position p predicts pixel p
  ids = shift_right(jnp.asarray(img[None]), model.cfg.start_id)
  calls = recorded(model, ids)
  files = []
  plt = plots.pyplot()
  ws = []
  for i, call in enumerate(calls):
    w = call["w"]
    ws.append(w)
    f = f"layer{i}.png"
    draw_heads(os.path.join(out, f), w, f"{meta} — {call['name']}, layer {i} "
               f"({w.shape[1]} pixel positions; input 0 is the start token)")
    files.append(f)
  H = ws[0].shape[0]
  fig, axs = plt.subplots(len(ws), H, figsize=(2.2 * H, 2.5 * len(ws) + 0.3), squeeze=False,
                          dpi=80)
  grey = img.reshape(side, side) / 255.0
  for i, w in enumerate(ws):
    for h in range(H):
      ax = axs[i][h]
      over = np.zeros(side * side)
      over[:p] = w[h, p, 1:p + 1]          # input j + 1 holds pixel j
      ax.imshow(grey, cmap="gray_r", vmin=0, vmax=1.6)
      over = over.reshape(side, side)
      top = max(float(np.abs(over).max()), 1e-9)
      if signed(w[h, p, :p + 1]):              # deltanet: red +, blue -, 0 unpainted
        ax.imshow(np.ma.masked_where(over == 0, over), cmap="RdBu_r", alpha=0.8,
                  vmin=-top, vmax=top)
      else:
        ax.imshow(np.ma.masked_where(over <= 0, over), cmap="hot_r", alpha=0.75,
                  vmin=0, vmax=top)
      ax.contour(grey, levels=[0.35], colors="tab:blue", linewidths=0.7)   # the digit
      ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="blue", lw=1.5))
      ax.set_title(f"L{i} h{h}  start {w[h, p, 0]:.2f}", fontsize=7)
      ax.set_xticks([])
      ax.set_yticks([])
  fig.suptitle(f"{meta}: weights of query pixel ({r}, {c}) (box) over the pixels before "
               "it; digit outlined; each panel scaled to its own max"
               + (" |w| (red +, blue -)" if any(signed(w) for w in ws) else "")
               + "; 'start': the weight on the start token", fontsize=8, wrap=True)
  fig.tight_layout()
  plots.save(fig, os.path.join(out, "query_pixel.png"))
  return files + ["query_pixel.png"]


def translation_maps(config, model, task, out, index, meta):
  """Self-attention maps and the labelled cross-attention alignment of one sentence."""
  from models.generate import best_mode, translate
  from models.transformer import shift_right
  src_all = task.splits[task.eval_split][0]
  src = jnp.asarray(src_all[index:index + 1])
  hyp, _ = translate(model, src, max_len=int(config.tgt_len), beam_size=0,
                     mode=best_mode(model))
  hyp = np.asarray(hyp)[0]
  eos = model.cfg.eos_id
  n_t = int(np.argmax(hyp == eos)) + 1 if (hyp == eos).any() else len(hyp)
  n_s = int((np.asarray(src[0]) != model.cfg.pad_id).sum())
  tgt = jnp.asarray(hyp[None, :n_t])
  piece = task.sp.id_to_piece
  s_lab = [piece(int(t)) for t in np.asarray(src[0, :n_s])]
  t_lab = [piece(int(t)) for t in hyp[:n_t]]
  calls = recorded(model, src[:, :n_s], shift_right(tgt, model.cfg.bos_id))
  files = []
  cross = []
  for call in calls:
    w = call["w"]
    kind = call["path"].split("/")
    role = ("encoder self" if kind[0] == "encoder" else
            "decoder cross" if kind[-1] == "cross" else "decoder self")
    layer = kind[2]
    if role == "decoder cross":
      cross.append((layer, w))
      continue
    f = f"{role.replace(' ', '_')}_layer{layer}.png"
    lab = s_lab if role == "encoder self" else t_lab
    draw_heads(os.path.join(out, f), w, f"{meta} — {call['name']}, {role}, layer {layer}",
               lab, lab, size=3.2)
    files.append(f)
  plt = plots.pyplot()
  from matplotlib.colors import PowerNorm
  H = cross[0][1].shape[0]
  fig, axs = plt.subplots(len(cross), H, figsize=(3.1 * H, 0.2 * n_t * len(cross) + 1.8),
                          squeeze=False, dpi=90)
  for i, (layer, w) in enumerate(cross):
    for h in range(H):
      ax = axs[i][h]
      ax.imshow(w[h], cmap="viridis", norm=PowerNorm(0.5, 0, 1), aspect="auto",
                interpolation="nearest")
      ax.set_title(f"layer {layer} head {h}", fontsize=8)
      ax.set_xticks(range(n_s), s_lab, fontsize=6, rotation=90)
      ax.set_yticks(range(n_t), t_lab if h == 0 else [""] * n_t, fontsize=6)
  fig.suptitle(f"{meta}: cross-attention, German output (down) to English source "
               "(across)", fontsize=9)
  fig.tight_layout()
  plots.save(fig, os.path.join(out, "cross_alignment.png"))
  return files + ["cross_alignment.png"], {"source": task.detokenize(src_all[index]),
                                           "translation": task.detokenize(hyp),
                                           "reference": task.splits[task.eval_split][2][index]}


def published_row(workdir) -> dict | None:
  """The compare_variants row a workdir holds (workdir/result.json): its task, variant,
  config fingerprint and quality, to find it on its results page; None otherwise."""
  from studies.variants import compare as cv
  res = pages.read_json(os.path.join(workdir, "result.json"))
  if not res or res.get("status") != "ok":
    return None
  return {"task": res["task"], "variant": res["variant"], "config": res["config"],
          "quality": cv.quality(res), "metric": cv.METRIC[res["task"]][1]}


def options(name, model_cfg: dict) -> str:
  """The variant's options in a run (`Variant.options`: no contract argument, parameter
  or per-token input): the config's, else the function's defaults."""
  import inspect
  opts = {o: d for o, d in attention.variant(name).options.items()
          if d is not inspect.Parameter.empty and o != "scale"}
  opts.update(model_cfg.get("attention_options", {}).get(name, {}))
  return ", ".join(f"{k}={v}" for k, v in opts.items()) or "none"


def draw(workdir, out, index=0, query=None) -> dict:
  """All maps of one workdir into `out`; returns (and writes to <out>/maps.json) what
  the page needs."""
  from data import pipeline
  import trainer
  config, model, step = trainer.load_model(workdir)
  model.eval()
  rec = tasks.task(config.task)
  if rec.kind == "encdec":          # a translation: a sentence of the test split
    config.eval_split = "test"
  task = pipeline.create(config)
  os.makedirs(out, exist_ok=True)
  name = model.cfg.attention_for("decoder_attention")
  meta = f"{os.path.basename(os.path.normpath(workdir))} ({name}, step {step})"
  ev = runs.records_with(runs.read_metrics(workdir), "eval_loss")
  metric = task.metric if ev and task.metric in ev[-1] else "eval_loss"
  trained = (f"trained {step} steps of batch {config.batch_size}"
             + (f"; its last evaluation in training: {metric} {ev[-1][metric]:.3f} on "
                f"{ev[-1].get('eval_sequences', '?')} sequences" if ev else ""))
  info = {"workdir": workdir, "step": step, "task": config.task, "attention": name,
          "trained": trained, "options": options(name, config.model.to_dict()),
          "layers": model.cfg.num_layers, "heads": model.cfg.num_heads,
          "d_model": model.cfg.d_model, "index": index, "row": published_row(workdir)}
  if rec.metric == "bits_per_dim" and getattr(task, "side", None):     # images
    info["files"] = mnist_maps(config, model, task, out, index, query, meta)
    info["side"] = task.side
    info["query"] = list(query or (task.side // 2, task.side // 2))
  elif rec.kind == "encdec":
    info["files"], sent = translation_maps(config, model, task, out, index, meta)
    info.update(sent)
  else:
    raise ValueError(f"attention maps: task {config.task!r} is not drawn; "
                     "choose a workdir of mnist, tfds (square images) or multi30k")
  info["date"] = pages.today()
  pages.write_json(os.path.join(out, "maps.json"), info)
  return info


def row_words(info, results="results") -> str:
  """Which published run the maps come from: the compare_variants row whose config
  fingerprint the workdir holds, checked against that page's results.json."""
  r = info.get("row")
  if r:
    page = f"variants_{r['task']}"
    rows = pages.read_json(os.path.join(results, page, "results.json"), [])
    same = [x for x in rows if x["variant"] == r["variant"] and x.get("config") == r["config"]]
    if same:
      return (f"The `{r['variant']}` row of [results/{page}](../{page}/README.md): the "
              f"run of that row's config (fingerprint `{r['config']}`), {r['metric']} "
              f"{r['quality']:.4g} as on that page.")
    return (f"A `{r['variant']}` run of {page}'s study whose config (`{r['config']}`) "
            f"is not that page's row: no results page shows this run.")
  return "A run of its own, trained for these maps: no results page shows it."


PAGE_FILES = ("layer0.png", "query_pixel.png", "cross_alignment.png")   # a few per run


def merged(saved: dict | None, run, infos) -> list[dict]:
  """The maps of a page after adding `infos` drawn in `run` to its saved maps.json:
  a saved map of another workdir stays, with the run that drew it; one of the same
  workdir is replaced."""
  new = {i["workdir"] for i in infos}
  old = [dict(m, run=m.get("run", saved["run"])) for m in (saved or {}).get("maps", [])
         if m["workdir"] not in new]
  return old + [dict(i, run=run) for i in infos]


def write_page(page_dir, run, infos, results="results"):
  """results page: a few maps of each workdir beside README.md (copied from where
  `draw` put them, when an info has "out"; else already there), and maps.json."""
  os.makedirs(page_dir, exist_ok=True)
  lines = [
      "# Attention heat maps",
      "",
      pages.header(run) + " Each map is the weight matrix "
      "that a layer applies to its values for one test input "
      "(`attention.implied_weights`), so weights @ V reproduces the layer's output "
      "(tests/attention/test_attention_maps.py checks this for every kind of variant): softmax "
      "probabilities for the exact family, φ(q)·φ(k) normalised for linear and "
      "performer, the closed forms of the gated family (retention's and gla's "
      "decayed or gated q·k, not normalised; deltanet's, signed: its delta rule "
      "subtracts what a key's earlier value wrote), and for local, sparse and "
      "reformer the variant applied to one-hot values, which shows its window, "
      "strided pattern or hash buckets as computed. Colours are on a square-root "
      "scale so small weights stay visible (signed weights: red positive, blue "
      "negative, on a signed square root); queries down, keys across; input 0 of a "
      "pixel model is its start token. The page is rewritten from `maps.json` by "
      "`python -m scripts.attention_maps --page_only`; `--add` draws more workdirs "
      "onto it and keeps the others (each section names the run it came from).",
      ""]
  for info in infos:
    sub = os.path.basename(os.path.normpath(info["workdir"]))
    d = os.path.join(page_dir, sub)
    os.makedirs(d, exist_ok=True)
    lines += [f"## {sub}: `{info['attention']}`, {info['layers']} layers, "
              f"{info['heads']} heads, d_model {info['d_model']}, step {info['step']}", ""]
    lines += [info["trained"].capitalize() + "; attention options: "
              + info["options"] + ".", "", row_words(info, results), ""]
    if "note" in info:
      lines += [info["note"], ""]
    r = info.get("run")
    if r and (r.get("date"), r.get("command")) != (run.get("date"), run.get("command")):
      lines += [f"Drawn by `{r['command']}` on {r['date']} ({r['host']}, jax "
                f"{r['jax_version']}).", ""]
    if tasks.task(info["task"]).kind == "encdec":
      lines += [f"Test sentence {info['index']}: “{info['source']}” → "
                f"“{info['translation']}” (reference: “{info['reference']}”).", ""]
    shown = [f for f in info["files"] if f in PAGE_FILES]
    lines += ["(`scripts/attention_maps.py` also drew, for this run: "
              + ", ".join(f for f in info["files"] if f not in shown) + ".)", ""]
    for f in shown:
      if info.get("out"):
        shutil.copy(os.path.join(info["out"], f), os.path.join(d, f))
      lines += [f"![{sub} {f}]({sub}/{f})", ""]
  pages.write_text(os.path.join(page_dir, "README.md"), "\n".join(lines))
  pages.write_json(os.path.join(page_dir, "maps.json"), {
      "run": run, "maps": [{k: v for k, v in i.items() if k != "out"} for i in infos]})
