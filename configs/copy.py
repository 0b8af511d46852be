"""The synthetic copy task of Katharopoulos et al. §4.1: `0 t1..tn 0 t1..tn`.

The loss (and the exact-match accuracy) covers the second copy only.
"""
from configs import base


def get_config():
  c = base.get_config()
  c.task = "copy"            # the data and metric (see input_pipeline.TASKS)
  c.copy_len = 32              # n: symbols per copy; sequences have 2n + 2 tokens
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=10, attention="linear", d_model=64, num_heads=4, d_ff=256,
      num_layers=2, max_len=66, pre_ln=True)
  c.learning_rate = 1e-3     # peak learning rate for this task
  c.batch_size = 32          # sequences per micro-batch
  c.num_train_steps = 2000   # micro-batch steps in total
  return c
