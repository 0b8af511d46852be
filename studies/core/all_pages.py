"""Every generated page of the project and the command that rewrites it from the JSON
committed beside it (nothing is measured): `make pages` runs them all
(`python -m scripts.pages`), in this order. Each entry names the pages it writes, and
tests/studies/test_all_pages.py checks that every results/*/README.md is one of them (or a
hand-written page listed in HAND_WRITTEN), so that a new page is not left out.

A command is run as `python -m <module> <args>` in a process of its own (this package
imports nothing from scripts/).
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys

from data import tasks


@dataclasses.dataclass(frozen=True)
class Page:
  """`python -m <module> <args>`, which rewrites the pages `writes` (paths from the
  repository root; a file whose part between markers it writes counts too)."""
  module: str
  args: tuple
  writes: tuple

  @property
  def command(self) -> list[str]:
    return [sys.executable, "-m", self.module, *self.args]


def _variants(task: str, preset: str = "cpu") -> Page:
  """A variants page (studies.variants.compare): the cpu preset's is results/variants_
  <task>, and it rewrites the variant x task summary of results/README.md too."""
  out = f"results/variants_{task}" + ("" if preset == "cpu" else f"_{preset}")
  return Page("scripts.compare_variants", (f"--task={task}", f"--preset={preset}",
                                           "--page_only"),
              (f"{out}/README.md", f"{out}/quality_vs_time.png")
              + (("results/README.md",) if preset == "cpu" else ()))


def _variants_pages() -> list[Page]:
  """Every task's variants pages, each preset its record names (Study.presets), in the
  summary's order (Study.order; studies.variants.config.TASKS)."""
  return [_variants(n, p) for n in tasks.variants_tasks()
          for p in tasks.task(n).study.presets]


PAGES = [
    Page("scripts.benchmark_gpu", ("--page_only",), ("results/benchmarks/gpu_*.md",)),
    Page("scripts.benchmark", ("--page_only",), ("results/benchmarks/README.md",)),
    *_variants_pages(),
    Page("scripts.reproduce_mnist", ("--page_only",), ("results/mnist_completion/README.md",)),
    Page("scripts.lora_mnist", ("--page_only",), ("results/lora_mnist/README.md",)),
    Page("scripts.fp8_error", ("--page_only",), ("results/fp8/README.md",)),
    Page("scripts.ring_memory", ("--page_only",), ("results/ring_memory/README.md",)),
    Page("tests.trainer.multiprocess_job", ("page", "results/multiprocess"),
         ("results/multiprocess/README.md",)),
    Page("scripts.scale_memory", ("--page_only",), ("results/scale_memory/README.md",
                                                   "docs/scaling.md")),
    Page("scripts.kv_cache", ("--page_only",), ("results/kv_cache/README.md",
                                                "results/kv_cache/kv_cache.png")),
    Page("scripts.mla_train", ("--page_only",), ("results/mla_train/README.md",
                                                 "results/mla_train/quality_vs_cache.png")),
    Page("scripts.mqar", ("--preset=zoology_cpu", "--page_only"),
         ("results/variants_mqar/README.md", "results/variants_mqar/mqar.png")),
    Page("scripts.mqar", ("--preset=memory_cpu", "--page_only"),
         ("results/mqar_memory/README.md", "results/mqar_memory/memory.png")),
    Page("scripts.lm_length", ("--preset=cpu", "--page_only"),
         ("results/lm_length/README.md",)),
    Page("scripts.gated_bench", ("--page_only",), ("results/gated/README.md",)),
    Page("scripts.gated_ablation", ("--page_only",), ("results/gated_ablation/README.md",
                                                      "results/gated_ablation/ablation.png")),
    Page("scripts.attention_maps", ("--page_only",), ("results/attention_maps/README.md",)),
    Page("scripts.positions", ("--page_only",), ("results/positions/README.md",)),
    Page("scripts.packing", ("--part=page",), ("results/packing/README.md",)),
    Page("scripts.demo_results", ("--page_only", "--out=results/mnist_demo"),
         ("results/mnist_demo/README.md",)),
    Page("scripts.preset_times", ("--page_only",), ("results/cpu_presets/README.md",
                                                    "configs/README.md",
                                                    "docs/performance.md")),
    Page("scripts.export_pretrained", ("--index_only",), ("pretrained/README.md",)),
    Page("scripts.suite_cost", ("--page_only",), ("results/suite/README.md",
                                                  "results/suite/history.json")),
    # after every page it reads: the decision page (the length and memory studies',
    # the variants pages' and the GPU pages' JSON, and its own cost.json), then the
    # index of every page
    Page("scripts.choose", ("--page_only",), ("results/choose/README.md",)),
    Page("scripts.results_index", (), ("results/README.md",)),
]

# results/*/README.md pages that no command writes, and why.
HAND_WRITTEN: dict = {
    "results/archive/README.md": "the list of archived pages (results/archive/<page>/, "
                                 "no longer rewritten nor cited by the decision page), "
                                 "one line each saying why",
}


def main(argv=None) -> int:
  """Runs every entry of PAGES (those whose module or a page of which contains one of
  `argv`'s words, when given), stopping at the first that fails; returns its exit
  status."""
  words = list(sys.argv[1:] if argv is None else argv)
  for p in PAGES:
    if words and not any(w in p.module or any(w in x for x in p.writes) for w in words):
      continue
    print("+ python -m", p.module, *p.args, flush=True)
    code = subprocess.call(p.command)
    if code:
      return code
  return 0


if __name__ == "__main__":
  sys.exit(main())
