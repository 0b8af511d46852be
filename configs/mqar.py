"""Multi-query associative recall (MQAR) of Arora et al. 2023, "Zoology", §3: key-value
pairs, then queries of the keys; scored on the queried values only (data/mqar.py).

The default follows one cell of Zoology's Figure 2 (their reference config,
zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py): vocabulary 8192,
sequences of 256 tokens with 16 pairs, a 2-layer decoder of width 128 with one head,
except that this model keeps an MLP (theirs has none in that figure) and draws fresh
sequences every step (20000 x 64 = 1.28M; theirs: 64 epochs of 100k).
`--config=configs/mqar.py:cpu` is the studies' (results/archive/variants_mqar_short/, and
the base of Zoology's grid, results/variants_mqar/): a small
vocabulary and short runs, minutes on 2 CPU cores for the whole width x length x
variant grid (studies/recall/mqar.py sets width and length per cell).
"""
from configs import base


def get_config(preset: str = ""):
  c = base.get_config()
  c.task = "mqar"              # the data and metric (its record: data/tasks/mqar.py)
  c.mqar = base.ml_collections.ConfigDict(dict(
      vocab_size=8192,         # V: keys 1..V/2-1, values V/2..V-1, 0 the filler
      num_pairs=16,            # P: key-value pairs per sequence, each key queried once
      seq_len=256,             # T: tokens per sequence (even, >= 4P)
      power_a=0.01,            # query slots ∝ a*g^(a-1): Zoology's power law (1 = uniform)
      train_mix=""))           # "T:P,..": training rows also over these shorter shapes,
                               # padded to seq_len (data.mqar.mixed_batch; "" = off);
                               # evaluation stays on seq_len with num_pairs
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=8192, attention="softmax", d_model=128, num_heads=1,
      d_ff=256, num_layers=2, max_len=256, pre_ln=True)
  c.learning_rate = 1e-3       # peak learning rate for this task
  c.weight_decay = 0.1         # decoupled weight decay (Zoology's default)
  c.batch_size = 64            # sequences per micro-batch
  c.num_train_steps = 20000    # micro-batch steps in total (1.28M sequences)
  c.eval_every = 1000          # steps between evaluations (and at the end)
  c.eval_batches = 16          # held-out batches per evaluation (fixed, from a seed no
                               # train step uses)
  c.eval_batch_size = 64       # sequences per eval batch
  c.checkpoint_every = 5000    # steps between checkpoints (and at the end)
  return base.with_preset(c, preset, PRESETS)


def cpu(c):
  """The study's cells (results/archive/variants_mqar_short/): width 64 with one head (as
  Zoology's attention), 64 tokens with 4 pairs, vocabulary 64, 1500 steps of 32: about 30
  CPU-seconds on one core. studies/recall/mqar.py varies width, tokens and pairs from
  here.

  A short causal convolution (4 taps, model.short_conv) on every self-attention's
  input, for every variant. Why: without it, 1500-3000 steps of 32 sequences (Zoology
  trains 64 epochs of 100 000) left softmax's recall to chance. At width 64 with 8
  pairs it learnt recall in 5 of 10 seeds and sat near 30% in the others (the plateau
  before an induction head forms, whose length varies by seed), linear in 1 of 10:
  results/variants_mqar/ at commit abcbe5a. Rotary or learned positions, batch 128,
  or 16 pairs at 128 tokens left seeds on that plateau too. The convolution hands each
  position its predecessors (H3's shift, Zoology's BaseConv, the short convolutions
  of Mamba, GLA and DeltaNet); with it softmax passed 99% by step 1125 at widths 32
  and 64 in each seed tried (seeds 2 and 3 among them, two that had stalled), and
  what still parts the variants is recall itself. One of those runs:
    python train.py --config=configs/mqar.py:cpu --config.mqar.num_pairs=8 \
      --config.seed=2 --workdir=workdirs/mqar_s2
  (--config.model.short_conv=0 --config.num_train_steps=3000: the stall).
  Why one head: with heads of 16 (4 at width 64) softmax stalled at 53-55% at rate
  3e-3 through 3000-4000 steps, where one head of 64 at 1e-3 was past 99% by step
  1000 (both without the convolution)."""
  c.mqar.vocab_size = 64       # V: 31 keys, 32 values; small, so that the output layer
                               # does not dominate a CPU step (Zoology: 8192)
  c.mqar.num_pairs = 4         # P: Zoology's 4 pairs at 64 tokens
  c.mqar.seq_len = 64          # T: tokens per sequence
  c.model.vocab_size = 64      # = mqar.vocab_size
  c.model.d_model = 64         # model width
  c.model.num_heads = 1        # one head of 64 (Zoology's attention)
  c.model.d_ff = 128           # MLP width: 2 x d_model
  c.model.max_len = 64         # positions: mqar.seq_len
  c.model.short_conv = 4       # causal depthwise taps on each attention input (docstring)
  c.batch_size = 32            # sequences per micro-batch
  c.num_train_steps = 1500     # micro-batch steps in total
  c.learning_rate = 1e-3       # peak learning rate (the study chooses it per variant)
  c.warmup_steps = 50          # linear warmup steps
  c.eval_every = 500           # steps between evaluations (and at the end)
  c.eval_batches = 8           # 8 x 64 held-out sequences: 2048 queries at 4 pairs
  c.log_every = 50             # steps between train-loss records
  c.checkpoint_every = 1500    # at the end only
  c.model.attention_options = {"local": {"window": 16}, "reformer": {"chunk_size": 16}}


def gpu(c):
  """Zoology's longest cell of Figure 2: 512 tokens with 64 pairs, width 256."""
  c.mqar.num_pairs = 64        # P
  c.mqar.seq_len = 512         # T
  c.model.max_len = 512        # positions: mqar.seq_len
  c.model.d_model = 256        # model width
  c.model.num_heads = 1        # one head, as Zoology's attention
  c.model.d_ff = 512           # MLP width
  c.model.attention_options = {"local": {"window": 128}, "reformer": {"chunk_size": 64}}


PRESETS = {"cpu": cpu, "gpu": gpu}    # base.with_preset
