"""The one registry that maps a task name to everything the project knows about it.

In the image of the attention registry (attention/core/registry.py): each module of
data/tasks/ declares one task as a `TaskRecord` and registers it on import, and
`data.tasks` imports every such module, so a new task is one file there (plus its
config file, configs/<name>.py). The trainer never branches on a task's name: it
reads the record (`task(config.task)`): the model kind it needs, the config keys of
its sequence lengths, its checks, its metric, the split eval.py reports, and the
evaluator that writes its samples.

  from data import tasks
  tasks.names()                 # sorted registered task names
  tasks.task("shakespeare")     # -> TaskRecord; an unknown name lists the valid ones
  tasks.create(config)          # -> data.pipeline.Task: the batches of config.task
  with tasks.registered(TaskRecord(name="toy", ...)): ...   # a task of your own, for a while
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Mapping

# The model kinds a task may need (models/config.py KINDS).
KINDS = ("lm", "encdec", "classifier")
# The task metrics trainer.step.evaluate computes beside eval_loss (nats per token):
# bits_per_dim / bits_per_char (eval_loss in bits), accuracy (sequences whose every
# counted token is the teacher-forced argmax), token_accuracy (counted tokens that are),
# class_accuracy (a classifier's sequences), bleu (corpus BLEU of generated translations).
METRICS = ("bits_per_dim", "bits_per_char", "accuracy", "token_accuracy", "class_accuracy",
           "bleu")
SPLITS = ("train", "validation", "test")


def _always(config) -> bool:
  return True


def _none(config) -> dict:
  return {}


@dataclasses.dataclass(frozen=True)
class TaskRecord:
  """Everything the project knows about one task.

  name:     config.task's value.
  pipeline: config -> its batches, a `data.pipeline.Task` (train_batch(step), a pure
            function of (seed, step); eval_batches() of the split config.eval_split
            names; model_overrides; seq_len).
  metric:   the task metric recorded with eval_loss: one of METRICS.
  label:    how pages and plots name that metric, e.g. "bits/char".
  splits:   {"train" | "validation" | "test": what that split is}: the datasets it reads
            and how each split is cut from them (training evaluates on validation;
            eval.py reports test where the run has one: `has_test`).
  seq_key:  the config key that sets its (target) sequence length, named in errors.
  lengths:  config -> {config key: tokens} of every sequence axis the config alone fixes
            (checked against model.max_len and mesh.seq before anything is read); {}
            where the length is known only once the data is read (checked then).
  kind:     the model kind it needs: one of KINDS.
  has_test: config -> whether a run under config holds out a test split (eval.py
            reports it; without one it reports validation and says so).
  check:    (config, ModelConfig) -> None, or raises models.ConfigError naming the
            key: what else the task refuses before any data is read.
  model_fields: (config, model dict) -> {model field: value} the task fills from its
            own config before the model is built (e.g. rope2d's image_side).
  free_eval_length: whether its evaluation windows may have another length than
            training's (config.eval_seq_len: length extrapolation).
  evaluator: eval.py's task outputs beyond eval_loss and the metric (samples,
            pictures, translations, generation speed): fn(config, task, model, out,
            mode, key, *, workdir=None, step=None) -> dict of figures for eval.json,
            writing its files to the folder `out`; None: the metric is all.
  datasets: the raw datasets it reads (data.fetch.FILES names; `make data` prepares
            them); () for a generated task or one that reads the user's own files.
  config:   its config file (configs/<name>.py; its presets in that file's PRESETS).
  smoke:    folder -> config overrides of the smallest run that trains and evaluates
            (a handful of steps of a tiny model, with the test's model sizes): what
            the test of every registered task trains, through this record alone; it
            may write what the task reads (e.g. a few text files) into `folder`.
  """
  name: str
  pipeline: Callable[[Any], Any]
  metric: str
  label: str
  splits: Mapping[str, str]
  seq_key: str
  lengths: Callable[[Any], dict] = _none
  kind: str = "lm"
  has_test: Callable[[Any], bool] = _always
  check: Callable[[Any, Any], None] | None = None
  model_fields: Callable[[Any, dict], dict] | None = None
  free_eval_length: bool = False
  evaluator: Callable[..., dict] | None = None
  datasets: tuple[str, ...] = ()
  config: str = ""
  smoke: Callable[[str], dict] = lambda folder: {}

  def __post_init__(self):
    def bad(why):
      raise ValueError(f"task '{self.name}': {why}")
    if not self.name or not self.name.isidentifier():
      bad("its name must be an identifier (config.task, a module name)")
    if self.kind not in KINDS:
      bad(f"kind={self.kind!r}; must be one of {KINDS}")
    if self.metric not in METRICS:
      bad(f"metric={self.metric!r}; must be one of {METRICS}")
    if not set(self.splits) <= set(SPLITS) or "validation" not in self.splits:
      bad(f"splits names {sorted(self.splits)}; it needs 'validation' (and may name "
          f"{', '.join(SPLITS)})")

  @property
  def config_file(self) -> str:
    """Its config file, configs/<name>.py unless `config` says otherwise."""
    return self.config or f"configs/{self.name}.py"


_REGISTRY: dict[str, TaskRecord] = {}


def register(record: TaskRecord) -> TaskRecord:
  """Adds a task; a second registration under the same name is an error."""
  if record.name in _REGISTRY:
    raise ValueError(f"task '{record.name}' is registered twice")
  _REGISTRY[record.name] = record
  return record


def unregister(name: str) -> TaskRecord:
  """Removes `name` and returns its record (for tests and notebooks that register a
  task of their own; the built-in ones stay registered)."""
  task(name)                      # an unknown name lists the valid ones
  return _REGISTRY.pop(name)


@contextlib.contextmanager
def registered(*records: TaskRecord) -> Iterator[tuple[TaskRecord, ...]]:
  """Registers `records` for the duration of a `with` block, then removes them, also
  when the block raises, so that a test's own task never leaks into another."""
  done = []
  try:
    for r in records:
      done.append(register(r))
    yield tuple(done)
  finally:
    for r in reversed(done):
      if _REGISTRY.get(r.name) is r:
        del _REGISTRY[r.name]


def names() -> list[str]:
  """Sorted list of every registered task name."""
  return sorted(_REGISTRY)


class UnknownTask(ValueError):
  """An unknown task name; the message lists the valid ones."""


def task(name: str) -> TaskRecord:
  """The `TaskRecord` of `name`; an unknown name raises UnknownTask listing every
  valid one, in one line."""
  try:
    return _REGISTRY[name]
  except (KeyError, TypeError):
    raise UnknownTask(f"unknown task {name!r}; valid: {', '.join(names())}") from None


def create(config):
  """The batches of config.task (a data.pipeline.Task), its name and metric set from
  the record."""
  rec = task(config.task)
  t = rec.pipeline(config)
  t.name, t.metric = rec.name, rec.metric
  return t
