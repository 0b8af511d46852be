"""text: a byte-level LM over your own text files, by flag:

  python train.py --config=configs/text.py:cpu --config.text.files='notes/**/*.md' \
      --workdir=workdirs/notes

Each file is a document; documents go to train / validation / test by a hash of
their names (data.builders.text_corpus, text_split: stable, stated there); training
windows are cut inside documents; the vocabulary is the 256 byte values; scored in
bits per byte (the metric bits_per_char, one character = one byte here). eval.py
samples text continuing config.prompt, as for Tiny Shakespeare.
"""
import os

from data import builders, pipeline
from data.tasks.outputs import text_samples
from data.tasks.registry import TaskRecord, register


def _has_test(config) -> bool:
  """Whether the corpus has a test document (3 or more files always do): stats the
  files, reads none."""
  t = config.text
  corpus = builders.text_corpus(t.files, float(t.validation_fraction),
                                float(t.test_fraction))
  return bool(corpus.names("test"))


def _check(config, mcfg) -> None:
  """The split fractions are fractions of the corpus that leave train some."""
  t = config.text
  v, s = t.validation_fraction, t.test_fraction
  for key, f in (("text.validation_fraction", v), ("text.test_fraction", s)):
    if not isinstance(f, (int, float)) or not 0 <= f < 1:
      from models import ConfigError
      raise ConfigError(f"config '{key}': must be a fraction in [0, 1), got {f!r}")
  if v + s >= 1:
    from models import ConfigError
    raise ConfigError(f"config 'text.test_fraction': validation {v} + test {s} leave no "
                      "document to train on")


SMOKE_FILES = {       # the smoke run's corpus: 4 documents, each split has one
    "a.txt": "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 8,
    "b.md": "# Notes\n\nWindows are cut inside documents, never across two. " * 8,
    "c/d.txt": "Ünïcödé bytes: each character may take several of them.\n" * 8,
    "e.txt": "The quick brown fox jumps over the lazy dog.\n" * 8,
}


def _smoke(folder: str) -> dict:
  """Writes SMOKE_FILES under folder/text_corpus; its config overrides."""
  root = os.path.join(folder, "text_corpus")
  for name, body in SMOKE_FILES.items():
    os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    with open(os.path.join(root, name), "w", encoding="utf-8") as f:
      f.write(body)
  return dict(text=dict(files=root), seq_len=8, prompt="Th", sample_len=6)


TASK = register(TaskRecord(
    name="text",
    pipeline=pipeline.Text,
    metric="bits_per_char", label="bits/byte",
    splits={"train": "the files whose name hashes past validation and test "
                     "(data.builders.text_split)",
            "validation": "the files whose name hashes into text.validation_fraction "
                          "(at least one: a corpus needs 2 files)",
            "test": "the files whose name hashes into text.test_fraction (at least one "
                    "where there are 3 files or more)"},
    seq_key="seq_len",
    lengths=lambda c: {"seq_len": int(c.seq_len)},
    has_test=_has_test,
    check=_check,
    free_eval_length=True,
    evaluator=text_samples,
    smoke=_smoke))
