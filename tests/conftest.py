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

Each pytest process also keeps a persistent compilation cache of its own (a temporary
folder, removed at exit; not shared between xdist workers, whose concurrent writes
could be read half-written): tests that build the same program (the same model
config, the same kernel at the same shapes) compile it once. It is set through
jax.config, so the command lines tests start do not inherit it (test_faults gives
its own a cache of its own).

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

import jax  # noqa: E402  (after XLA_FLAGS: the backend reads them when it starts)
import pytest  # noqa: E402


def _compilation_cache():
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
