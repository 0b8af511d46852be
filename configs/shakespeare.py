"""Tiny Shakespeare, character level: a decoder-only LM reporting bits/char."""
from configs import base


def get_config():
  c = base.get_config()
  c.task = "shakespeare"     # the data and metric (see input_pipeline.TASKS)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=65, attention="softmax", d_model=128, num_heads=4,
      d_ff=512, num_layers=4, max_len=256, pre_ln=True, dropout=0.1)
  c.seq_len = 256              # characters per training sequence (<= model.max_len)
  c.eval_seq_len = 0           # characters per evaluation window (0: seq_len); longer
                               # than model.max_len only for positions that extrapolate
                               # (sinusoidal, rope, alibi, none; not learned)
  c.learning_rate = 1e-3     # peak learning rate for this task
  c.batch_size = 32          # sequences per micro-batch
  c.num_train_steps = 2000   # micro-batch steps in total
  c.prompt = "ROMEO:"          # eval.py: the prompt of the text samples
  c.sample_len = 200           # eval.py: characters generated per sample
  c.temperature = 0.8          # eval.py: sampling temperature
  return c
