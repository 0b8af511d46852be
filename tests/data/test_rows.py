"""Each process reads only its rows (issue 104): every registered task's train batch,
read as n processes read it (`Task.rows`: process p's block of the batch, what
trainer.parallel.local_rows gives it), is the one-process batch cut in n, bit for
bit, and each part decodes only its own examples; and the training loop sets those
rows in a (faked) second process. In-process, no jax.distributed: the rows are set
by hand (tests/trainer/test_multiprocess.py checks them in a real 2-process job).
Nothing here compiles."""
import copy
import importlib

import numpy as np
import pytest

from data import pipeline, tasks

B = 8                   # global batch rows: 2 processes of 4 rows, or 4 of 2
STEPS = (0, 5)


class Counting(np.ndarray):
  """An array that counts the elements its indexing returns (`READ`): what a task
  decodes of it. What it returns, and what arithmetic on it makes (a plan's lengths),
  is a plain array, not counted again."""

  def __getitem__(self, idx):
    out = super().__getitem__(idx)
    if isinstance(out, np.ndarray):
      READ[0] += out.size
      return out.view(np.ndarray)
    return out

  def __array_ufunc__(self, ufunc, method, *inputs, **kw):
    plain = tuple(x.view(np.ndarray) if isinstance(x, Counting) else x for x in inputs)
    return getattr(ufunc, method)(*plain, **kw)


READ = [0]


class CountingSource:
  """A data source (pipeline.SourceRows reads one) that counts the examples it
  decodes (`READ`)."""

  def __init__(self, src):
    self.src = src

  def __len__(self):
    return len(self.src)

  def __getitems__(self, ids):
    READ[0] += len(ids)
    return self.src.__getitems__(ids)


def _counting(x):
  """x with every numpy array in it (a tuple's or dict's too) as a Counting view, and
  every data source read by index (pipeline.SourceRows) counting its reads."""
  if isinstance(x, np.ndarray) and not isinstance(x, Counting):
    return x.view(Counting)
  if isinstance(x, pipeline.SourceRows):
    return pipeline.SourceRows(CountingSource(x.src), x.convert, x.row_shape, x.index)
  if isinstance(x, tuple):
    return tuple(_counting(v) for v in x)
  if isinstance(x, dict):
    for k in list(x):
      x[k] = _counting(x[k])
  return x


def _variants(name: str) -> dict:
  """{label: config overrides} of the train batches a task makes: every layout of
  its own (packing, length buckets, a training mixture) besides the plain one."""
  return {"multi30k": {"buckets": {}, "unbucketed": {"length_buckets": ()},
                       "packed": {"packing": True}},
          "listops": {"plain": {}, "packed": {"packing": True}},
          "mqar": {"plain": {}, "mix": {"mqar": {"train_mix": "32:2,16:1"}}},
          }.get(name, {"plain": {}})


def _config(rec, folder, data_dir):
  """The task's config at its smoke overrides (tests/trainer/test_train.py's
  task_config, without the model), with B rows a batch."""
  module = importlib.import_module(rec.config_file[:-len(".py")].replace("/", "."))
  c = module.get_config()
  c.update(dict(batch_size=B, data_dir=data_dir))
  c.update(rec.smoke(str(folder)))
  if rec.name == "mqar":
    c.mqar.update(dict(vocab_size=64, num_pairs=4, seq_len=64))
  return c


def _read(task, step, rows):
  """(task.train_batch(step) with task.rows = rows, the array elements it read)."""
  task.rows = rows
  READ[0] = 0
  try:
    return task.train_batch(step), READ[0]
  finally:
    task.rows = None


def _base(name, request, tmp_path):
  """The task `name` at its smoke config (_config), its data read."""
  rec = tasks.task(name)
  data_dir = (request.getfixturevalue("prepared_data") if rec.datasets
              else str(tmp_path / "data"))
  return pipeline.create(_config(rec, tmp_path / "smoke", data_dir))


