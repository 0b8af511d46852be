"""The tested library behind every results page; `scripts/` are its command lines.

One room per study family over a shared core that imports none of them; `MAP` below is
the package map, the one list of every room and module (tests/studies/test_map.py
checks it against the tree both ways). A study's presets live in one place (the
variants pages' are the task configs' own, configs/<task>.py:cpu|gpu; MQAR's are
studies/recall/presets.py), and the gated family's model.gated_layer of every run is
the one its protocol version says (studies.core.protocol.gated_layer), set once by its
study's make_config.

Every page is written from its JSON alone, so `--page_only` rewrites it without
measuring anything; studies.core.all_pages lists every page's command (`make pages`
runs them). Nothing here imports scripts/.
"""

# {room: {module: what it holds}}: every module of studies/, each under its room. The
# rooms with a module named after the task it studies (recall.mqar, repro.mnist) are
# written dict(module=...): their keys are module names, not task names, and studies/
# holds no string that is a task's name (tests/data/test_tasks.py scans for them).
MAP = {
    "core": {
        "pages": "the run record and the one header (trainer.metrics.runtime_info()), "
                 "markdown tables, splicing between markers, the JSON beside every page",
        "plots": "the one matplotlib set-up",
        "timing": "the one timing harness: timed calls, interleaved rounds, the matmul "
                  "peak, memory plans, RSS, slopes, paired samples, the median's "
                  "interval",
        "references": "every number quoted from a paper, a report or a peer, with its "
                      "source",
        "runs": "run bookkeeping: the one reader of metrics.jsonl, training time and "
                "rate, fingerprints, setting stale runs aside, a job in a subprocess",
        "sweep": "the one runner of the sweeps (variants x rates x seeds): a run's "
                 "identity and resumption, child processes, the CPU and wall ledgers, "
                 "the learning-rate rule",
        "protocol": "the evaluation protocol (studies/PROTOCOL.md): splits, selection "
                    "on validation, reporting seeds, versions, rate grids",
        "verdicts": "its statistics: Welch + Holm, bounded intervals, the Verdict, "
                    "version 2's family, power line and split rows",
        "completion": "the one completion table and verdict rule (MNIST completions)",
        "all_pages": "every generated page and the command that rewrites it "
                     "(`make pages`)",
        "results_index": "results/README.md, the index of every page",
    },
    "variants": {       # results/variants_<task>/
        "compare": "the study: every variant on one task under one budget "
                   "(scripts.compare_variants)",
        "config": "what one row trains: its config, or why the task refuses or the "
                  "preset skips the variant",
        "measure": "what one finished row measures: the metric, memory, the "
                   "quality-vs-time curve",
        "place": "where a run writes its page: committed or scratch",
        "ledger": "the page's ledger (lr.json, seeds.json) and the rows a page keeps "
                  "without their workdirs",
        "page": "the page: its table, plot, rates and reference points",
        "summary": "results/README.md's variant x task summary of every page",
        "notes": "each task's own notes on its page",
        "seeds": "the seed spread and the verdicts between rows",
        "words": "the seed table's words: a verdict in words, the implementations' "
                 "row, the tight rows",
        "state": "the fixed-state rows of a copy page",
        "table": "docs/variants.md's tables, from the registry (`make table`)",
    },
    "recall": dict(     # results/variants_mqar(_short)/, results/mqar_memory/
        mqar="the MQAR study: its stages, runs and collection (scripts.mqar)",
        presets="each preset's grid and procedure, Zoology's Figure 2 grid",
        plan="which runs each stage trains, and each rate's choice",
        costs="what a preset's plan costs on this CPU, measured before it runs",
        ledger="the committed ledger of a preset's finished runs",
        diagnose="diagnostic runs recorded from their workdirs",
        stats="the pages' figures: cell means, seeds, verdicts, the sweep's time",
        page="the page of the short presets",
        zoology_page="the page of the zoology presets",
        memory="recall at equal memory: its rows, their decode-state bytes, version 2's "
               "plan per row, the decode through a quantised cache",
        memory_budget="its plan costed against the budget (plan.json)",
        memory_page="its page: accuracy against decode-state bytes "
                    "(results/mqar_memory/)",
    ),
    "length": {         # results/lm_length/ (issue 101)
        "presets": "the length study's rows, lengths, tokens per step, rate grid and "
                   "tie, declared before its runs (cpu, gpu)",
        "costs": "CPU seconds a train step per row x length, interleaved, with the "
                 "gauge: the plan's measurement and the cost run",
        "plan": "the plan's arithmetic: runs and CPU-minutes per row x length, the "
                "budget, the length dropped",
        "runner": "which runs are due, in order; each in a child process; resumable "
                  "from the ledger",
        "ledger": "the committed ledger of its finished runs (the MQAR ledger's shape)",
        "evaluate": "what a finished run measures: validation, test split into recall "
                    "positions and the rest, cost as a model",
        "floors": "n-gram (Witten-Bell) floors of each run's own training bytes on its "
                  "test bytes: has the reference learned past local statistics?",
        "longer": "exploratory: the reference, gated_deltanet and its control with 4x "
                  "the bytes at 1,024 (preset cpu_x4, rates carried)",
        "results": "the page's JSON: cells, version 2 verdicts per length, the split, "
                   "the check, the rules' reading",
        "page": "results/lm_length/README.md and its plots, from the JSON; what the "
                "decision page reads of it",
        "carry": "the gpu preset on a lent GPU: its corpus slice carried there, its "
                 "ledger and cut-off runs' checkpoints back",
    },
    "choose": {         # results/choose/
        "page": "the decision page: which attention to use, and what it costs",
        "answer": "what an answer is: its choices, the figures it cites and their files",
        "answers": "one answer per question, by rules: recall at a fixed decode budget, "
                   "short sequences (and the causal LM's, from answers_lm)",
        "answers_lm": "a causal LM at each length of the length study, and the GPU "
                      "pages' kernels apart",
        "sources": "what the page reads from the other pages' JSON",
        "cells": "each cell in words, and what the page's rules read of it",
        "cost": "the page's one cost run",
    },
    "bench": {          # results/benchmarks/ and the other measured pages
        "benchmark": "speed and memory of every variant, decode latency, the CPU "
                     "targets",
        "presets": "the attention benchmark's presets, sections and CPU skips",
        "train": "the research loop's speed: the loop against the bare step, MFU, "
                 "generation, bf16",
        "page": "results/benchmarks/README.md, from both runs' JSON",
        "train_page": "the training loop's section of that page",
        "trace": "profiler traces of its rows, and what bounds a step",
        "gpu": "the Pallas flash kernel against cuDNN and XLA (results/benchmarks/gpu_*)",
        "mgpu": "the Mosaic GPU kernels on a Hopper GPU",
        "gated": "speed of the gated family on a CPU (results/gated/)",
        "kv_cache": "the KV-cache frontier (results/kv_cache/): its measurements",
        "kv_cache_page": "its page and plot, from the JSON",
        "quant_error": "FP8 attention's and the int8/fp8 caches' error "
                       "(results/fp8/)",
        "ring_memory": "ring attention's per-device memory (results/ring_memory/)",
        "rope_cost": "what RoPE costs in a training step",
        "preset_times": "every cpu preset's step time (results/cpu_presets/)",
        "suite_cost": "what the test suite costs (results/suite/)",
        "scale_memory": "compiled per-device memory of a model over 1-8 devices on each mesh axis (results/scale_memory/, docs/scaling.md)",
    },
    "repro": dict(      # MNIST reproductions and the shipped models
        mnist="Transformers are RNNs' MNIST completion, reproduced "
              "(results/mnist_completion/)",
        mnist_page="its page",
        lora="the seed report's LoRA study, redone (results/lora_mnist/)",
        lora_page="its page",
        demo="the `make demo` page and its frontier (results/mnist_demo/)",
        shipping="a trained model exported to pretrained/, and its index page",
    ),
    "mechanisms": {     # one mechanism each, trained or probed
        "attention_maps": "attention heat maps of trained workdirs "
                          "(results/attention_maps/)",
        "gated_ablation": "the gated layer, piece by piece (results/gated_ablation/)",
        "mla_train": "what MLA's smaller cache costs in quality (results/mla_train/)",
        "packing": "packed against length-bucketed Multi30k batches (results/packing/)",
        "positions": "length extrapolation, position schemes, RoPE's cost "
                     "(results/positions/)",
    },
}
