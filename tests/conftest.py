"""Shared fixtures. JAX runs in float64 only inside tests that ask for `x64`."""
import jax
import pytest


@pytest.fixture
def x64():
  """Runs the test with jax_enable_x64 on, and restores the previous value."""
  old = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", old)
