"""Tiny Shakespeare, character level: a decoder-only LM reporting bits/char.

Presets (`--config=configs/shakespeare.py:cpu`): nanoGPT's shakespeare_char CPU
config (4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 iterations, no dropout)
and its GPU config (6 x 6 x 384, block 256, batch 64, dropout 0.2, 5000 iterations).
Both are what results/variants_shakespeare/ trains; configs/README.md times them.
"""
from configs import base


def get_config(preset: str = ""):
  c = base.get_config()
  c.task = "shakespeare"     # the data and metric (its record: data/tasks/shakespeare.py)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=65, attention="softmax", d_model=128, num_heads=4,
      d_ff=512, num_layers=4, max_len=256, pre_ln=True, dropout=0.1)
  c.seq_len = 256              # characters per training sequence (<= model.max_len)
  c.eval_seq_len = 0           # characters per evaluation window (0: seq_len); longer
                               # than model.max_len only for positions that extrapolate
                               # (sinusoidal, rope, alibi, none; not learned)
  c.test_fraction = 0.05       # the last 5% of the training characters held out as the
                               # test split eval.py reports (studies/PROTOCOL.md's; 0:
                               # none, train on all, as every run before issue 97)
  c.learning_rate = 1e-3     # peak learning rate for this task
  c.batch_size = 32          # sequences per micro-batch
  c.num_train_steps = 2000   # micro-batch steps in total
  c.prompt = "ROMEO:"          # eval.py: the prompt of the text samples
  c.sample_len = 200           # eval.py: characters generated per sample
  c.temperature = 0.8          # eval.py: sampling temperature
  return base.with_preset(c, preset, PRESETS)


def cpu(c):
  """nanoGPT's shakespeare_char CPU settings: minutes on 2 CPU cores."""
  c.seq_len = 64               # nanoGPT's block_size 64
  c.batch_size = 12            # nanoGPT's batch_size 12
  c.num_train_steps = 2000     # nanoGPT's max_iters 2000
  c.warmup_steps = 100         # linear warmup steps
  c.eval_every = 250           # steps between evaluations (and at the end)
  c.eval_batches = 0           # the whole validation split per evaluation
  c.eval_batch_size = 64       # sequences per eval batch
  c.log_every = 50             # steps between train-loss records
  c.checkpoint_every = 500     # steps between checkpoints (and at the end)
  c.model.dropout = 0.0        # nanoGPT's CPU config has none
  # a local window / LSH chunk of 16 characters: a quarter of the 64 trained on
  c.model.attention_options = {"local": {"window": 16}, "reformer": {"chunk_size": 16}}


def gpu(c):
  """nanoGPT's shakespeare_char GPU settings (6 x 6 x 384, block 256)."""
  c.seq_len = 256              # nanoGPT's block_size 256
  c.batch_size = 64            # nanoGPT's batch_size 64
  c.num_train_steps = 5000     # nanoGPT's max_iters 5000
  c.learning_rate = 1e-3       # nanoGPT's learning_rate
  c.warmup_steps = 100         # nanoGPT's warmup_iters 100
  c.b2 = 0.99                  # nanoGPT's beta2
  c.weight_decay = 0.1         # nanoGPT's weight_decay
  c.eval_every = 500           # steps between evaluations (and at the end)
  c.eval_batches = 0           # the whole validation split per evaluation
  c.eval_batch_size = 64       # sequences per eval batch
  c.log_every = 100            # steps between train-loss records
  c.checkpoint_every = 1000    # steps between checkpoints (and at the end)
  c.model.d_model = 384        # nanoGPT's n_embd
  c.model.num_heads = 6        # nanoGPT's n_head
  c.model.d_ff = 1536          # 4 x n_embd
  c.model.num_layers = 6       # nanoGPT's n_layer
  c.model.dropout = 0.2        # nanoGPT's dropout
  # a local window / LSH chunk of 64 characters: a quarter of the 256 trained on
  c.model.attention_options = {"local": {"window": 64}, "reformer": {"chunk_size": 64}}


PRESETS = {"cpu": cpu, "gpu": gpu}    # base.with_preset
