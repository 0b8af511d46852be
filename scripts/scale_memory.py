"""Per-device memory of the Shakespeare gpu preset's model and training step on meshes
of 1, 2, 4 and 8 devices along each axis (the study: studies/bench/scale_memory.py).

  python -m scripts.scale_memory [--config configs/shakespeare.py:gpu] [--step] \
      [--out results/scale_memory] [--doc docs/scaling.md]
  python -m scripts.scale_memory --page_only     # the page and the doc from memory.json

Runs with 8 simulated CPU devices (it sets --xla_force_host_platform_device_count=8
before JAX starts) and compiles, without running, the initialiser (and with --step
the training step) per mesh. Writes memory.json and README.md to --out and the table
between the scale_memory markers of --doc.
"""
import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(filter(None, [
      os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8"]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")   # simulated devices are CPU devices

import argparse  # noqa: E402  (after XLA_FLAGS: the backend reads them when it starts)

from studies.bench import scale_memory  # noqa: E402
from studies.core import pages  # noqa: E402


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--config", default="configs/shakespeare.py:gpu",
                  help="a config file, with :preset")
  ap.add_argument("--out", default="results/scale_memory")
  ap.add_argument("--doc", default="docs/scaling.md",
                  help="the markdown file whose scale_memory block is rewritten "
                       "('' for none)")
  ap.add_argument("--step", action="store_true",
                  help="the training step's plans too (minutes of compilation per mesh)")
  ap.add_argument("--page_only", action="store_true", help="the page from memory.json")
  a = ap.parse_args(argv)
  if a.page_only:
    r = pages.read_json(os.path.join(a.out, "memory.json"))
  else:
    r = scale_memory.measure(scale_memory.load_config(a.config),
                             pages.command_line("scripts.scale_memory", argv),
                             step=a.step, log=lambda s: print(s, flush=True))
  scale_memory.write(r, a.out, a.doc or None)
  print(f"wrote {a.out}/README.md" + (f" and the table of {a.doc}" if a.doc else ""))


if __name__ == "__main__":
  main()
