"""train.py and eval.py end to end on tiny configs: every task trains, a resumed run
equals an uninterrupted one, bad input fails before compiling with a named key,
signals and NaNs keep the checkpoint, and eval.py draws its PNG."""
import json
import os
import signal

import jax.numpy as jnp
import numpy as np
import pytest

import trainer
from configs import copy as copy_cfg
from configs import mnist as mnist_cfg
from configs import shakespeare as shakespeare_cfg
from data import tasks
from models import ConfigError

TINY_MODEL = dict(d_model=16, num_heads=2, d_ff=32, num_layers=1)


def tiny(module, **kw):
  c = module.get_config()
  c.model.update(TINY_MODEL)
  c.update(dict(num_train_steps=4, batch_size=4, eval_batch_size=4, eval_batches=1,
                eval_every=4, log_every=2, checkpoint_every=2, warmup_steps=1,
                progress=False))
  c.update(kw)
  return c


def tiny_copy(**kw):
  """tiny(copy_cfg) at copy_len 3 and max_len 16: the model and batches of the
  every-task test's copy run (data/tasks/copy.py's smoke), so that this module's copy
  runs share one compiled step (trainer.step._compiled) instead of one per max_len."""
  c = tiny(copy_cfg, copy_len=3, **kw)
  c.model.max_len = 16
  return c


@pytest.fixture(scope="module")
def data_dir(prepared_data):
  return prepared_data


def records(workdir):
  return [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]


def params_of(workdir, step):
  import orbax.checkpoint as ocp
  with ocp.CheckpointManager(os.path.join(workdir, "checkpoints")) as m:
    return m.restore(step, args=ocp.args.StandardRestore())["model"]


def train_resumed(tmp_path, module, max_len, **kw):
  """(uninterrupted run's workdir, resumed run's workdir, its last metrics): a tiny
  4-step run of `module`'s config, and the same stopped at step 2 and resumed;
  asserts that both end with the same parameters, train losses and step-4 eval.
  deterministic: XLA's deterministic ops, what makes this bit-exact on a GPU too (a
  GPU option: on a CPU, deterministic anyway, it is left off, and the step compiled
  is the one other runs of the same model compile)."""
  import jax
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  det = jax.default_backend() != "cpu"
  cfg = tiny(module, deterministic=det, **kw)
  cfg.model.max_len = max_len
  full = trainer.train_and_evaluate(cfg, a)
  half = tiny(module, deterministic=det, **{**kw, "num_train_steps": 2})
  half.model.max_len = max_len
  trainer.train_and_evaluate(half, b)
  trainer.train_and_evaluate(cfg, b)                          # resumes at step 2
  pa, pb = params_of(a, 4), params_of(b, 4)
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
    np.testing.assert_array_equal(x, y)
  timing = ("steps_per_s", "recent_steps_per_s", "host_cpu_ms_per_step")
  def losses(w):   # train records (minus the speed and host CPU) and the step-4 eval
    return ([{k: v for k, v in r.items() if k not in timing}
             for r in records(w) if "train_loss" in r],
            [r for r in records(w) if "eval_loss" in r and r["step"] == 4])

  ra, rb = losses(a), losses(b)
  assert ra == rb      # (the interrupted run also evaluated at its last step, 2)
  assert [r["step"] for r in ra[0]] == [2, 4] and len(ra[1]) == 1
  return a, b, full


def test_copy_trains_and_resume_equals_uninterrupted(tmp_path):
  a, b, full = train_resumed(tmp_path, copy_cfg, 16, copy_len=3)   # as tiny_copy
  assert set(full) >= {"train_loss", "eval_loss", "accuracy"}
  assert all(r["host_cpu_ms_per_step"] > 0 for r in records(a) if "train_loss" in r)
  # the resume is marked where its speed clock restarts (scripts.compare_variants
  # adds the segments' training times from it)
  assert [r for r in records(b) if "resumed_at_step" in r] == [
      {"step": 2, "resumed_at_step": 2}]
  assert not any("resumed_at_step" in r for r in records(a))


