"""Progress output: a tqdm bar on a terminal, plain lines when stdout is not one.

  b = bar(total, desc="train", initial=0)   # tqdm on a TTY, else `Plain`
  b.update(n); b.close()

A bar's carriage returns glue lines together in a log file (`python train.py ... >
run.log`), so off a terminal the same calls print one plain line at most every
`every_s` seconds (and one at the end): `train: 120/1000 (12%), 3.1/s, ETA 4:43`.
"""
from __future__ import annotations

import sys
import time


def _clock(s: float) -> str:
  s = int(max(s, 0))
  return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Plain:
  """tqdm's counting interface (n, update, close, set_postfix) as plain lines."""

  def __init__(self, total=None, desc="", initial=0, file=None, every_s=30.0, unit="it"):
    self.total, self.desc, self.n, self.unit = total, desc, initial, unit
    self.file = file or sys.stdout
    self.every_s, self.t0, self.n0 = every_s, time.perf_counter(), initial
    self.t_line, self.closed, self.postfix = self.t0, False, ""

  def set_postfix(self, refresh=True, **kw):
    self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

  def update(self, k=1):
    self.n += k
    now = time.perf_counter()
    if now - self.t_line >= self.every_s:
      self._line(now)

  def _line(self, now):
    rate = (self.n - self.n0) / max(now - self.t0, 1e-9)
    parts = [f"{self.n}/{self.total}" if self.total else f"{self.n}"]
    if self.total:
      parts[0] += f" ({100 * self.n / self.total:.0f}%)"
    parts.append(f"{rate:.3g} {self.unit}/s")
    if self.total and rate > 0 and self.n < self.total:
      parts.append(f"ETA {_clock((self.total - self.n) / rate)}")
    if self.postfix:
      parts.append(self.postfix)
    print(f"{self.desc}: " + ", ".join(parts), file=self.file, flush=True)
    self.t_line = now

  def close(self):
    if not self.closed:
      self.closed = True
      if self.n > self.n0:
        self._line(time.perf_counter())


def bar(total=None, desc="", file=None, every_s=30.0, **tqdm_kw):
  """A tqdm bar when `file` (default stdout) is a terminal, else `Plain` lines at most
  every `every_s` seconds. tqdm_kw go to tqdm (initial= and unit= to both)."""
  file = file or sys.stdout
  if getattr(file, "isatty", lambda: False)():
    from tqdm import tqdm
    return tqdm(total=total, desc=desc or None, file=file, **tqdm_kw)
  return Plain(total, desc, tqdm_kw.get("initial", 0), file, every_s,
               tqdm_kw.get("unit", "it"))
