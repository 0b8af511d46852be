"""`make demo`: a small linear-attention pixel model that draws digits in minutes on CPU.

configs/mnist.py at 14×14: MNIST area-downsampled 2×2 (196 pixel tokens instead of
784), which is what lets a few minutes on 2 CPU cores teach the model digit shapes
rather than only strokes; larger batches and a higher peak learning rate for the same
wall time. results/mnist_demo/ has the frontier measured for this choice.
"""
from configs import mnist


def get_config():
  c = mnist.get_config()
  c.image_size = 14            # 2×2 area-averaged MNIST: 196 pixels per image
  c.model.max_len = 196
  c.batch_size = 32
  c.learning_rate = 3e-3
  c.warmup_steps = 50
  c.num_train_steps = 1200
  c.eval_every = 1200
  c.checkpoint_every = 400
  c.eval_batches = 2
  c.completion_images = 500    # eval.py: judged by the 14×14 digit classifier
  return c