@pytest.mark.slow   # ~13 CPU-s: a packed ListOps model compiled and run 3 times (make test-all)
def test_packed_resume_equals_uninterrupted(tmp_path):
  """config.packing: the packed rows of each step are a function of (seed, step)
  (pipeline.Packer), so a resumed run trains on the batches of the uninterrupted
  one. On ListOps (generated: no data mirror needed; a classifier: no decoding in its
  eval), the cheapest packed task end to end; Multi30k's packed batches are the same
  Packer's.

  Covered in make test by tests/data/test_packing.py::
  test_packed_multi30k_batches_pair_source_and_target_and_resume_exactly (a fresh
  task, as a resumed run makes, gives each step's packed batch exactly),
  tests/data/test_packing.py::test_a_packed_listops_batch_gives_the_loss_and_gradients_of_its_sequences
  (trainer.step.loss_fn on packed rows) and test_copy_trains_and_resume_equals_uninterrupted
  above (the resume itself)."""
  from configs import listops as listops_cfg
  a, _, _ = train_resumed(tmp_path, listops_cfg, 60, data_dir=str(tmp_path / "data"),
                          packing=True, listops=dict(num_train=64, num_val=8, num_test=8,
                                                     min_length=20, max_length=60))
  assert any(r.get("accuracy") is not None for r in records(a))


def task_config(rec, folder, **kw):
  """The tiny config of a registered task, from its record alone: its config file,
  the tiny model and schedule (`tiny`), max_len 16, then its smoke overrides (which
  may write the data it reads into `folder`)."""
  import importlib
  module = importlib.import_module(rec.config_file[:-len(".py")].replace("/", "."))
  # one checkpoint, at the end (each more costs ~0.3 CPU-s; resume: the tests below)
  cfg = tiny(module, num_images=2, num_samples=2, sample_len=6, checkpoint_every=4, **kw)
  cfg.model.max_len = 16
  cfg.update(rec.smoke(str(folder)))
  return cfg


# the result key of each metric in train and eval records (trainer.step.evaluate)
RESULT_KEY = {"class_accuracy": "accuracy"}


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_trains_then_evaluates(name, request, tmp_path, capsys):
  """Every registered task through its record alone (data/tasks/): trained by
  train.py's loop at its smoke config, then evaluated by eval.py's evaluate_workdir
  on its test split, which eval.json names (issue 97), with its evaluator's outputs
  (PNG, samples, BLEU)."""
  from trainer import evaluate
  rec = tasks.task(name)
  data_dir = (request.getfixturevalue("prepared_data") if rec.datasets
              else str(tmp_path / "data"))
  cfg = task_config(rec, tmp_path / "smoke", data_dir=data_dir)
  wd = str(tmp_path / "run")
  out = trainer.train_and_evaluate(cfg, wd)
  metric = RESULT_KEY.get(rec.metric, rec.metric)
  assert np.isfinite(out["train_loss"]) and metric in out
  recs = records(wd)
  assert recs[0]["step"] == 0 and recs[0]["params"] > 0
  assert any("eval_loss" in r for r in recs)
  assert os.listdir(os.path.join(wd, "tb"))
  steps = int(cfg.num_train_steps)
  if name == "mnist":   # by default eval.py scores the whole test split (here in 4
    # batches of 2500): one evaluation checks that and the outputs below
    res = evaluate.evaluate_workdir(wd, eval_batch_size=2500)
    assert res["eval_sequences"] == 10000
  else:
    res = evaluate.evaluate_workdir(wd, eval_batches=1)
    assert res["eval_sequences"] == 4 if name != "multi30k" else res["eval_sequences"] > 0
  assert metric in res and res["step"] == steps
  # the shipped configs hold out a test split: eval.py reports it, and says so
  assert res["eval_split"] == "test" and rec.has_test(cfg)
  assert json.load(open(os.path.join(wd, "eval", "eval.json")))["eval_split"] == "test"
  if rec.evaluator is not None:
    assert res["decode_mode"] == "cache"      # "auto": the model's decode state
  produced = {"mnist": "completions.png", "shakespeare": "samples.txt",
              "text": "samples.txt", "multi30k": "translations.txt"}.get(name)
  if produced:
    path = tmp_path / "run" / "eval" / produced
    assert path.exists() and path.stat().st_size > 0
  if name == "mnist":
    assert res["completion_images_per_s"] > 0
    assert path.read_bytes()[:4] == b"\x89PNG" and (path.parent / "samples.png").exists()
  val = None
  if name == "shakespeare":   # a run without a test split is scored on validation,
    capsys.readouterr()       # and one line says so
    val = evaluate.evaluate_workdir(wd, eval_batches=1, test_fraction=0.0)
    assert val["eval_split"] == "validation"
    assert evaluate.NO_TEST in capsys.readouterr().out.splitlines()
  if rec.free_eval_length:   # length extrapolation: windows of 2x max_len (one length
    # past max_len: each length is one more compiled eval step, 4x adds no code path)
    at = evaluate.evaluate_lengths(wd, [8, 32], eval_batches=1)
    # validation's loss at the training length (shakespeare's validation split is the
    # same without a test split: its run above)
    val = val or evaluate.evaluate_workdir(wd, eval_batches=1, split="validation")
    assert at[8]["eval_loss"] == pytest.approx(val["eval_loss"], rel=1e-5)
    assert np.isfinite(at[32]["bits_per_char"]) and at[32]["eval_seq_len"] == 32


