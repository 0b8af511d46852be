"""The tested library behind every results page; `scripts/` are its command lines.

One home per shared idea:
  pages        the run record and the one header (trainer.metrics.runtime_info()),
               markdown tables, splicing between markers, the JSON beside every page
  plots        the one matplotlib set-up
  timing       the one timing harness: timed calls, interleaved rounds, the matmul
               peak (named by size, dtype and statistic), memory plans, RSS, slopes,
               paired samples and the median's interval
  references   every number quoted from a paper, a report or a peer, with its source
  runs         run bookkeeping: the one reader of metrics.jsonl, training time and
               rate, fingerprints, setting stale runs aside, a job in a subprocess
  sweep        the one runner of the sweeps (variants x rates x seeds): a run's
               identity and resumption, child processes, the CPU and wall ledgers,
               the learning-rate rule (LrRule)
  completion   the one completion table and verdict rule (MNIST completions)
One module per study (each with its presets in one place; compare_variants' are the
task configs' own, configs/<task>.py:cpu|gpu):
  benchmark, benchmark_page, benchmark_train(_page), benchmark_gpu  results/benchmarks
  compare_variants, variants_page (+ _notes, _seeds)          results/variants_<task>
  mqar, mqar_page, mqar_zoology_page                          results/variants_mqar(_short)
  reproduce_mnist, reproduce_mnist_page                       results/mnist_completion
  lora_mnist, lora_page                                       results/lora_mnist
  demo                                                        results/mnist_demo
  attention_maps                                              results/attention_maps
  quant_error                                                 results/fp8 (+ kv_int8)
  ring_memory                                                 results/ring_memory
  variant_table                                               docs/variants.md's tables
  preset_times                                                results/cpu_presets
Every page is written from its JSON alone, so `--page_only` rewrites it without
measuring anything; all_pages lists every page's command (`make pages` runs them).
Nothing here imports scripts/.
"""
