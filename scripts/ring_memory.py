"""Per-device memory of ring attention against sequence length, over 1, 2, 4, 8 devices
(the study: studies/bench/ring_memory.py).

  python -m scripts.ring_memory [--lens 1024,2048,4096,8192,16384] [--out results/ring_memory]
  python -m scripts.ring_memory --page_only [--out ...]   # the page from memory.json

Runs with 8 simulated CPU devices (it sets --xla_force_host_platform_device_count=8
before JAX starts) and compiles, without running, ring's forward + backward per
length and device count. Writes memory.json, README.md and memory.png to --out.
"""
import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(filter(None, [
      os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8"]))

import argparse  # noqa: E402  (after XLA_FLAGS: the backend reads them when it starts)

from studies.bench import ring_memory
from studies.core import pages  # noqa: E402


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--lens", default="1024,2048,4096,8192,16384")
  ap.add_argument("--batch", type=int, default=1)
  ap.add_argument("--heads", type=int, default=8)
  ap.add_argument("--head_dim", type=int, default=64)
  ap.add_argument("--out", default="results/ring_memory")
  ap.add_argument("--page_only", action="store_true", help="the page from memory.json")
  a = ap.parse_args(argv)
  if a.page_only:
    r = pages.read_json(os.path.join(a.out, "memory.json"))
  else:
    r = ring_memory.measure([int(x) for x in a.lens.split(",")], a.batch, a.heads,
                            a.head_dim, pages.command_line("scripts.ring_memory", argv),
                            log=lambda s: print(s, flush=True))
  ring_memory.write(r, a.out)
  print(f"wrote {a.out}/README.md and memory.png")


if __name__ == "__main__":
  main()
