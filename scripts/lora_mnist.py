"""The seed report's LoRA study on MNIST, redone: `results/lora_mnist/` (the study:
studies/repro/lora.py; the page: studies/repro/lora_page.py).

  python -m scripts.lora_mnist --preset=full    # the study, about 15 min on 2 CPU cores
  python -m scripts.lora_mnist --preset=smoke   # a small subset, about a minute (tests)
  python -m scripts.lora_mnist --tune           # choose every method's lr (held out)
  python -m scripts.lora_mnist --page_only      # the page from the JSON files

The MLP study writes mlp.json, accuracy_vs_rank.png, calibration.png, shifts.png;
`--tune` writes tuning.json (the one procedure that chose the presets' fine-tuning
learning rates); `--study=pixel` (or `all`) adds LoRA on the pixel Transformer
(pixel.json, pixel_curves.png). README.md is written from those files.
"""
from __future__ import annotations

import argparse
import dataclasses
import os

from studies.core import pages
from studies.repro import lora as lm, lora_page


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--preset", choices=sorted(lm.PRESETS), default="full")
  ap.add_argument("--out", default="results/lora_mnist", help="results folder")
  ap.add_argument("--data_dir", default=None, help="default: $ATTNLAB_DATA_DIR or .data")
  ap.add_argument("--holdout", action="store_true",
                  help="test on the last 10k training images (hyperparameter choice)")
  ap.add_argument("--study", choices=("all", "mlp", "pixel"), default="all",
                  help="the report's MLP study, the pixel-Transformer part, or both")
  ap.add_argument("--tune", action="store_true",
                  help="choose every method's learning rate on held-out images "
                       "(tuning.json) instead of running the study")
  ap.add_argument("--page_only", action="store_true", help="README.md from the JSON files")
  ap.add_argument("--workdir", default="workdirs/lora_mnist",
                  help="train.py workdirs of the pixel part (a finished base is reused)")
  ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                  help="override a Preset field, e.g. --set lora_lr=0.05")
  a = ap.parse_args(argv)
  if a.page_only:
    lora_page.write_page(a.out)
    return
  preset = lm.PRESETS[a.preset]
  fields = {f.name: f for f in dataclasses.fields(lm.Preset)}
  for kv in a.set:
    k, _, v = kv.partition("=")
    if k not in fields:
      raise SystemExit(f"--set {kv}: unknown field {k!r}; valid: {sorted(fields)}")
    cur = getattr(preset, k)
    val = tuple(int(x) for x in v.split(",")) if isinstance(cur, tuple) else type(cur)(v)
    preset = dataclasses.replace(preset, **{k: val})
  run = pages.run_record(pages.command_line("scripts.lora_mnist", argv), a.preset)
  os.makedirs(a.out, exist_ok=True)
  if a.tune:
    res = lm.tune(preset, lm.load_mnist(a.data_dir))
    pages.write_json(os.path.join(a.out, "tuning.json"), dict(res, run=run))
    if os.path.exists(os.path.join(a.out, "mlp.json")):
      lora_page.write_page(a.out)
    return
  if a.study in ("all", "mlp"):
    arrays = lm.load_mnist(a.data_dir)
    arrays = lm.holdout(arrays) if a.holdout else arrays
    res = lm.mlp_study(preset, arrays)
    res.update(preset_name=a.preset, preset=dataclasses.asdict(preset), holdout=a.holdout,
               run=run)
    lora_page.write_mlp(res, a.out, arrays[2])
  if a.study in ("all", "pixel"):
    res = lm.pixel_study(lm.PIXEL_PRESETS[a.preset], os.path.join(a.workdir, a.preset),
                         a.data_dir)
    lora_page.write_pixel(dict(res, preset_name=a.preset, run=run), a.out)


if __name__ == "__main__":
  main()
