"""Trains a model under an ml_collections config: the project's one training entry point.

  python train.py --config=configs/mnist.py --workdir=workdirs/mnist \
      --config.attention=softmax --config.num_train_steps=200

This is a thin `main` over the library in trainer/ (Flax-examples style):
`train_and_evaluate(config, workdir)` (trainer/loop.py) is the testable core, and
`import trainer` is the public API for scripts, studies and other projects.
A mistake in the config, the data or the workdir ends in one line on stderr and exit
status 1; an unknown --config.<key> names the closest valid keys.
"""
from __future__ import annotations

from trainer.loop import train_and_evaluate


def main(argv):
  from absl import flags, logging
  if len(argv) > 1:
    from trainer.cli import fail
    fail(f"unexpected arguments {argv[1:]}; config fields go as --config.<key>=<value>")
  logging.set_verbosity(logging.WARNING)   # orbax logs every save at INFO
  train_and_evaluate(flags.FLAGS.config, flags.FLAGS.workdir)


if __name__ == "__main__":
  from absl import app, flags
  from ml_collections import config_flags

  from trainer.cli import parse_flags, user_errors
  config_flags.DEFINE_config_file("config", None, "ml_collections config file",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "directory for checkpoints and metrics")
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(user_errors(main), flags_parser=parse_flags)
