"""attnlab's data layer: raw files (`fetch`), TFDS datasets (`builders`, the user's
own text files among them), the input pipelines (`pipeline`), the task registry
(`tasks`: one module per task, its record read by the trainer), the synthetic tasks
(`copy_task`, `mqar`, `listops`), the packer of variable-length examples into
fixed-length rows with segment ids (`packing`), the code corpus of the text task
(`pycode`: pinned PyPI sdists, data/README.md) and Zoology's recall positions
(`recall`). No TensorFlow is needed.

  prepare / `make data`   raw files -> <data_dir> (default <repo>/.data);
                          the command line: python -m data fetch|build
  require                 verified raw file paths, or a one-line DataError
  load(name, split)       random-access TFDS source (array_record)
  mnist_arrays, shakespeare_ids, multi30k_pairs   whole splits as numpy / str
  vocab_shakespeare, multi30k_spm                  vocabularies
  copy_batch                                       copy-task batches
  mqar_batch                                       associative-recall batches (Zoology)
  recall_mask                                      recall positions of byte windows

Names are imported lazily, so `import data` (and `python -m data fetch`) does
not load TFDS until a builder is used.
"""
import importlib

_EXPORTS = {
    "DataError": "data.fetch", "FILES": "data.fetch",
    "default_data_dir": "data.fetch", "default_mirror": "data.fetch",
    "prepare": "data.fetch", "require": "data.fetch",
    "BUILDERS": "data.builders", "build": "data.builders",
    "builder": "data.builders", "decode_chars": "data.builders",
    "encode_chars": "data.builders", "load": "data.builders",
    "mnist_arrays": "data.builders", "multi30k_pairs": "data.builders",
    "multi30k_spm": "data.builders", "shakespeare_ids": "data.builders",
    "vocab_shakespeare": "data.builders",
    "copy_batch": "data.copy_task",
    "mqar_batch": "data.mqar",
    "recall_mask": "data.recall",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
  if name in _EXPORTS:
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
  raise AttributeError(f"module 'data' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_EXPORTS))
