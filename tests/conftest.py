"""Shared fixtures and the suite's precision policy.

Precision. On a GPU, XLA's default float32 matmul is TF32 (10 mantissa bits), so a
float32 result can differ from a float64 reference by ~1e-3 relative. Tests that
check an algorithm against a reference must test the algorithm, not TF32: the whole
suite runs under `jax.default_matmul_precision("highest")` (true float32 products
on every backend; on a CPU that is already the default). Tests that check what a
user gets at the backend's *default* precision take the `default_precision`
fixture, which lifts the policy for their duration (tests/models/test_precision.py).

JAX runs in float64 only inside tests that ask for `x64`.

Compilation. The suite is dominated by XLA compilation of many small programs. The
two flags below skip LLVM's expensive optimisations of the compiled CPU code (about
40% less wall time on 2 cores); the numbers computed are the same programs, and
timings are never measured in tests. Set ATTNLAB_TEST_FULL_OPT=1 to test with full
optimisation.

A persistent compilation cache, shared by the xdist workers of one run (a temporary
folder made by the process pytest starts, removed when it exits): a
program that tests build more than once (the same model config, the same kernel at
the same shapes, the eager primitives at the same shapes), in either worker, is
compiled once. Of ~4,900 programs the two workers compile, ~1,000 are common to both.
jax's cache writes an entry in place and, with eviction off, takes no lock, so a
worker could read another's entry half-written (jax then warns and compiles again);
`_atomic_puts` makes each write a rename of a finished file. It is set through
jax.config, so the command lines tests start do not inherit it (test_faults gives its
own a cache of its own).

GPU. XLA_PYTHON_CLIENT_PREALLOCATE=false: each pytest worker takes GPU memory as it
needs it instead of 75% of the card up front, so several workers share one GPU.
"""
import atexit
import os
import shutil
import tempfile

if not os.environ.get("ATTNLAB_TEST_FULL_OPT"):
  os.environ["XLA_FLAGS"] = " ".join(filter(None, [
      os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0",
      "--xla_llvm_disable_expensive_passes=true"]))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# A study's stop file (studies.core.runs.STOP_FILE, `touch workdirs/STOP`) stops studies,
# not the tests' runs: none while the suite runs (tests set their own).
os.environ["ATTNLAB_STOP_FILE"] = ""

import jax  # noqa: E402  (after XLA_FLAGS: the backend reads them when it starts)
import pytest  # noqa: E402


def _cache_dir() -> str:
  """This run's cache folder. The process pytest starts makes it and removes it at
  exit; its xdist workers (started after this file is imported there) inherit its
  path in ATTNLAB_TEST_JIT_CACHE."""
  d = os.environ.get("ATTNLAB_TEST_JIT_CACHE")
  if d and os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(d):
    return d
  d = tempfile.mkdtemp(prefix="attnlab_jit_cache_")
  atexit.register(shutil.rmtree, d, ignore_errors=True)
  os.environ["ATTNLAB_TEST_JIT_CACHE"] = d
  return d


def _atomic_puts() -> bool:
  """Makes jax's cache write each entry to a temporary name, then rename it: a reader
  in another worker sees a whole entry or none. jax offers no option for this (its
  file lock comes only with eviction, which rescans the folder on every write), so
  this wraps its cache class; False (the caller then keeps a folder per process)
  when that class is not the one this was written against."""
  try:
    from jax._src import lru_cache
    cls, suffix = lru_cache.LRUCache, lru_cache._CACHE_SUFFIX
  except (ImportError, AttributeError):
    return False
  put = cls.put

  def atomic_put(self, key, value):
    if getattr(self, "eviction_enabled", True):
      return put(self, key, value)
    path = self.path / f"{key}{suffix}"
    if path.exists():
      return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(value)
    os.replace(tmp, path)
  cls.put = atomic_put
  return True


def _compilation_cache():
  if _atomic_puts():
    d = _cache_dir()
  else:
    d = tempfile.mkdtemp(prefix="attnlab_jit_cache_")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
  jax.config.update("jax_compilation_cache_dir", d)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


if not os.environ.get("ATTNLAB_TEST_NO_JIT_CACHE"):
  _compilation_cache()

PRECISION = "highest"     # the suite's matmul precision (see the docstring)
jax.config.update("jax_default_matmul_precision", PRECISION)


@pytest.fixture
def x64():
  """Runs the test with jax_enable_x64 on, and restores the previous value."""
  old = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", old)


@pytest.fixture
def default_precision():
  """Runs the test at the backend's default matmul precision (TF32 on a GPU)."""
  jax.config.update("jax_default_matmul_precision", None)
  yield jax.default_backend()
  jax.config.update("jax_default_matmul_precision", PRECISION)


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory):
  """A data dir with MNIST, Tiny Shakespeare and Multi30k prepared from the mirror,
  or a skip when there is no mirror.

  One folder per test run, shared by the xdist workers: the raw copies, the TFDS
  datasets (MNIST's build alone costs ~10 s) and the sentencepiece model are made
  once, by whichever test first needs them (data/ takes file locks, so concurrent
  workers build once)."""
  import data
  mirror = data.default_mirror()
  if not os.path.isdir(mirror):
    pytest.skip(f"no data mirror at {mirror}: set ATTNLAB_DATA_MIRROR")
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent          # this run's folder, shared by all xdist workers
  d = root / "attnlab_data"
  for name in ("mnist", "tiny_shakespeare", "multi30k"):
    data.prepare(name, d, mirror)
  return str(d)


# ---- CPU seconds per test (ATTNLAB_TEST_CPU_LOG=<file>) ---------------------------------
# pytest --durations reports wall time, which doubles when the cores are shared; where
# to trim the suite is a question of CPU time. With ATTNLAB_TEST_CPU_LOG set, each
# worker appends one JSON line per test (setup, call and teardown): its user + system seconds
# and those of the child processes it waited for (a launched training, a study run).
# `python -m scripts.suite_cost` sets it and ranks the tests by it (results/suite).
_CPU_LOG = os.environ.get("ATTNLAB_TEST_CPU_LOG")


def _cpu_now() -> float:
  import resource
  return sum(getattr(resource.getrusage(w), f) for w in
             (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
             for f in ("ru_utime", "ru_stime"))


if _CPU_LOG:
  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_protocol(item, nextitem):
    import json
    import time
    before, t0 = _cpu_now(), time.time()
    _JIT.clear()
    yield
    total = _cpu_now() - before
    # the worker and the wall-clock span: how the two workers' loads line up (the
    # suite's wall time is the later worker's end); jax's compile events in the test
    with open(_CPU_LOG, "a", encoding="utf-8") as f:
      f.write(json.dumps({"test": item.nodeid, "cpu_s": round(total, 3),
                          "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                          "t0": round(t0, 2), "t1": round(time.time(), 2),
                          **{k: round(v, 3) for k, v in _JIT.items()}}) + "\n")

  # What jax compiled during a test (jax.monitoring's events: their wall seconds and
  # count): XLA's backend compile, tracing to a jaxpr, lowering to MLIR.
  _JIT = {}
  _JIT_EVENTS = {"/jax/core/compile/backend_compile_duration": "compile",
                 "/jax/core/compile/jaxpr_trace_duration": "trace",
                 "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower"}

  def _jit_event(event, duration, **kw):
    k = _JIT_EVENTS.get(event)
    if k:
      _JIT[f"{k}_s"] = _JIT.get(f"{k}_s", 0.0) + duration
      _JIT[f"{k}s"] = _JIT.get(f"{k}s", 0) + 1

  jax.monitoring.register_event_duration_secs_listener(_jit_event)
