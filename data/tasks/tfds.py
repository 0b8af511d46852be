"""tfds: any TFDS image dataset by name (config.tfds_name) as a pixel-sequence LM, its
images H*W*C tokens in raster order (data.pipeline.TfdsImages)."""
from data import pipeline
from data.tasks.registry import TaskRecord, register

TASK = register(TaskRecord(
    name="tfds",
    pipeline=pipeline.TfdsImages,
    metric="bits_per_dim", label="bits/dim",
    splits={"train": "the first split of config.tfds_splits (TFDS slicing allowed), less "
                     "the last mnist_validation images",
            "validation": "the last mnist_validation training images (0, the default: "
                          "the second split)",
            "test": "the second split of config.tfds_splits"},
    seq_key="tfds_name",        # its length is known once the images are read
    config="configs/tfds_images.py",
    datasets=("mnist",),        # the smoke run reads the project's own attnlab_mnist
    smoke=lambda folder: dict(tfds_name="attnlab_mnist", num_train_steps=1,
                              eval_every=1, checkpoint_every=1, log_every=1,
                              tfds_splits="train[:64],test[:8]",
                              model=dict(max_len=784))))