TOY_TASK = '''"""toy: a task in one file: y_t = (y_0 + t) mod 10, from a random y_0."""
import numpy as np

from data import pipeline
from data.tasks import TaskRecord, register


class Toy(pipeline.Task):
  def __init__(self, config):
    super().__init__(config, model_overrides={"vocab_size": 10})

  @property
  def seq_len(self):
    return int(self.config.toy_len)

  def _batch(self, rng, B):
    y = (rng.integers(0, 10, (B, 1)) + np.arange(self.seq_len)) % 10
    return {"y": y.astype(np.int32), "w": np.ones(y.shape, np.float32)}

  def train_batch(self, step):
    return self._batch(np.random.default_rng([self.seed, int(step)]),
                       int(self.config.batch_size))

  def eval_batches(self):
    split = 1 if self.config.get("eval_split") == "test" else 0
    rng = np.random.default_rng([self.seed, 2 ** 31 - 1, split])
    for _ in range(int(self.config.eval_batches) or 2):
      yield self._batch(rng, int(self.config.eval_batch_size))


TASK = register(TaskRecord(
    name="toy", pipeline=Toy, metric="accuracy", label="accuracy",
    splits={"validation": "a stream of its own", "test": "another stream"},
    seq_key="toy_len", lengths=lambda c: {"toy_len": int(c.toy_len)}))
'''


def test_a_new_task_is_one_file(tmp_path):
  """A task written as one module (its batches and its record) trains and evaluates
  through train_and_evaluate and evaluate_workdir, with nothing else changed; an
  over-long sequence is refused by the key its record names."""
  import importlib.util
  from trainer import evaluate
  path = tmp_path / "toy.py"
  path.write_text(TOY_TASK)
  spec = importlib.util.spec_from_file_location("toy_task", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)          # registers "toy"
  try:
    assert "toy" in tasks.names()
    cfg = tiny(copy_cfg, task="toy", toy_len=8)
    with pytest.raises(ConfigError, match="'toy_len'.*exceed model.max_len"):
      c = cfg.copy_and_resolve_references()
      c.toy_len = 10 ** 4
      trainer.validate(c)
    out = trainer.train_and_evaluate(cfg, str(tmp_path / "run"))
    assert np.isfinite(out["train_loss"]) and 0 <= out["accuracy"] <= 1
    res = evaluate.evaluate_workdir(str(tmp_path / "run"), eval_batches=1)
    assert res["eval_split"] == "test" and res["eval_sequences"] == 4
  finally:
    tasks.unregister("toy")
  assert "toy" not in tasks.names()


@pytest.mark.parametrize("change, key, words", [
    (dict(eval_seq_len=16), "eval_seq_len", "only the windows of the shakespeare, text"),
    (dict(attention="nope"), "attention", "valid names are"),
    (dict(attention="linformer"), "attention", "cannot be causal"),
    (dict(copy_len=40), "copy_len", "exceed model.max_len"),
    (dict(num_train_steps=-3), "num_train_steps", "positive int"),
    (dict(optimizer="sgd"), "optimizer", "adamw"),
    (dict(task="cifar"), "task", "valid"),
])
def test_bad_config_is_refused_before_anything_runs(change, key, words, tmp_path):
  cfg = tiny(copy_cfg, copy_len=3)
  for k, v in change.items():
    cfg[k] = v
  with pytest.raises(ConfigError) as e:
    trainer.train_and_evaluate(cfg, str(tmp_path))
  assert f"'{key}'" in str(e.value) and words in str(e.value)
  assert not os.path.exists(tmp_path / "checkpoints")


