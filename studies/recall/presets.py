"""The presets of studies.recall.mqar: each one's grid and procedure (a dict per preset),
and Zoology's Figure 2 grid (`ZOOLOGY_PANELS`, `ZOOLOGY_WIDTHS`) the zoology presets are
drawn from. Every field is read by studies.recall.mqar (and the pages from results.json's
copy).

  widths      model widths (d_model; MLP 2 x d_model)
  panels      (tokens, pairs, steps) of each panel, or (tokens, pairs, steps, batch)
              for a panel with a batch size of its own (default: configs/mqar.py:cpu's
              32): Zoology's Figure 2 grows tokens and pairs together (4, 8, 16, 64
              pairs at 64, 128, 256, 512 tokens); steps: the training steps of every
              run of the panel
  heads       attention heads at every width (Zoology's attention: one head)
  lrs         the learning-rate grid, tried at lr_cell = (width, tokens, pairs), or,
              with `lr_cells` ((width, tokens, pairs) per width), at each width's own
              cell: the rate chosen there is that (variant, width)'s at every panel
  lr_extend   rates past each end of the grid the sweep may add (`lr_rates`): the
              cpu preset's grid, centred on softmax's rate, left 12 of 14 variants'
              best rate at its top end (2026-11-25)
  seeds       of the seeded variants at the seed_cells: (width, tokens, pairs), or
              (width, tokens, pairs, variants) for a cell seeded for those only, or
              (width, tokens, pairs, variants, seeds) with seeds of its own
  variants    (optional) the variants trained, the others listed as not in the grid;
              default every variant the decoder can use
  vocab       (optional) the vocabulary (default configs/mqar.py:cpu's 64)
  options     (optional) model.attention_options (default configs/mqar.py:cpu's)
  checkpoint  (optional) steps between checkpoints (default: at the end only)
  train_mix   (optional) ((tokens, pairs, "T:P,.."), ..): a panel whose training rows
              also hold shorter MQAR sequences (config mqar.train_mix; evaluation on
              the panel's own); default none
  schedule    (optional) the learning-rate schedule of every run (config schedule;
              default configs/mqar.py:cpu's cosine)
  ledger      (optional) True: keep the committed ledger of finished runs,
              results/variants_mqar/<preset>_runs.json (studies.recall.ledger), so that
              the study resumes in a fresh clone (a session's workdirs are lost)
  protocol    (optional) the version of studies.core.protocol the preset follows
              (default 0, before it): its selection, seeds and verdicts, and the
              gated family's model.gated_layer (protocol.gated_layer: "bare" at 0,
              the papers' layers at VERSION)
  why         (optional) the reason for the grid, as the page states it
  rows, order, reuse, chance, budget
              (memory_cpu only) its rows, the plan's order, the ledgers it reuses,
              chance and its budget: studies.recall.memory reads them (the comment
              above MEMORY_ROWS says each)
"""
from __future__ import annotations

from studies.core import protocol

# Zoology's Figure 2 (HazyResearch/zoology, iclr24_zoology_figure2/configs.py): (tokens,
# key-value pairs, batch size) per panel, the model widths, the rate grid
# (np.logspace(-4, -2, 4)), and 64 epochs of 100 000 training sequences.
ZOOLOGY_PANELS = ((64, 4, 512), (128, 8, 512), (256, 16, 256), (512, 64, 128))
ZOOLOGY_WIDTHS = (64, 128, 256, 512)
ZOOLOGY_LRS = (1e-4, 4.64e-4, 2.15e-3, 1e-2)
ZOOLOGY_SEQUENCES = 64 * 100_000

SEEDS = protocol.reporting_seeds("variants_mqar")

PRESETS = {
    # ~60 minutes on 2 cores with --jobs=2 (results/variants_mqar/ states the total).
    # configs/mqar.py:cpu gives every model a short causal convolution (why: its
    # docstring); with it softmax learnt recall by step 750-1125 at widths 32 and 64
    # in every seed tried, so 1500 steps for both panels. The lr cell is the
    # 8-pair panel at width 32, where the rate matters (at width 64 with 4 pairs most
    # variants reach 100% at two rates or three, and a tie settles nothing).
    # Under studies.core.protocol (version `protocol`): the lr stage runs the selection
    # seed (0) and chooses on the validation stream; the grid runs the first
    # reporting seed and the seed cells every reporting seed (`seeds`: fresh, 5),
    # each reported by its accuracy on the test stream.
    # Amended 2026-11-29, before its protocol re-run trained anything: the gated family
    # with the layers its papers build (issue 76: the re-run trains them once, with
    # their layers), gated_deltanet seeded beside the family, and a committed ledger
    # (results/variants_mqar/cpu_runs.json) so that the re-run resumes across sessions.
    "cpu": dict(widths=(16, 32, 64), panels=((64, 4, 1500), (64, 8, 1500)), heads=1,
                lrs=(3e-4, 1e-3, 3e-3), lr_extend=2, lr_cell=(32, 64, 8),
                # protocol: the version its page follows; these three ran under version
                # 1, whose verdicts and family they keep (studies/PROTOCOL.md)
                protocol=1, ledger=True,
                seeds=SEEDS,
                # every trained variant, the reporting seeds at the 8-pair cells of
                # widths 32 and 64
                seeded=("softmax", "linear", "retention", "gla", "deltanet",
                        "gated_deltanet", "additive", "cosine", "dot", "general", "local",
                        "location", "performer", "reformer", "sparse"),
                seed_cells=((32, 64, 8), (64, 64, 8))),
    # the tests' smoke: seconds
    "smoke": dict(widths=(16,), panels=((16, 2, 2),), heads=1, lrs=(1e-2,),
                  lr_cell=(16, 16, 2), seeds=(0,), seeded=("softmax",),
                  seed_cells=((16, 16, 2),)),
}

