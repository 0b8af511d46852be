"""attnlab's tasks, one module each, read through one registry (data/tasks/registry.py).

  from data import tasks
  tasks.names()                   # sorted registered task names
  tasks.task(name)                # -> TaskRecord: pipeline, metric and label, splits,
                                  #    sequence keys and lengths, model kind, checks,
                                  #    evaluator, datasets, config file, smoke run,
                                  #    and what the studies know of it (.study)
  tasks.with_role("causal_lm")    # the task a study picks by its role (Study.roles)
  tasks.variants_tasks()          # the tasks with a variants page, in the pages' order
  tasks.create(config)            # -> the data.pipeline.Task of config.task
  with tasks.registered(TaskRecord(...)): ...   # a task of your own, for a while

Every module here but `registry` and `outputs` (the machinery) and `_`-named ones is a
task module: importing it registers its task, and this package imports every such
module, so a new task is one file beside them (its batches: a `data.pipeline.Task`
subclass, in that file or in data/pipeline.py) plus its config, configs/<name>.py.
"""
from data.tasks.registry import (KINDS, METRICS, SPLITS, Study, TaskRecord, UnknownTask,
                                 create, names, register, registered, task, unregister,
                                 variants_tasks, with_role)

MACHINERY = ("registry", "outputs")


def _import_tasks() -> None:
  import importlib
  import pkgutil
  for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not m.ispkg and not m.name.startswith("_") and m.name not in MACHINERY:
      importlib.import_module(f"{__name__}.{m.name}")


_import_tasks()

__all__ = ["KINDS", "MACHINERY", "METRICS", "SPLITS", "Study", "TaskRecord", "UnknownTask",
           "create", "names", "register", "registered", "task", "unregister",
           "variants_tasks", "with_role"]