def test_positions_are_checked_against_the_task_before_anything_runs():
  """rope2d takes the MNIST image width from image_size (and refuses another); an
  evaluation length past max_len is refused for learned positions, not for rope."""
  cfg = tiny(mnist_cfg, image_size=14)
  cfg.model.positions = "rope2d"
  assert trainer.validate(cfg).image_side == 14
  cfg.model.image_side = 28
  with pytest.raises(ConfigError, match="'model.image_side'.*14 wide"):
    trainer.validate(cfg)
  cfg = tiny(shakespeare_cfg, seq_len=8, eval_seq_len=64)
  cfg.model.update(max_len=16, positions="learned")
  with pytest.raises(ConfigError, match="'eval_seq_len'.*positions='learned'"):
    trainer.validate(cfg)
  cfg.model.positions = "rope"
  assert trainer.validate(cfg).positions == "rope"


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
  """A finished 2-step run of the tiny copy config, trained once for this module's
  tests that start from one (read only: a test that changes it works on a copy)."""
  base = str(tmp_path_factory.mktemp("base"))
  trainer.train_and_evaluate(tiny_copy(num_train_steps=2), base)
  return base


def test_different_model_in_same_workdir_is_refused(base_run):
  before = sorted(os.listdir(os.path.join(base_run, "checkpoints")))
  other = tiny_copy(num_train_steps=4, attention="softmax")
  with pytest.raises(trainer.TrainError, match="model.attention was 'linear'"):
    trainer.train_and_evaluate(other, base_run)
  assert sorted(os.listdir(os.path.join(base_run, "checkpoints"))) == before


def test_sigterm_saves_then_stops(tmp_path, monkeypatch):
  # prefetch=0: the batch of step 2 is made when step 2 runs, not earlier in a thread;
  # 4 steps (stopped at 3, before the end): the schedule, so the compiled step, of this
  # module's other 4-step copy runs
  cfg = tiny_copy(checkpoint_every=100, prefetch=0)
  from data import pipeline
  real = pipeline.Copy.train_batch

  def batch(self, step):
    if step == 2:
      os.kill(os.getpid(), signal.SIGTERM)
    return real(self, step)

  monkeypatch.setattr(pipeline.Copy, "train_batch", batch)
  trainer.train_and_evaluate(cfg, str(tmp_path))
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3"]


def test_keeps_last_k_plus_the_best_by_eval_loss(tmp_path, monkeypatch):
  cfg = tiny_copy(eval_every=1, checkpoint_every=1, keep_checkpoints=1)
  losses = iter([0.5, 0.1, 0.7, 0.9])
  import trainer.step
  monkeypatch.setattr(trainer.step, "evaluate", lambda *a, **kw: {"eval_loss": next(losses)})
  trainer.train_and_evaluate(cfg, str(tmp_path))
  assert sorted(os.listdir(tmp_path / "checkpoints"), key=int) == ["2", "4"]


def test_a_tfds_image_too_long_for_the_model_is_refused(data_dir, tmp_path):
  """The generic TFDS path (here the project's own MNIST builder; stock names go to
  tfds.data_source; test_every_task_trains_then_evaluates trains it): its length is
  known once the images are read, and checked then, before anything compiles."""
  from configs import tfds_images
  cfg = tiny(tfds_images, data_dir=data_dir, num_train_steps=1, eval_every=1,
             tfds_name="attnlab_mnist", tfds_splits="train[:64],test[:8]")  # TFDS slicing
  cfg.model.max_len = 16
  with pytest.raises(ConfigError, match="784 tokens, more than model.max_len=16"):
    trainer.train_and_evaluate(cfg, str(tmp_path / "short"))


# train.py naming the key of a wrong type on its command line
# (--config.num_train_steps=abc): tests/trainer/test_cli.py, whose one process runs
# every command line (test_train_names_the_key_of_a_wrong_type).


