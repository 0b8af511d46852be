"""`make demo`: the MNIST pixel model sized for 10 minutes on 2 CPU cores.

configs/mnist.py's linear-attention model on MNIST area-downsampled to 14×14 (196
pixels per image instead of 784), trained for 800 steps of batch 32: the point of the
measured frontier (results/mnist_demo/README.md, scripts/demo_frontier.py) that fits
the demo's budget, classifier training and evaluation included. The 28×28 task is
configs/mnist.py.
"""
from configs import mnist


def get_config():
  c = mnist.get_config()
  c.image_size = 14            # 14×14 images (area-downsampled), 196 tokens each
  c.model.max_len = 196        # positions: one per pixel
  c.batch_size = 32            # sequences per micro-batch
  c.learning_rate = 3e-3       # peak learning rate (cosine schedule, 50 warmup steps)
  c.num_train_steps = 800      # micro-batch steps in total
  c.eval_every = 400           # steps between evaluations (and at the end)
  c.checkpoint_every = 400     # steps between checkpoints (and at the end)
  return c
