"""MNIST as a 784-pixel sequence: the image-completion model of Katharopoulos et al.

A small linear-attention pixel LM with a 10-component discretised logistic mixture
head. Presets (`--config=configs/mnist.py:cpu`) are what results/variants_mnist/
trains; configs/README.md times them. `make demo` (configs/mnist_demo.py) is the cpu
preset trained longer.
"""
from configs import base


def get_config(preset: str = ""):
  c = base.get_config()
  c.task = "mnist"           # the data and metric (its record: data/tasks/mnist.py)
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
                               # digit judge (trainer/digit_judge.py); 0 = skip
  return base.with_preset(c, preset, PRESETS)


def cpu(c):
  """The model on MNIST area-downsampled to 14×14 (196 pixels), 300 steps of 32: every
  variant of results/variants_mnist/ in about 45 minutes on 2 CPU cores."""
  c.image_size = 14            # 14×14 images, 196 tokens each
  c.model.max_len = 196        # positions: one per pixel
  c.batch_size = 32            # sequences per micro-batch
  c.learning_rate = 3e-3       # peak learning rate (cosine schedule, 50 warmup steps)
  c.num_train_steps = 300      # micro-batch steps in total
  c.eval_every = 150           # steps between evaluations (and at the end)
  c.checkpoint_every = 150     # steps between checkpoints (and at the end)
  c.log_every = 25             # steps between train-loss records
  # a local window / LSH chunk of 28 pixels: two image rows
  c.model.attention_options = {"local": {"window": 28}, "reformer": {"chunk_size": 28}}


def gpu(c):
  """The 28×28 task with an 8-layer 256-wide model, 10000 steps, for one GPU."""
  c.num_train_steps = 10000    # micro-batch steps in total
  c.batch_size = 32            # sequences per micro-batch
  c.eval_every = 2000          # steps between evaluations (and at the end)
  c.eval_batches = 0           # the whole test split per evaluation
  c.checkpoint_every = 2000    # steps between checkpoints (and at the end)
  c.log_every = 100            # steps between train-loss records
  c.model.d_model = 256        # model width
  c.model.num_heads = 8        # heads of 32
  c.model.d_ff = 1024          # MLP width
  c.model.num_layers = 8       # layers


PRESETS = {"cpu": cpu, "gpu": gpu}    # base.with_preset