def test_lora_run_over_a_base_workdir_saves_adapters_only(tmp_path, base_run):
  """A LoRA run loads the base workdir's weights, trains only the adapters, keeps
  adapter-only checkpoints, resumes, and eval.py reloads base + adapters. One
  schedule (4 steps) for both runs, so one compiled LoRA step: the resume is from the
  checkpoint of step 2, the one of step 4 removed (as if the run had stopped there)."""
  import shutil
  from trainer import evaluate
  base = base_run
  cfg = tiny_copy()
  cfg.lora.update(rank=2, targets="q,v", alpha=4.0, base_workdir=base)
  ada = str(tmp_path / "lora")
  trainer.train_and_evaluate(cfg, ada)
  rec = records(ada)[0]
  assert rec["trainable_params"] == 1 * 2 * 2 * (16 + 16)     # 1 layer x (q, v) x r(in+out)
  saved = params_of(ada, 2)
  import jax
  names = {"/".join(map(str, p)) for p, _ in jax.tree_util.tree_flatten_with_path(saved)[0]}
  assert any("lora_a" in n for n in names) and not any("kernel" in n for n in names)
  shutil.rmtree(os.path.join(ada, "checkpoints", "4"))
  trainer.train_and_evaluate(cfg, ada)                             # resumes from adapters
  assert [r["resumed_at_step"] for r in records(ada) if "resumed_at_step" in r] == [2]
  _, model, step = evaluate.load(ada)
  assert step == 4 and model.decoder.blocks[0].attn.q.lora is not None


def test_init_from_starts_full_fine_tuning_at_the_base(tmp_path, base_run):
  """init_from copies a workdir's weights into a fresh run (all of them train); a
  resumed run needs only its own checkpoint; a different model is refused by key."""
  import shutil
  import jax
  from flax import nnx
  base = str(tmp_path / "base")          # a copy: removed below
  shutil.copytree(base_run, base, ignore=shutil.ignore_patterns(".lock"))
  _, src, _ = trainer.load_model(base)
  cfg = tiny_copy(num_train_steps=2, init_from=base)
  model = trainer.make_model(cfg, src.cfg)
  for a, b in zip(jax.tree.leaves(nnx.state(model, nnx.Param)),
                  jax.tree.leaves(nnx.state(src, nnx.Param))):
    np.testing.assert_array_equal(a, b)
  assert trainer.trained_part(cfg) is nnx.Param
  ft = str(tmp_path / "ft")
  trainer.train_and_evaluate(cfg, ft)
  assert records(ft)[0]["trainable_params"] == records(ft)[0]["params"]
  shutil.rmtree(base)
  cfg.num_train_steps = 4
  trainer.train_and_evaluate(cfg, ft)                   # resumes without the base
  assert trainer.load_model(ft)[2] == 4
  other = tiny_copy(init_from=ft)
  with pytest.raises(trainer.TrainError, match="init_from .*differing model fields: \\['d_model'"):
    trainer.make_model(other, src.cfg.__class__(**{**src.cfg.__dict__, "d_model": 32}))


# last in this module: it empties trainer.step's cache of compiled steps (its poisoned
# loss must be traced, and must not stay), which the runs above share
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
  """The loss of step 2 (the third) is NaN: the device-side check stops the updates,
  the next sync (the log at step 4) raises naming step 2, and the checkpoint of
  step 2 is the last one: nothing after the NaN is saved."""
  cfg = tiny_copy(log_every=4, checkpoint_every=2)
  import trainer.step
  real = trainer.step.loss_fn

  def poisoned(model, batch):
    loss, w = real(model, batch)
    # the traced step counter is not visible here: poison by the batch content,
    # which differs per step; the batch of step 2 is found below
    return loss * jnp.where(jnp.sum(batch["y"]) == target, jnp.nan, 1.0), w

  from data import pipeline
  task = pipeline.create(cfg)
  sums = [int(np.sum(task.train_batch(s)["y"])) for s in range(4)]
  assert len(set(sums)) == 4, sums        # each step's batch is recognisable
  target = sums[2]
  monkeypatch.setattr(trainer.step, "loss_fn", poisoned)
  trainer.step._compiled.cache_clear()
  with pytest.raises(trainer.TrainError, match="non-finite.*step 2.*step 2"):
    trainer.train_and_evaluate(cfg, str(tmp_path))
  trainer.step._compiled.cache_clear()
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2"]
  assert params_of(str(tmp_path), 2)
