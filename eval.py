"""Evaluates a trained workdir: test metrics, samples, pictures and generation speed.

  python eval.py --workdir=workdirs/mnist [--step=N] [--decode_mode=cache|recompute]
      [--eval_batches=N] [--eval_seq_len=N] [--out=DIR] [--seed=S]
  python eval.py --pretrained=mnist14_linear [...]   # a shipped model (pretrained/)

A thin `main` (as train.py) over `trainer.evaluate.evaluate_workdir`, which says what
it writes: workdir/eval/eval.json with eval_loss and the task metric on the test split
where the run holds one out (every shipped config does; a run without one, e.g. an
old Shakespeare run with test_fraction 0, is scored on validation, and one line says
so: "no test split: this figure is validation"), its name always recorded as
eval_split; over the whole split unless --eval_batches=N limits it to N batches of
eval_batch_size sequences (the copy and MQAR tasks, whose splits are generator
streams, score 16 batches, or N); and the task's samples, pictures and generation
speed beside it (its registry record's evaluator, data/tasks/). A shipped
model (trainer/pretrained.py; its checksum checked) is evaluated the same way, into
workdirs/pretrained/<name>/ unless --out says otherwise. A mistake (no such workdir,
missing data, a corrupt shipped model) ends in one line on stderr and exit status 1.
"""
from __future__ import annotations

from absl import app, flags, logging

from trainer import evaluate
from trainer.cli import fail, parse_flags, user_errors

flags.DEFINE_string("workdir", None, "a train.py workdir (or a shipped model)")
flags.DEFINE_string("pretrained", None, "a shipped model's name (pretrained/<name>) or "
                    "folder, instead of --workdir")
flags.DEFINE_integer("step", None, "checkpoint step (default: the latest)")
flags.DEFINE_string("out", None, "output folder (default: workdir/eval; a shipped model: "
                    "workdirs/pretrained/<name>)")
flags.DEFINE_enum("decode_mode", "auto", ["auto", "cache", "recompute"],
                  "generation mode (auto: the decode state where the model's decoder "
                  "attention has one, else recompute)")
flags.DEFINE_integer("eval_batches", 0, "batches of eval_batch_size sequences of the "
                     "test split (validation where the run has none) to score (BLEU: "
                     "that many batches of sentences); 0 = the whole split")
flags.DEFINE_integer("eval_seq_len", None, "shakespeare, text: tokens per evaluation "
                     "window (default: the training length); longer than model.max_len "
                     "only for positions that extrapolate")
flags.DEFINE_integer("seed", 0, "sampling seed")
flags.register_multi_flags_validator(
    ["workdir", "pretrained"], lambda f: (f["workdir"] is None) != (f["pretrained"] is None),
    message="give exactly one of --workdir and --pretrained")


def main(argv):
  if len(argv) > 1:
    fail(f"unexpected arguments {argv[1:]}")
  logging.set_verbosity(logging.WARNING)   # orbax logs every restore at INFO
  F = flags.FLAGS
  kw = {} if F.eval_seq_len is None else {"eval_seq_len": F.eval_seq_len}
  evaluate.evaluate_workdir(F.workdir or F.pretrained, step=F.step, out=F.out,
                            decode_mode=F.decode_mode, seed=F.seed,
                            eval_batches=F.eval_batches, **kw)


if __name__ == "__main__":
  app.run(user_errors(main), flags_parser=parse_flags)
