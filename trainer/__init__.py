"""The training library behind train.py and eval.py (Flax-examples style: train.py is
a thin `main`, everything here is importable and tested).

  config.py      validate(config), make_optimizer(config), the config vocabularies
  checkpoint.py  orbax checkpoints, make_model, load_model(workdir)
  step.py        the jitted functional train step (TrainStep), evaluate, bleu
  loop.py        train_and_evaluate(config, workdir)
  evaluate.py    evaluate_workdir(workdir): eval.py's test metrics, samples, timings
  digit_judge.py the MNIST digit classifier that reads completed images (eval.py's
                 completion metric), trained on demand into the data dir
  metrics.py     metrics.jsonl / TensorBoard / stdout, runtime_info()
  parallel.py    the device mesh, shardings and the multi-host setup
  pretrained.py  the shipped pretrained models (pretrained/)
  cli.py         one-line errors for the command line

The public API, for scripts, studies and other projects (`import trainer`):

  trainer.train_and_evaluate(config, workdir) -> the last metrics (dict)
  trainer.load_model(workdir) -> (config, model, step): the run's ml_collections config,
      its Flax model restored from the newest checkpoint, and that checkpoint's step
  trainer.validate(config), trainer.make_optimizer(config),
      trainer.evaluate_model(model, task, config) -> test metrics, trainer.TrainError,
      ... (`__all__`)

Names are imported lazily (PEP 562), so `from trainer import cli` stays cheap.
"""
import importlib

_EXPORTS = {
    "checkpoint_manager": "trainer.checkpoint", "load_model": "trainer.checkpoint",
    "make_model": "trainer.checkpoint", "restore": "trainer.checkpoint",
    "save": "trainer.checkpoint", "saved_part": "trainer.checkpoint",
    "trained_part": "trainer.checkpoint",
    "DTYPES": "trainer.config", "OPTIMIZERS": "trainer.config",
    "PRECISIONS": "trainer.config", "REMATS": "trainer.config",
    "SCHEDULES": "trainer.config",
    "TrainError": "trainer.config", "check_eval_length": "trainer.config",
    "check_mesh": "trainer.config", "make_optimizer": "trainer.config",
    "matmul_precision": "trainer.config", "model_dict": "trainer.config",
    "validate": "trainer.config",
    "train_and_evaluate": "trainer.loop",
    "Metrics": "trainer.metrics", "runtime_info": "trainer.metrics",
    "TrainStep": "trainer.step", "bleu": "trainer.step", "eval_step": "trainer.step",
    "loss_fn": "trainer.step",
    # trainer.step.evaluate under another name: `trainer.evaluate` is the module
    # behind eval.py (evaluate_workdir)
    "evaluate_model": ("trainer.step", "evaluate"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
  if name in _EXPORTS:
    module, attr = _EXPORTS[name] if isinstance(_EXPORTS[name], tuple) else (
        _EXPORTS[name], name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value          # once: later lookups (and monkeypatches) see it
    return value
  raise AttributeError(f"module 'trainer' has no attribute {name!r}")
