"""Multi30k English -> German with an encoder-decoder, scored by BLEU (sacrebleu).

Presets (`--config=configs/multi30k.py:cpu`) are what results/archive/variants_multi30k/
trained; configs/README.md times them.
"""
from configs import base


def get_config(preset: str = ""):
  c = base.get_config()
  c.task = "multi30k"        # the data and metric (its record: data/tasks/multi30k.py)
  c.spm_vocab_size = 8000      # shared sentencepiece vocabulary trained on the train split
  c.src_len = 64               # source tokens per example (longer ones are truncated)
  c.tgt_len = 64               # target tokens incl. EOS (longer ones are truncated)
  c.length_buckets = (16, 24, 32, 48, 64)  # train batches group sentences of similar
                               # length, cut to the smallest bucket that holds them (one
                               # compile per bucket; () = every batch src_len/tgt_len wide)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="encdec", vocab_size=8000, attention="softmax", d_model=256, num_heads=4,
      d_ff=1024, num_layers=3, max_len=65, dropout=0.1, share_embeddings=True,
      tie_output=True)
  c.learning_rate = 5e-4     # peak learning rate for this task
  c.warmup_steps = 500       # linear warmup steps
  c.batch_size = 64          # sequences per micro-batch
  c.num_train_steps = 5000   # micro-batch steps in total
  c.beam_size = 4              # eval.py / BLEU: beam width (0 = greedy)
  c.length_penalty = 0.6       # eval.py / BLEU: GNMT alpha
  c.bleu_sentences = 256       # BLEU: validation sentences translated per eval in
                               # training (eval.py translates the whole test split)
  return base.with_preset(c, preset, PRESETS)


# Sentences are at most 64 tokens: the efficient variants get options that make them
# differ from full attention at that length (their defaults, a window of 128 and
# 64-slot projections or chunks, would attend to every token): a local window and LSH
# chunk of 16, linformer's 16 slots, sparse stride 8 = sqrt(64) fixed (its default
# depends on each batch's length). Both presets: the sentences are as short on a GPU.
SHORT_OPTIONS = {"local": {"window": 16}, "reformer": {"chunk_size": 16},
                 "linformer": {"k_proj": 16}, "sparse": {"stride": 8}}


def cpu(c):
  """The 3+3-layer 256-wide model for 1600 steps of 64 pairs (about 3.5 epochs): under
  30 minutes on 2 CPU cores."""
  c.num_train_steps = 1600     # micro-batch steps in total
  c.learning_rate = 1e-3       # a higher peak than 5e-4 for so few steps
  c.warmup_steps = 300         # linear warmup steps
  c.eval_every = 800           # steps between evaluations (and at the end)
  c.eval_batches = 4           # eval batches per evaluation (0 = the whole split)
  c.log_every = 50             # steps between train-loss records
  c.checkpoint_every = 800     # steps between checkpoints (and at the end)
  c.bleu_sentences = 256       # BLEU: validation sentences per eval in training
  c.model.attention_options = SHORT_OPTIONS


def gpu(c):
  """A 512-wide model (transformer-base widths, 3+3 layers), 10000 steps of 128 pairs."""
  c.num_train_steps = 10000    # micro-batch steps in total
  c.batch_size = 128           # sentence pairs per micro-batch
  c.eval_every = 2000          # steps between evaluations (and at the end)
  c.eval_batches = 0           # the whole validation split per evaluation
  c.log_every = 100            # steps between train-loss records
  c.checkpoint_every = 2000    # steps between checkpoints (and at the end)
  c.bleu_sentences = 1014      # BLEU: the whole validation split per evaluation
  c.model.d_model = 512        # model width
  c.model.num_heads = 8        # heads of 64
  c.model.d_ff = 2048          # MLP width
  c.model.num_layers = 3       # encoder and decoder layers each
  c.model.dropout = 0.1        # residual and attention dropout
  c.model.attention_options = SHORT_OPTIONS


def cpu_packed(c):
  """The cpu preset on packed rows (config.packing, data.pipeline): 16 rows of 64 + 64
  tokens hold ~61 pairs, about the 64 of the cpu preset's bucketed batches, with ~4%
  of the computed tokens padding instead of ~25% (results/packing)."""
  cpu(c)
  c.packing = True             # several pairs per row, segment ids, per-pair positions
  c.batch_size = 16            # packed rows per micro-batch (~3.8 pairs each)


PRESETS = {"cpu": cpu, "cpu_packed": cpu_packed, "gpu": gpu}    # base.with_preset