def _counting_task(base, overrides: dict):
  """A copy of task `base` with config `overrides`, whose data arrays count what is
  read of them (`READ`): the data shared, the config and caches its own."""
  task = copy.copy(base)
  task.__dict__ = {k: v for k, v in base.__dict__.items() if k != "packer"}
  task.config = copy.deepcopy(base.config)
  task.config.update(overrides)
  for k, v in list(task.__dict__.items()):
    if not k.startswith("_"):           # the data; _-named: plans and lengths
      task.__dict__[k] = _counting(copy.copy(v) if isinstance(v, dict) else v)
  return task


@pytest.mark.parametrize("name", tasks.names())
def test_each_process_reads_only_its_rows_and_together_they_make_the_batch(
    name, request, tmp_path):
  base = _base(name, request, tmp_path)
  if name == "multi30k":   # 512 of the 29,000 pairs: encoding and packing all costs ~5 s
    base.splits["train"] = base._encode("train[:512]")
  for label, overrides in _variants(name).items():
    task = _counting_task(base, overrides)
    for step in STEPS:
      whole, read_all = _read(task, step, None)
      assert len(whole["w"]) == B, (label, {k: v.shape for k, v in whole.items()})
      for n in (2, 4):
        parts = [_read(task, step, slice(p * B // n, (p + 1) * B // n)) for p in range(n)]
        for k, v in whole.items():
          got = np.concatenate([b[k] for b, _ in parts])
          assert got.dtype == v.dtype, (label, k)
          np.testing.assert_array_equal(got, v, err_msg=f"{name} {label} {k} n={n}")
        reads = [r for _, r in parts]
        if read_all:                    # a task that reads data (not a generator's)
          assert sum(reads) == read_all, (label, n, reads, read_all)
          assert max(reads) <= read_all * 1.5 / n, (label, n, reads, read_all)
        else:
          assert name in ("copy", "mqar"), (label, "read nothing")


EVAL_B = 12              # eval batch rows: 2 processes of 6, or 4 of 3


def _read_eval(task, rows):
  """(task.eval_batches() as a list, with task.eval_rows = rows; the array elements
  they read)."""
  task.eval_rows = rows
  READ[0] = 0
  try:
    return list(task.eval_batches()), READ[0]
  finally:
    task.eval_rows = None


@pytest.mark.parametrize("name", tasks.names())
def test_each_process_reads_only_its_rows_of_the_eval_batches(name, request, tmp_path):
  """The eval batches as n processes read them (`Task.eval_rows`, blocks of
  eval_batch_size rows) are the one-process batches cut in n, bit for bit, a last
  partial batch's zero-weight padding rows included where they fall; each part reads
  the examples of its own real rows and no other: the first 2 batches of the split,
  and the whole split (eval.py's; listops' and tfds' 8 examples, mnist's 10,000,
  multi30k's 100 and shakespeare's 1,001 end in a partial batch)."""
  base = _base(name, request, tmp_path)
  if name == "multi30k":   # 100 of the 1,014 validation pairs
    base.splits["validation"] = base._encode("validation[:100]")
  if name == "shakespeare":   # 1,001 of its ~14,000 windows (all: ~0.8 s)
    base.val_windows = base.val_windows[:1001]
  for k in (2, 0):
    task = _counting_task(base, dict(eval_batch_size=EVAL_B, eval_batches=k))
    whole, read_all = _read_eval(task, None)
    assert whole and {len(b["w"]) for b in whole} == {EVAL_B}, (k, len(whole))
    real = [np.any(b["w"].reshape(EVAL_B, -1) > 0, 1) for b in whole]  # not padding
    if name in ("listops", "tfds", "mnist", "multi30k", "shakespeare") and not k:
      assert not real[-1].all(), "the whole split should end in a partial batch"
    for n in (2, 4):
      spans = [slice(p * EVAL_B // n, (p + 1) * EVAL_B // n) for p in range(n)]
      parts = [_read_eval(task, s) for s in spans]
      for i, batch in enumerate(whole):
        for key, v in batch.items():
          got = np.concatenate([b[i][key] for b, _ in parts])
          assert got.dtype == v.dtype, (k, key)
          np.testing.assert_array_equal(got, v, err_msg=f"{name} batch {i} {key} n={n}")
      assert [len(b) for b, _ in parts] == [len(whole)] * n
      reads = [r for _, r in parts]
      if read_all:                      # a task that reads data (not a generator's)
        mine = [sum(int(r[s].sum()) for r in real) for s in spans]
        assert [r * sum(mine) for r in reads] == [read_all * m for m in mine], (
            k, n, reads, read_all, mine)
      else:
        assert name in ("copy", "mqar"), (k, "read nothing")


def test_the_training_loop_has_each_process_read_its_rows(monkeypatch):
  """trainer.loop.Prefetch as process 1 of 2 (faked: jax.process_count and the
  mesh's local_rows): it sets the task's rows to parallel.local_rows of the global
  batch, and hands put_batch the rows read with the global batch size, so that it
  takes them as this process's part; one process leaves the task whole."""
  import jax
  from configs import copy as copy_cfg
  from trainer import loop, parallel
  c = copy_cfg.get_config()
  c.update(dict(batch_size=B, copy_len=3))
  whole = pipeline.Copy(c).train_batch(3)
  put = []
  monkeypatch.setattr(parallel, "put_batch",
                      lambda b, mesh, n_rows=None: put.append(n_rows) or b)
  monkeypatch.setattr(parallel, "local_rows", lambda mesh, n: slice(n // 2, n))
  one = pipeline.Copy(c)
  loop.Prefetch(one, None, 3, 4, 0, n_rows=B)
  assert one.rows is None
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  task = pipeline.Copy(c)
  p = loop.Prefetch(task, None, 3, 4, 0, n_rows=B)
  got = next(p)
  p.close()
  assert task.rows == slice(B // 2, B) and put == [B]
  for k, v in whole.items():
    np.testing.assert_array_equal(got[k], v[B // 2:])


def test_evaluation_has_each_process_read_its_rows(monkeypatch):
  """trainer.step.evaluate as process 1 of 2 (faked, as above; eval_step faked too:
  nothing compiles): the task yields its eval_rows = parallel.local_rows of
  eval_batch_size, handed to put_batch with that global size, and is left whole after;
  one process (or no mesh: eval.py) reads every row."""
  import types
  import jax
  from configs import copy as copy_cfg
  from trainer import parallel
  from trainer import step as steps
  c = copy_cfg.get_config()
  c.update(dict(copy_len=3, eval_batch_size=EVAL_B, eval_batches=2))
  whole = list(pipeline.Copy(c).eval_batches())
  put, seen = [], []
  monkeypatch.setattr(parallel, "put_batch",
                      lambda b, mesh, n_rows=None: put.append(n_rows) or b)
  monkeypatch.setattr(parallel, "local_rows", lambda mesh, n: slice(n // 2, n))
  monkeypatch.setattr(steps, "eval_step",
                      lambda model, b, metric: seen.append(b) or (0.0, 1.0, 0.0, 1.0))
  model = types.SimpleNamespace(eval=lambda: None, train=lambda: None)
  for count, mesh, want in ((1, "mesh", slice(0, EVAL_B)), (2, None, slice(0, EVAL_B)),
                            (2, "mesh", slice(EVAL_B // 2, EVAL_B))):
    monkeypatch.setattr(jax, "process_count", lambda: count)
    task = pipeline.Copy(c)
    put.clear(), seen.clear()
    steps.evaluate(model, task, c, mesh)
    assert task.eval_rows is None and len(seen) == len(whole), (count, mesh)
    for got, b in zip(seen, whole):
      for k, v in b.items():
        np.testing.assert_array_equal(np.asarray(got[k]), v[want], err_msg=f"{count} {k}")
    if mesh is not None:
      assert put == [EVAL_B if count > 1 else None] * len(whole), (count, put)