# Zoology's grid on a GPU: every panel and width, Zoology's batch sizes and its 64
# epochs of 100 000 sequences (as fresh sequences: 6.4M per run), vocabulary 8192,
# its four rates chosen per (variant, width) at the longest panel (where the rate
# matters: the shorter ones are solved at most rates), the gated family with the
# layers its papers build (issue 76). Resumable in pieces: a checkpoint every 1000
# steps (on an H200 well under 10 minutes at the largest cell), and every finished
# run is kept (result.json) across invocations.
PRESETS["zoology_gpu"] = dict(
    widths=ZOOLOGY_WIDTHS,
    panels=tuple((t, P, ZOOLOGY_SEQUENCES // b, b) for t, P, b in ZOOLOGY_PANELS),
    heads=1, vocab=8192, checkpoint=1000, ledger=True,
    options={"local": {"window": 128}, "reformer": {"chunk_size": 64}},
    lrs=ZOOLOGY_LRS, lr_extend=1,
    lr_cells=tuple((w, 512, 64) for w in ZOOLOGY_WIDTHS),
    protocol=protocol.VERSION, seeds=SEEDS,
    seeded=("softmax", "linear", "gla", "deltanet", "gated_deltanet", "retention",
            "local", "performer", "sparse", "reformer", "additive", "cosine", "dot",
            "general", "location"),
    seed_cells=tuple((w, t, P) for t, P in ((256, 16), (512, 64)) for w in ZOOLOGY_WIDTHS),
    why="Zoology's Figure 2 grid in full, for a GPU.")

# Zoology's grid cut to 2 CPU cores (issue 78): <= 720 CPU-minutes in all with
# --jobs=2 (<= 6 hours on 2 cores), priced before the first run by the cost probe
# (results/variants_mqar/costs.json, `python -m scripts.mqar --preset=zoology_cpu
# --measure_costs` on one core of 2026-11-28's machine: softmax and linear 40-step
# runs at each cell, the other variants at width 128 of the long panel). `why` is the
# page's account of the levers.
# Amended 2026-11-29, before any variant but softmax ran (`why` says what and why):
# the long panel trains on a mixture of shorter MQAR sequences too, at batch 8, with
# a constant rate; width 256 left out to pay for it.
PRESETS["zoology_cpu"] = dict(
    widths=(64, 128),
    panels=((64, 4, 1500, 32), (512, 64, 1500, 8)),
    train_mix=((512, 64, "64:4,128:8,256:16"),),
    schedule="constant",
    heads=1, vocab=256, ledger=True,
    lrs=(3e-4, 1e-3, 3e-3), lr_extend=0,
    lr_cells=((64, 512, 64), (128, 512, 64)),
    protocol=1, seeds=SEEDS,         # ran under version 1: keeps its verdicts' family
    variants=("softmax", "linear", "gla", "gated_deltanet", "local"),
    seeded=("softmax", "linear", "gla", "gated_deltanet", "local"),
    seed_cells=((64, 512, 64),),
    why=("Fixed on 2026-11-28 from costs.json (40-step probes on one core: 664 "
         "CPU-minutes projected for 95 runs, budget 720 with --jobs=2). Zoology's "
         "widths 64, 128 and 256 (512 left out: a width-256 run at 512 tokens already "
         "costs ~750 CPU-seconds) at its shortest and longest panels: 64 tokens with 4 "
         "pairs, where every variant should recall, and 512 tokens with 64 pairs, where "
         "a fixed state of width 64 holds fewer keys than the pairs and the fixed-state "
         "variants should fall behind softmax (128 and 256 tokens left out: one more "
         "panel would cost ~250 CPU-minutes). Levers, each against Zoology's: 2048 "
         "tokens a step (batch 32 at 64 tokens, 4 at 512; Zoology 512 and 128) for 1500 "
         "steps (theirs: 64 epochs of 100 000 sequences); vocabulary 256 (theirs 8192; "
         "127 keys still hold 64 pairs); 5 variants: softmax, linear (kernel family), "
         "local (windowed), gla and gated_deltanet (the gated family, with their "
         "papers' layers); performer (the costliest per step, 372 CPU-ms at width 128, "
         "512 tokens), deltanet (gated_deltanet's ancestor), sparse and the score family "
         "left out; the rate tuned per (variant, width) at the long panel, 3 rates, no "
         "rate past the grid (the ladder's extension would add ~120 CPU-minutes); the 5 "
         "reporting seeds at width 64 of the long panel only (where the verdicts are), "
         "one seed elsewhere. AMENDED 2026-11-29, before any variant but softmax ran: "
         "softmax stayed at chance on the long panel at every rate, schedule and batch "
         "tried (zoology_cpu_diagnostics.json: `diagnostic`, `schedule_panels`), a "
         "fault of the setup; trained on a mixture that also holds shorter sequences "
         "(64/4, 128/8 and 256/16 rows padded to 512 tokens, as Zoology's later MQAR "
         "configs train one run over several shapes; evaluated on 512/64 alone) it "
         "passed 99% (`mixture_panel`: the same run without the mixture stayed at "
         "chance). Recall formed only after some 6,000-8,000 training sequences (batch "
         "8: between steps 750 and 1000; batch 4: between 1500 and 1750), so the long "
         "panel now trains at batch 8 (4,096 tokens a step; its 1500 steps kept) with "
         "the rate held constant after warmup (a cosine over 1500 steps decays before "
         "that point: `schedule_panels`); every panel takes the constant schedule. "
         "Doubling the long panel's batch doubles its cost, which with width 256 kept "
         "is over the budget, so width 256 is left out (costs.json: the plan "
         "re-projected from the same probes, and the earlier plans); the three softmax "
         "runs of the first setup stay in the ledger, set aside."))

# The gated family's layer piece by piece (issue 76 item 4;
# studies/mechanisms/gated_ablation.py runs it, one model.gated_layer per row): the cpu
# preset's 8-pair cell at width 64, with NO short convolution on the block input
# (model.short_conv=0, the ablation's override), so that a convolution the model has is
# one the row's layer adds. 3 reporting seeds per row at the rate chosen on validation
# (seed 0), 3 rates.
PRESETS["gated_ablation"] = dict(
    widths=(64,), panels=((64, 8, 1500),), heads=1, lrs=(3e-4, 1e-3, 3e-3), lr_extend=0,
    lr_cell=(64, 64, 8), protocol=1,     # ran under version 1: keeps its family
    seeds=protocol.reporting_seeds("gated_ablation"),
    seeded=("linear", "gla", "deltanet", "gated_deltanet"),
    variants=("linear", "gla", "deltanet", "gated_deltanet"),
    seed_cells=((64, 64, 8),), ledger=True,
    why="the gated family's published layer against its bare operator, piece by piece, "
        "and linear attention given the same pieces")

# "Recall at equal memory" (issue 102): the Zoology grid's long panel (512 tokens, 64
# pairs) as accuracy against each run's decode-state bytes per sequence, under protocol
# version 2, declared on 2026-12-07 before any of its runs (studies/recall/memory.py
# reads it; results/mqar_memory/plan.json is its costed plan). Every setting of the long
# panel is zoology_cpu's, so that the runs that preset's ledger holds are this preset's
# own (the same config fingerprints; `reuse`) and count under version 2 as selection
# runs its 4-rate grid extends (studies/PROTOCOL.md rule 11).
#   rows    {row: how it trains}: attention (the variant; "softmax" under a pattern),
#           layer_attention (a 2-layer hybrid pattern, models/config.py), options (the
#           row's model.attention_options, replacing the preset's for its variants),
#           window_of (local's window chosen per width so that its model-level state
#           matches that row's: memory.matched_window), rate_of (no rate stage: that
#           row's chosen rate at each width; its runs retrain that row's model),
#           cache_dtype (its reported figure decodes the test stream through a KV cache
#           of that dtype: memory.decode_accuracy), heads and kv_heads (the row's
#           model.num_heads and num_kv_heads over the preset's one head: the multi-head
#           panel)
#   order   (group, row, width): the plan's order: 1 the Zoology rows, 2 deltanet and
#           retention, 3 local at a fixed state's bytes, 4 the int8 cache, 5 the two
#           hybrids at width 64, 6 width 256 where still rising, 7 the hybrids at 128,
#           8 the multi-head panel at 128 (MQA, MLA, GQA, MHA; added 2026-12-07, before
#           any of its runs, once the re-priced plan left its ~210 CPU-minutes in the
#           budget: issue 102 item 1 puts it "only if the budget allows").
#           Issue 102 item 1 lists width 256 third; it runs sixth since 2026-12-07 (none
#           of it had run), when the seeds of a split row (gated_deltanet w128, up to 8)
#           pushed hybrid_qwen3_next w64 past the budget: the done-means put both hybrids
#           on the plot, and width 256 is conditional and the dearest group (560 of the
#           1,200 CPU-minutes). The budget drops an item that would pass it; a later
#           one that fits keeps its place
#   reuse   presets whose committed ledgers this one's collection reads (their runs of
#           this preset's configs count; nothing is written there)
#   chance  the uniform guess among the value tokens (1 / (vocab / 2)): a row at every
#           rate within 2x of it "did not train" (protocol.RateGrid)
#   budget  CPU-minutes of the added runs (issue 102: 1,200)
MEMORY_ROWS = {
    "softmax": dict(attention="softmax"),
    "linear": dict(attention="linear"),
    "gla": dict(attention="gla"),
    "gated_deltanet": dict(attention="gated_deltanet"),
    "local": dict(attention="local"),            # configs/mqar.py:cpu's window, 16
    "deltanet": dict(attention="deltanet"),
    "retention": dict(attention="retention"),
    "local_state": dict(attention="local", window_of="gla"),
    "softmax_int8": dict(attention="softmax", rate_of="softmax", cache_dtype="int8"),
    # Qwen3-Next's pattern at 2 layers: a fixed-state Gated DeltaNet layer (its
    # published layer), then full softmax attention with its output gate
    "hybrid_qwen3_next": dict(attention="softmax",
                              layer_attention="gated_deltanet,softmax+attn_gate"),
    # gpt-oss's pattern at 2 layers: a windowed softmax layer (window 128, gpt-oss's
    # band and results/kv_cache's) then full softmax; its learned sinks left out (they
    # hold no decode state; the Zoology rows have none)
    "hybrid_gpt_oss": dict(attention="softmax", layer_attention="local,softmax",
                           options={"local": {"window": 128}}),
    # the multi-head panel (group 8, width 128 only): 4 heads of 32, so that a KV cache
    # can share its key/value heads. MQA (1 kv head) and MLA (the paper's one latent a
    # token, d_c = 4 d_h) are the smallest caches; GQA(2) halves MHA's; MHA (4 kv heads)
    # is their control: the same heads, the same bytes as one-head softmax at 128
    "mqa_h4": dict(attention="softmax", heads=4, kv_heads=1),
    "mla_h4": dict(attention="mla", heads=4, kv_heads=1),
    "gqa_h4": dict(attention="softmax", heads=4, kv_heads=2),
    "mha_h4": dict(attention="softmax", heads=4),
}
PRESETS["memory_cpu"] = dict(
    widths=(64, 128, 256),
    panels=((512, 64, 1500, 8),),
    train_mix=((512, 64, "64:4,128:8,256:16"),),
    schedule="constant",
    heads=1, vocab=256, ledger=True,
    lrs=(3e-4, 1e-3, 3e-3, 9e-3), lr_extend=2,
    lr_cells=((64, 512, 64), (128, 512, 64), (256, 512, 64)),
    protocol=protocol.VERSION, seeds=(1, 2, 3),
    rows=MEMORY_ROWS,
    # the module that builds this preset's rows, plans and extra figures (mqar reads
    # it by name: the runner knows no study built on it)
    hooks="studies.recall.memory",
    order=tuple((1, n, w) for n in ("softmax", "linear", "gla", "gated_deltanet", "local")
                for w in (64, 128))
    + tuple((2, n, w) for n in ("deltanet", "retention") for w in (64, 128))
    + ((3, "local_state", 64), (3, "local_state", 128),
       (4, "softmax_int8", 64), (4, "softmax_int8", 128))
    + tuple((5, n, 64) for n in ("hybrid_qwen3_next", "hybrid_gpt_oss"))
    + tuple((6, n, 256) for n in ("linear", "gated_deltanet", "deltanet", "retention"))
    + tuple((7, n, 128) for n in ("hybrid_qwen3_next", "hybrid_gpt_oss"))
    + tuple((8, n, 128) for n in ("mqa_h4", "mla_h4", "gqa_h4", "mha_h4")),
    seeded=tuple(MEMORY_ROWS), seed_cells=(),
    reuse=("zoology_cpu",), chance=1 / 128, budget=1200,
    why=("Recall at equal memory (issue 102): Zoology's long panel, each run placed by "
         "its decode-state bytes per sequence, every row trained to its best under "
         "protocol version 2; fixed before its first run from the measured costs of "
         "zoology_cpu's runs (its ledger) and costs.json's probes "
         "(results/mqar_memory/plan.json)."))
