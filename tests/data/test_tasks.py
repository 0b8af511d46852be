"""The task registry (data/tasks/) and its first new task, `text`: every task is one
record, an unknown name lists the valid ones, the trainer and the studies name no task
(a scanner of string literals) and pick theirs from the records (Study), and the text corpus of the user's own files: its split rule, its
windows and its one-line refusals. Nothing here compiles (the end-to-end runs of every
registered task, and of a task written as one file: tests/trainer/test_train.py)."""
import ast
import pathlib

import ml_collections
import numpy as np
import pytest

from data import DataError, builders, pipeline, tasks

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_task_is_registered_with_a_record_and_its_config():
  assert tasks.names() == ["copy", "listops", "mnist", "mqar", "multi30k", "shakespeare",
                           "text", "tfds"]
  for name in tasks.names():
    rec = tasks.task(name)
    assert rec.name == name and (ROOT / rec.config_file).is_file(), name
    assert "validation" in rec.splits and rec.pipeline.no_packing is None or \
        isinstance(rec.pipeline.no_packing, str)
  with pytest.raises(tasks.UnknownTask) as e:
    tasks.task("cifar")
  assert str(e.value) == ("unknown task 'cifar'; valid: " + ", ".join(tasks.names()))
  assert "\n" not in str(e.value)


def test_a_record_that_contradicts_itself_is_refused_and_registered_leaks_nothing():
  ok = dict(name="toy", pipeline=pipeline.Copy, metric="accuracy", label="accuracy",
            splits={"validation": "v"}, seq_key="copy_len")
  with pytest.raises(ValueError, match="task 'toy': metric='bpc'"):
    tasks.TaskRecord(**{**ok, "metric": "bpc"})
  with pytest.raises(ValueError, match="task 'toy': kind='rnn'"):
    tasks.TaskRecord(**{**ok, "kind": "rnn"})
  with pytest.raises(ValueError, match="needs 'validation'"):
    tasks.TaskRecord(**{**ok, "splits": {"test": "t"}})
  with pytest.raises(RuntimeError):
    with tasks.registered(tasks.TaskRecord(**ok)):
      assert "toy" in tasks.names()
      with pytest.raises(ValueError, match="registered twice"):
        tasks.register(tasks.TaskRecord(**ok))
      raise RuntimeError
  assert "toy" not in tasks.names()


def test_the_studies_pick_their_tasks_from_the_records():
  """A task with a variants page (Study.metric) joins them in Study.order; a study's
  role names exactly one task, and none or two is an error naming them."""
  assert tasks.variants_tasks() == ["copy", "shakespeare", "multi30k", "mnist", "listops"]
  assert tasks.with_role("causal_lm") == "shakespeare"
  ok = dict(pipeline=pipeline.Copy, metric="accuracy", label="accuracy",
            splits={"validation": "v"}, seq_key="copy_len")
  paged = tasks.Study(metric=("accuracy", "accuracy", True, "{:.1%}"), order=1,
                      roles=("causal_lm",))
  with tasks.registered(tasks.TaskRecord(name="toy", study=paged, **ok),
                        tasks.TaskRecord(name="plain", **ok)):
    assert tasks.variants_tasks() == ["copy", "shakespeare", "toy", "multi30k", "mnist",
                                      "listops"]
    with pytest.raises(ValueError, match=r"2 tasks have the study role 'causal_lm' "
                                         r"\(shakespeare, toy\)"):
      tasks.with_role("causal_lm")
    with pytest.raises(ValueError, match=r"0 tasks have the study role 'x' \(none\)"):
      tasks.with_role("x")


