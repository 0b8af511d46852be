"""Command-line plumbing shared by train.py and eval.py: a user's mistake ends in one
line on stderr and exit status 1; a bug in the code keeps its traceback.

  app.run(main, flags_parser=parse_flags)      # unknown --config.x names close keys
  user_errors(main)                            # ConfigError, TrainError, ... -> one line

A variant's options by flag: --config.model.attention_options.<variant>.<option>=<v>
(e.g. `.local.window=16`). `attention_options` is an open mapping, with no field per
option for ml_collections to parse, so `parse_flags` takes these flags out of argv,
checks the variant's name and the option's against what the variant takes
(`attention.Variant.options`; a misspelt one names the closest valid ones), reads the
value as the type of the option's default, and sets it on the config, before anything
else runs (the model config then traces one call with it).
"""
from __future__ import annotations

import ast
import functools
import os
import re
import sys

from absl import flags

from attention.core.common import AttentionError
from data.fetch import DataError
from models import ConfigError
from trainer.config import TrainError, closest_keys

# Exceptions raised for what a user typed or pointed at (config values, data, workdir).
USER_ERRORS = (ConfigError, TrainError, AttentionError, DataError)


def fail(msg: str) -> None:
  """Prints `<program>: error: msg` to stderr and exits with status 1."""
  prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "attnlab"
  print(f"{prog}: error: {msg}", file=sys.stderr, flush=True)
  from trainer import parallel
  parallel.leave(1)        # one process of several: at once, not after the others
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


OPTION_FLAG = re.compile(r"--config\.model\.attention_options\.(\w+)\.(\w+)(?:=(.*))?$",
                         re.DOTALL)


def option_overrides(argv) -> tuple[list, list]:
  """(argv without the variant-option flags, [(flag, variant, option, value text)]) for
  --config.model.attention_options.<variant>.<option>=<value> (or `... <value>`)."""
  rest, found, i = [], [], 0
  while i < len(argv):
    m = OPTION_FLAG.match(argv[i]) if i else None     # argv[0] is the program
    if m is None:
      rest.append(argv[i])
    else:
      flag, text = argv[i].split("=", 1)[0], m.group(3)
      if text is None:
        if i + 1 == len(argv):
          fail(f"{flag}: needs a value ({flag}=<value>)")
        i += 1
        text = argv[i]
      found.append((flag, m.group(1), m.group(2), text))
    i += 1
  return rest, found


def option_value(text: str, default):
  """`text` read as the type of the option's default (bool, int, float, str); for a
  default of None, a Python literal (16, 0.5, None, True) or else the string itself.
  Raises ValueError saying what was expected."""
  if isinstance(default, bool):
    if text.lower() in ("true", "false"):
      return text.lower() == "true"
    raise ValueError(f"must be true or false (its default is {default}), got {text!r}")
  for kind, what in ((int, "an int"), (float, "a number")):
    if isinstance(default, kind):
      try:
        return kind(text)
      except ValueError:
        raise ValueError(f"must be {what} (its default is {default!r}), got {text!r}") \
            from None
  if isinstance(default, str):
    return text
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def apply_option_overrides(config, found) -> None:
  """Sets each (flag, variant, option, text) of `option_overrides` on
  config.model.attention_options; an unknown variant (the valid names listed), an
  option it does not take (the closest valid names) or a value not of the option's
  type ends in one line naming the flag."""
  import attention      # the registry: every variant registered
  opts = config.model.attention_options
  for flag, name, option, text in found:
    try:
      rec = attention.variant(name)
      rec.check_options([option])
      value = option_value(text, rec.options[option])
    except (AttentionError, ValueError) as e:
      fail(f"{flag}: {e}")
    with config.unlocked():
      opts[name] = {**(opts[name].to_dict() if name in opts else {}), option: value}


def parse_flags(argv):
  """absl flags_parser: like the default one, but an unknown or malformed config
  override, or a config file that cannot be loaded, ends in one line naming the key
  (and the closest valid keys); variant options given as dotted flags are set on the
  config (`option_overrides`)."""
  found, saved = [], sys.argv
  if "config" in flags.FLAGS:
    argv, found = option_overrides(argv)
  try:
    sys.argv = argv          # config_flags reads its overrides from sys.argv itself
    try:
      rest = flags.FLAGS(argv)
    finally:
      sys.argv = saved
    if "config" in flags.FLAGS and flags.FLAGS.config is not None:
      flags.FLAGS.config.keys()     # config_flags defers a file's load error to here
      apply_option_overrides(flags.FLAGS.config, found)
    return rest
  except (flags.Error, AttributeError, KeyError, TypeError, ValueError, OSError) as e:
    path = _config_file(argv)
    if path and not os.path.exists(path.split(":")[0]):
      fail(f"--config={path}: no such config file")
    config = None
    try:
      import importlib.util
      file, *arg = path.split(":", 1)        # configs/<task>.py[:<preset>]
      spec = importlib.util.spec_from_file_location("_cfg", file)
      mod = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(mod)
      config = mod.get_config(*arg)
    except ValueError as e:   # the config's own refusal (an unknown preset)
      fail(f"--config={path}: {e}")
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
