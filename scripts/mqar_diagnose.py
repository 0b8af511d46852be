"""Record diagnostic MQAR train.py runs from their workdirs into a named block of
results/variants_mqar/zoology_cpu_diagnostics.json (studies/recall/diagnose.py):

  python -m scripts.mqar_diagnose --block=mixture_panel \
      --why="does softmax learn 512/64 when its training also holds shorter sequences?" \
      workdirs/mqar_diag/t512p64_mix_b8_lr3e-3_const workdirs/mqar_diag/t512p64_nomix_b8_lr3e-3_const
"""
import argparse

from studies.recall import diagnose as md
from studies.core import pages


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--block", required=True, help="the block's name in the JSON")
  p.add_argument("--why", required=True, help="the question the runs answer")
  p.add_argument("--base", default="configs/mqar.py:cpu",
                 help="the config the runs started from (their commands are its flags)")
  p.add_argument("--out", default=md.DIAGNOSTICS)
  p.add_argument("workdirs", nargs="+")
  a = p.parse_args(argv)
  block = md.add_block(a.block, a.why, a.workdirs, a.out, a.base,
                       pages.command_line("scripts.mqar_diagnose", argv, drop=("--out",)))
  print("\n".join(block["reading"]))
  print(f"wrote block {a.block!r} of {a.out}")


if __name__ == "__main__":
  main()
