"""Command-line plumbing shared by train.py and eval.py: a user's mistake ends in one
line on stderr and exit status 1; a bug in the code keeps its traceback.

  app.run(main, flags_parser=parse_flags)      # unknown --config.x names close keys
  user_errors(main)                            # ConfigError, TrainError, ... -> one line
"""
from __future__ import annotations

import functools
import os
import re
import sys

from absl import flags

from attention.common import AttentionError
from data.fetch import DataError
from models import ConfigError
from trainer.config import TrainError, closest_keys

# Exceptions raised for what a user typed or pointed at (config values, data, workdir).
USER_ERRORS = (ConfigError, TrainError, AttentionError, DataError)


def fail(msg: str) -> None:
  """Prints `<program>: error: msg` to stderr and exits with status 1."""
  prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "attnlab"
  print(f"{prog}: error: {msg}", file=sys.stderr, flush=True)
  sys.exit(1)


def _config_file(argv) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _unknown_key(argv, config) -> str | None:
  """The first --config.<key> override naming no field of `config`."""
  for a in argv:
    m = re.match(r"--(?:no)?config\.([\w.]+)", a)
    if not m:
      continue
    node, key = config, m.group(1)
    for part in key.split("."):
      if not hasattr(node, "keys") or part not in node.keys():
        return key
      node = node[part]
  return None


def parse_flags(argv):
  """absl flags_parser: like the default one, but an unknown or malformed config
  override, or a config file that cannot be loaded, ends in one line naming the key
  (and the closest valid keys)."""
  try:
    rest = flags.FLAGS(argv)
    if "config" in flags.FLAGS and flags.FLAGS.config is not None:
      flags.FLAGS.config.keys()     # config_flags defers a file's load error to here
    return rest
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError, OSError) as e:
    path = _config_file(argv)
    if path and not os.path.exists(path.split(":")[0]):
      fail(f"--config={path}: no such config file")
    config = None
    try:
      import importlib.util
      spec = importlib.util.spec_from_file_location("_cfg", path.split(":")[0])
      mod = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(mod)
      config = mod.get_config()
    except Exception:    # the message below still names the flag
      pass
    key = _unknown_key(argv, config) if config is not None else None
    if key is not None:
      near = closest_keys(config, key)
      fail(f"--config.{key}: the config has no field {key!r}"
           + (f"; did you mean {', '.join(near)}?" if near else ""))
    fail(str(e).replace("\n", " ").strip() or type(e).__name__)


def user_errors(main):
  """Wraps an absl main: USER_ERRORS end in one line and exit 1 (no traceback)."""
  @functools.wraps(main)
  def run(argv):
    try:
      return main(argv)
    except USER_ERRORS as e:
      fail(str(e))
  return run
