"""`make demo`: the MNIST pixel model sized for 10 minutes on 2 CPU cores.

configs/mnist.py's cpu preset (its linear-attention model on MNIST area-downsampled to
14×14, 196 pixels per image instead of 784, batch 32) trained for 800 steps instead
of 300: the point of the measured frontier (results/mnist_demo/README.md,
scripts/demo_frontier.py) that fits the demo's budget, classifier training and
evaluation included. The 28×28 task is configs/mnist.py.
"""
from configs import mnist


def get_config():
  c = mnist.get_config("cpu")
  c.num_train_steps = 800      # micro-batch steps in total
  c.eval_every = 400           # steps between evaluations (and at the end)
  c.checkpoint_every = 400     # steps between checkpoints (and at the end)
  c.log_every = 20             # steps between train-loss records
  c.model.attention_options = {}   # linear attention's defaults (the preset's options
                                   # are for the variants of results/variants_mnist/)
  return c
