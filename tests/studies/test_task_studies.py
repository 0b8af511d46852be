"""What each task's record tells the studies (data/tasks/: TaskRecord.study) names things
that exist: its page's sections are notes the variants page writes, its reference section
is one of studies.core.references, its variants and timing presets are presets of its
config, and the studies' tables are read from the records. A typo in a new task's file
fails here, not on a page. Nothing here trains or compiles."""
import importlib

from data import tasks
from studies.bench import preset_times as pt
from studies.core import all_pages, protocol, references as refs
from studies.variants import compare as cv, notes


def test_every_study_names_sections_references_and_presets_that_exist():
  for name in tasks.names():
    s = tasks.task(name).study
    presets = getattr(importlib.import_module(
        tasks.task(name).config_file[:-3].replace("/", ".")), "PRESETS", {})
    assert set(s.sections) <= set(notes.NOTES) | {"state"}, name
    assert not s.reference or s.reference in refs.VARIANT_PAGES, name
    assert set(s.presets) | set(s.timing) <= set(presets), name
    # a variants page's task has a metric; presets name its live pages (none: the page
    # is archived, results/archive/, as Multi30k's is)
    assert bool(s.metric) == (name in cv.TASKS) and (bool(s.presets) <= bool(s.metric)), name
    if s.metric:
      assert s.metric[0] and s.validation_label and s.train_metric and s.lr_tie, name
      assert s.config_keys and all(k in cv.make_config(name, "cpu", cv.EXACT)
                                   for k in s.config_keys), name


def test_the_studies_tables_are_the_records():
  """The studies' tables keyed by task are read from the records, so a new task's file
  is all they need."""
  assert cv.TASKS == ("copy", "shakespeare", "multi30k", "mnist", "listops")
  assert {t: cv.METRIC[t][0] for t in cv.TASKS} == {
      t: tasks.task(t).study.metric[0] for t in cv.TASKS}
  assert type(cv.METRIC["copy"][3]) is cv.Pct and type(cv.METRIC["listops"][3]) is str
  assert protocol.TIES == {t: tasks.task(t).study.tie for t in tasks.names()
                           if tasks.task(t).study.tie is not None}
  assert set(protocol.TIES) == set(cv.TASKS) | {"mqar"}
  assert protocol.data_overrides("mnist") == {"mnist_validation": 5000}
  assert pt.EXTRA == {("listops", "cpu_long"): (2, 6, 2)} and set(pt.STEPS) == set(cv.TASKS)
  pages_ = [p.args[:2] for p in all_pages.PAGES if p.module == "scripts.compare_variants"]
  assert pages_ == [(f"--task={t}", f"--preset={p}") for t in cv.TASKS
                    for p in tasks.task(t).study.presets]
