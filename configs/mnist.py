"""MNIST as a 784-pixel sequence: the image-completion model of Katharopoulos et al.

A small linear-attention pixel LM with a 10-component discretised logistic mixture
head; `make demo` trains it for a few minutes on 2 CPU cores.
"""
from configs import base


def get_config():
  c = base.get_config()
  c.task = "mnist"           # the data and metric (see input_pipeline.TASKS)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=256, head="dmol", num_mixtures=10, attention="linear",
      d_model=64, num_heads=4, d_ff=256, num_layers=2, max_len=784, pre_ln=True,
      dropout=0.0)
  c.learning_rate = 2e-3     # peak learning rate for this task
  c.warmup_steps = 50        # linear warmup steps
  c.batch_size = 16          # sequences per micro-batch
  c.num_train_steps = 400    # micro-batch steps in total
  c.eval_every = 200         # steps between evaluations (and at the end)
  c.eval_batches = 2         # eval batches per evaluation (0 = the whole split)
  c.eval_batch_size = 100    # sequences per eval batch
  c.log_every = 20           # steps between train-loss records
  c.checkpoint_every = 200   # steps between checkpoints (and at the end)
  c.image_size = 28            # images are resized to image_size² pixels (28 = original)
  c.shift = ""                 # shifted MNIST (data/shifts.py): "" | quantized | rotated |
                               # inverted, optionally ":strength", e.g. "rotated:90"
  c.num_samples = 4            # eval.py: completions per occluded test image
  c.num_images = 8             # eval.py: occluded test images in the PNG grid
  c.temperature = 1.0          # eval.py: sampling temperature of completions and samples
  c.completion_images = 500    # eval.py: test images completed once each and read by the
                               # digit judge (models/digit_judge.py); 0 = skip
  return c
