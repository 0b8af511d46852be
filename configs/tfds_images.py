"""Any TFDS image dataset as a pixel sequence (H*W*C tokens, channels interleaved).

  python train.py --config=configs/tfds_images.py --config.tfds_name=cifar10 ...

Stock datasets are prepared by TFDS under <data_dir>/tfds where the environment can
(some need TensorFlow or internet); the project's own `attnlab_mnist` always works.
"""
from configs import base


def get_config():
  c = base.get_config()
  c.task = "tfds"              # the generic TFDS image task (its record: data/tasks/tfds.py)
  c.tfds_name = "cifar10"      # a TFDS dataset with an 'image' feature
  c.tfds_splits = "train,test"  # train split, eval split (TFDS slicing allowed)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=256, head="dmol", attention="linear", d_model=64,
      num_heads=4, d_ff=256, num_layers=2, max_len=3072, pre_ln=True)
  c.batch_size = 8             # sequences per micro-batch
  c.num_train_steps = 1000     # micro-batch steps in total
  c.eval_batch_size = 16       # sequences per eval batch
  return c