def task_literals(folder: pathlib.Path) -> list[tuple[str, int, str]]:
  """(file, line, name) of every string literal of the .py files under `folder` that
  is exactly a registered task's name (code that branches on a task, or keys a table
  by one; prose in a docstring or comment that mentions a task is no literal of it)."""
  names, found = set(tasks.names()), []
  for path in sorted(folder.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
      if isinstance(node, ast.Constant) and isinstance(node.value, str) \
          and node.value in names:
        found.append((str(path.relative_to(ROOT)), node.lineno, node.value))
  return found


def test_the_trainer_and_studies_name_no_task():
  """trainer/ and studies/ read each task's record (data/tasks/: the studies its
  `study`, a Study) and name none: a new task needs no edit there."""
  assert task_literals(ROOT / "trainer") == []
  assert task_literals(ROOT / "studies") == []


def test_the_scanner_finds_a_task_named_in_code(tmp_path):
  (tmp_path / "a.py").write_text('"""A docstring about mnist."""\n'
                                 'K = {"mnist": 1}  # shakespeare\n'
                                 'if task in ("copy", "text-ish"):\n  pass\n')
  global ROOT
  old, ROOT = ROOT, tmp_path
  try:
    assert task_literals(tmp_path) == [("a.py", 2, "mnist"), ("a.py", 3, "copy")]
  finally:
    ROOT = old


# ---- text: the user's own files ------------------------------------------------------

def corpus(tmp_path, files: dict) -> str:
  root = tmp_path / "corpus"
  for name, body in files.items():
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(body if isinstance(body, bytes) else body.encode("utf-8"))
  return str(root)


def text_config(files, tmp_path, **kw):
  from configs import text
  c = text.get_config()
  c.text.files = files
  c.update(dict(seq_len=8, batch_size=4, eval_batch_size=4, eval_batches=0,
                data_dir=str(tmp_path / "data")))
  c.update(kw)
  return c


FILES = {"a.txt": "alpha " * 30, "b.txt": "beta " * 20, "sub/c.md": "ça et là " * 10,
         "d.txt": "delta\n" * 3, ".hidden": "never read", "sub/.git/x": "never read"}


def test_the_split_is_a_hash_of_the_name_and_every_split_gets_a_document(tmp_path):
  """Rule 1: a file's split is a function of its name relative to the corpus root
  (the same for a directory and for a glob, wherever the corpus lies); rule 2: a small
  corpus still has one validation and one test document."""
  root = corpus(tmp_path, FILES)
  c = builders.text_corpus(root)
  assert [n for n, _, _ in c.docs] == ["a.txt", "b.txt", "d.txt", "sub/c.md"]
  assert all(s for s in (c.names("train"), c.names("validation"), c.names("test")))
  assert builders.text_split("a.txt", 0.1, 0.1) == builders.text_split("a.txt", 0.1, 0.1)
  g = builders.text_corpus(root + "/**/*.*")
  assert [(n, s) for n, _, s in g.docs] == [(n, s) for n, _, s in c.docs]
  moved = tmp_path / "elsewhere"
  pathlib.Path(root).rename(moved)
  assert [(n, s) for n, _, s in builders.text_corpus(str(moved)).docs] == \
      [(n, s) for n, _, s in c.docs]
  for n in (1, 2, 3, 4):      # rule 2, whatever the hashes: 2 files make train and
    for k in range(20):       # validation, 3 or more all three
      d = tmp_path / f"small_{n}_{k}"
      corpus(d, {f"f{k}_{i}.txt": "x" for i in range(n)})
      held = [s for _, _, s in builders.text_corpus(str(d / "corpus")).docs]
      assert set(held) == set(("train", "validation", "test")[:min(n, 3)]), (n, k, held)
  big = [f"doc{i}.txt" for i in range(2000)]
  share = np.mean([builders.text_split(n, 0.1, 0.1) != "train" for n in big])
  assert 0.17 < share < 0.23                     # rule 1 alone in a large corpus


def test_windows_stay_inside_documents_and_are_a_function_of_seed_and_step(tmp_path):
  from data.tasks.text import SMOKE_FILES
  root = corpus(tmp_path, {**SMOKE_FILES, "tiny.txt": "0123"})   # shorter than a window
  c = text_config(root, tmp_path, batch_size=32)
  t = pipeline.create(c)
  assert t.name == "text" and t.metric == "bits_per_char"
  assert t.model_overrides == {"vocab_size": 256}
  b = t.train_batch(3)
  np.testing.assert_array_equal(b["y"], pipeline.create(c).train_batch(3)["y"])
  assert not np.array_equal(b["y"], t.train_batch(4)["y"])
  docs = [pathlib.Path(r).read_bytes() for n, r, s in t.corpus.docs if s == "train"]
  for y, w in zip(b["y"], b["w"]):
    window = bytes(y[w > 0].astype(np.uint8))
    assert w[0] == 1 and any(window in d for d in docs)     # inside one document
    assert np.all(w[np.argmin(w):] == 0) if w.min() == 0 else True
  # every byte of the evaluated split is scored once, in windows padded at the end
  ids, offsets, _ = builders.text_documents(t.corpus, "validation", c.data_dir)
  assert t.val_weights.sum() == len(ids) == offsets[-1]
  assert bytes(t.val_windows[t.val_weights > 0].astype(np.uint8)) == bytes(ids)
  assert t.decode(t.encode("ça")) == "ça" and len(t.encode("ça")) == 3


@pytest.mark.parametrize("files, pattern, words", [
    ({}, "/nonexistent/*", "no file matches"),
    ({"a.txt": "ok " * 50, "b.bin": b"\x7fELF\x00\x01"}, "", "b.bin is not text (a NUL byte "
     "at offset 4)"),
    ({"a.txt": "ok " * 50, "l1.txt": b"caf\xe9 " * 9}, "", "l1.txt is not UTF-8 text (byte "
     "0xe9 at offset 3)"),
    ({"a.txt": "tiny", "b.txt": "small", "c.txt": "wee"}, "", "fewer than one batch"),
    ({"a.txt": "alone " * 99}, "", "none for validation"),
    ({"a.txt": ""}, "", "no non-empty regular file"),
])
def test_a_bad_corpus_ends_in_one_line_naming_why(files, pattern, words, tmp_path):
  root = corpus(tmp_path, files) if files else ""
  with pytest.raises(DataError) as e:
    pipeline.create(text_config(pattern or root, tmp_path))
  assert words in str(e.value) and "\n" not in str(e.value)


def test_the_text_config_validates_its_fractions():
  from configs import text
  from trainer import validate
  from models import ConfigError
  c = text.get_config("cpu")
  validate(c)
  c.text.test_fraction = 0.95
  with pytest.raises(ConfigError, match="'text.test_fraction'.*no document to train on"):
    validate(c)
  c.text.test_fraction = -0.1
  with pytest.raises(ConfigError, match="'text.test_fraction': must be a fraction"):
    validate(c)
  assert isinstance(c, ml_collections.ConfigDict)
