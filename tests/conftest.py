"""Shared fixtures. JAX runs in float64 only inside tests that ask for `x64`.

The suite is dominated by XLA compilation of many small programs. The two flags
below skip LLVM's expensive optimisations of the compiled CPU code (about 40% less
wall time on 2 cores); the numbers computed are the same programs, and timings are
never measured in tests. Set ATTNLAB_TEST_FULL_OPT=1 to test with full optimisation.
"""
import os

if not os.environ.get("ATTNLAB_TEST_FULL_OPT"):
  os.environ["XLA_FLAGS"] = " ".join(filter(None, [
      os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0",
      "--xla_llvm_disable_expensive_passes=true"]))

import jax  # noqa: E402  (after XLA_FLAGS: the backend reads them when it starts)
import pytest  # noqa: E402


@pytest.fixture
def x64():
  """Runs the test with jax_enable_x64 on, and restores the previous value."""
  old = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", old)
