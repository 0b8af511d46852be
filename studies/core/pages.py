"""Writing results pages: the run record and header, markdown tables, splicing between
markers, and the JSON beside every page.

Every study stores its figures as JSON beside its page, with one `run_record` (where,
when, by which command and preset), and writes the page from that JSON alone, so that
`--page_only` rewrites any page without measuring anything.
"""
from __future__ import annotations

import datetime
import json
import os
import sys

GiB = 2 ** 30


def today() -> str:
  return datetime.date.today().isoformat()


def command_line(module: str, argv=None, drop=("--data_dir", "--out", "--workdir")) -> str:
  """`python -m <module> <flags>` as this process was run (argv, or sys.argv[1:] when
  None), without the flags that name local paths (`drop`): what a reader reruns."""
  args = sys.argv[1:] if argv is None else list(argv)
  return " ".join(["python -m " + module]
                  + [a for a in args if not a.startswith(tuple(drop))])


def ram_bytes() -> int:
  """Physical memory of this machine (Linux), else 16 GiB."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError):
    return 16 * GiB


def run_record(command: str, preset: str | None = None, **extra) -> dict:
  """The record every study stores with its figures: `trainer.metrics.runtime_info()`
  (backend, device kind and count, host CPU and cores, jax version, matmul
  precision), the RAM, the date, the command and the preset."""
  from trainer.metrics import runtime_info
  return {**runtime_info(), "ram_gib": round(ram_bytes() / GiB), "date": today(),
          "command": command, "preset": preset, **extra}


def where(run: dict) -> str:
  """The machine of a run record in words: 'AMD EPYC, 2 cores, 24 GiB RAM' on a CPU,
  'NVIDIA H100 80GB HBM3 x1 (AMD EPYC, 16 cores host)' on an accelerator."""
  host = run.get("host", "host not recorded")
  if run.get("backend", "cpu") == "cpu":
    s = host
  else:
    s = f"{run['device_kind']} x{run.get('device_count', 1)} ({host} host)"
  return s + (f", {run['ram_gib']} GiB RAM" if run.get("ram_gib") else "")


def header(run: dict) -> str:
  """The one sentence that opens every page: the command, the date, the machine, the
  jax version and the preset of the run whose figures the page shows."""
  s = (f"Written by `{run['command']}` on {run['date']}: {where(run)}, "
       f"jax {run.get('jax_version', 'version not recorded')}")
  return s + (f"; preset `{run['preset']}`." if run.get("preset") else ".")


def table(head: list, rows: list) -> list[str]:
  """Markdown table lines: a header row, the rule, one line per row of cells."""
  cell = lambda x: str(x)
  return (["| " + " | ".join(map(cell, head)) + " |", "|" + "---|" * len(head)]
          + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


def splice(text: str, begin: str, end: str, section: str) -> str:
  """`text` with what lies between the markers `begin` and `end` (markers kept)
  replaced by `section`; a ValueError names the missing marker."""
  for m in (begin, end):
    if m not in text:
      raise ValueError(f"no marker {m!r} to write between")
  pre, rest = text.split(begin, 1)
  return pre + begin + "\n" + section + "\n" + end + rest.split(end, 1)[1]


def splice_file(path: str, begin: str, end: str, section: str) -> None:
  """Rewrites the part of file `path` between its markers (see `splice`)."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  write_text(path, splice(text, begin, end, section))


def write_text(path: str, text) -> None:
  """Writes a page: a string, or lines joined by newlines and ended by one."""
  if not isinstance(text, str):
    text = "\n".join(text) + "\n"
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def write_json(path: str, obj) -> None:
  """The figures beside a page (indent 1, numpy floats as floats)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(obj, f, indent=1, default=float)


def read_json(path: str, default=None):
  """The JSON at `path`, or `default` when there is no such file."""
  if not os.path.exists(path):
    return default
  with open(path) as f:
    return json.load(f)


def keyed(d: dict) -> dict:
  """JSON turns int keys into strings; make them ints again."""
  return {int(k): v for k, v in d.items()}


def update_json(path: str, change, default=None):
  """Rewrites the JSON at `path` as change(its content, or `default`), under an exclusive
  lock on <path>.lock and through a temporary file: two studies appending to one
  record (two invocations of a sweep, one per core) neither lose an entry nor leave a
  half-written file. Returns what was written."""
  import fcntl
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    new = change(read_json(path, default))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump(new, f, indent=1)
    os.replace(tmp, path)
  return new
