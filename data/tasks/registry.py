"""The one registry that maps a task name to everything the project knows about it.

In the image of the attention registry (attention/core/registry.py): each module of
data/tasks/ declares one task as a `TaskRecord` and registers it on import, and
`data.tasks` imports every such module, so a new task is one file there (plus its
config file, configs/<name>.py). The trainer never branches on a task's name: it
reads the record (`task(config.task)`): the model kind it needs, the config keys of
its sequence lengths, its checks, its metric, the split eval.py reports, and the
evaluator that writes its samples. Nor do the studies: they read its `study` (a
`Study`: its variants pages, their metric and sections, its ties and timings).

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
class Study:
  """What the studies (studies/) know of a task, so that no study names one: a new
  task's pages, ties and timings are its record's, not a table's in studies/. Every
  field has a default: a task no study runs leaves them all.

  metric:   (key in eval.json, label, higher is better, format) of the quality figure
            of a variants page's rows (studies.variants.measure.METRIC); None: the
            task has no variants page (studies.variants.config.TASKS lists those that
            have one).
  exact_percent: the figure is a fraction printed with the decimals that tell it from
            100% and 0% (studies.variants.measure.Pct), not in `metric`'s format alone.
  test_label: the metric's label on a page following the protocol (version >= 1: every
            row on the test split) where it differs from `metric`'s; "": the same.
  validation_label: the metric as the protocol's rate choice reads it, on the
            validation split (studies/PROTOCOL.md rule 1).
  train_metric: the metric as train.py records it during training (the page's
            quality-vs-time curve).
  decode:   (key in eval.json, unit) of its generation speed; (None, ""): none (a
            classifier).
  in_bits:  the unit of the figure in bits where it is in nats, printed beside it
            (e.g. "bits/char"); "": none.
  solved:   (key, threshold): the first in-training evaluation with the key at or over
            the threshold is the step it is solved at; None: not recorded.
  validation_overrides: the config overrides of its whole-split evaluation on
            validation (the protocol's rate selection: no sampling, no completions).
  test_overrides: config -> the config overrides of a row's evaluation on test (the
            whole split where a preset evaluates a subset in training).
  sections: the page's own sections beyond the tables (studies.variants.notes.NOTES:
            "solved", "state", "completion", "lra", "samples", "bleu_signature"); the
            rows keep what they print (a text sample, the BLEU signature).
  config_keys: the config keys the page's config line states beside the model's.
  presets:  its variants pages: the presets of configs/<name>.py that have one
            (results/variants_<name> for "cpu", results/variants_<name>_<preset> for
            another).
  order:    its column in the variants summary (results/README.md), left to right.
  lr_tie:   differences of the metric that one seed does not resolve: rates within it
            of the best tie in the lr sweep (studies.variants.compare.LR_TIE).
  tie:      the protocol's tie, written down (studies.core.protocol.TIES); None: none.
  data_overrides: the config under which it holds out its validation and test splits
            (fields whose neutral value is the old behaviour).
  reference: its page's reference section: a key of studies.core.references.
            VARIANT_PAGES; "": none.
  timing:   {preset: (short, long, log_every) steps} of its timing runs
            (studies.bench.preset_times: "cpu" and any other preset timed).
  roles:    what a study picks it for: "causal_lm" (the causal LM of the decision
            page's Pareto plots, of the MLA training study and the tie the length study
            starts from), "recall" (the associative-recall task whose tie the
            recall-at-equal-memory study's rate grid uses).
  """
  metric: tuple[str, str, bool, str] | None = None
  exact_percent: bool = False
  test_label: str = ""
  validation_label: str = ""
  train_metric: str = ""
  decode: tuple[str | None, str] = (None, "")
  in_bits: str = ""
  solved: tuple[str, float] | None = None
  validation_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  test_overrides: Callable[[Any], dict] = _none
  sections: tuple[str, ...] = ()
  config_keys: tuple[str, ...] = ()
  presets: tuple[str, ...] = ()
  order: int = 0
  lr_tie: float | None = None
  tie: float | None = None
  data_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  reference: str = ""
  timing: Mapping[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
  roles: tuple[str, ...] = ()


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
  study:    what the studies know of it (`Study`: its variants pages, their metric
            and sections, its ties and timings, the roles a study picks it for);
            Study(): no study runs it.
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
  study: Study = Study()

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


def variants_tasks() -> list[str]:
  """The names of the tasks with a variants page (a Study.metric), in the summary's
  order (Study.order, then by name)."""
  return sorted((n for n in names() if _REGISTRY[n].study.metric),
                key=lambda n: (_REGISTRY[n].study.order, n))


def with_role(role: str) -> str:
  """The name of the one registered task whose study names `role` (Study.roles); none
  or several is an error naming them."""
  found = [n for n in names() if role in _REGISTRY[n].study.roles]
  if len(found) != 1:
    raise ValueError(f"{len(found)} tasks have the study role {role!r} "
                     f"({', '.join(found) or 'none'}); one must")
  return found[0]


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
