"""Ships a trained model: a train.py workdir's checkpoint into pretrained/<name>/
(weights.npz and pretrained.json, the checksum checked on every load; the format:
trainer/pretrained.py, the export: studies/repro/shipping.py), then rewrites
pretrained/README.md.

  python -m scripts.export_pretrained --workdir=workdirs/ship/linear_d64L2_12k \
      --name=mnist14_linear --commit=5ebc1cc --command="python train.py ..."
  python -m scripts.export_pretrained --index_only    # pretrained/README.md only

The test bits/dim is measured here (the whole test split unless --bits_batches);
the wall time, steps, machine and date are read from the workdir.
"""
from __future__ import annotations

import argparse

from studies.core import pages
from studies.repro import shipping
from trainer import pretrained


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--workdir", help="a train.py workdir")
  ap.add_argument("--name", help="the shipped model's name (pretrained/<name>)")
  ap.add_argument("--step", type=int, default=None, help="default: the newest checkpoint")
  ap.add_argument("--command", default=None,
                  help="the command that trained it (default: the one in workdir/.lock)")
  ap.add_argument("--commit", default=None, help="the commit of the code that trained it")
  ap.add_argument("--machine_note", default="",
                  help="what runtime.json does not say (e.g. shared, niced)")
  ap.add_argument("--bits_batches", type=int, default=0,
                  help="test batches for bits/dim (0 = the whole test split)")
  ap.add_argument("--root", default=None, help=f"default: {pretrained.ROOT}")
  ap.add_argument("--judged", default="results/mnist_completion/shipped.json",
                  help="the shipped models' judged completions, tabled on the index")
  ap.add_argument("--index_only", action="store_true")
  a = ap.parse_args(argv)
  if not a.index_only:
    if not (a.workdir and a.name):
      ap.error("--workdir and --name are required (or --index_only)")
    shipping.export(a.workdir, a.name, root=a.root, step=a.step, command=a.command,
                    commit=a.commit, machine_note=a.machine_note,
                    bits_batches=a.bits_batches)
  judged = {n: m for n, m in pages.read_json(a.judged, {}).get("models", {}).items()
            if "completion" in m}
  print("wrote", shipping.write_index(a.root, judged))


if __name__ == "__main__":
  main()
