"""What an answer of the decision page is (studies.choose.answers): its choices, the
figures it cites (`Cite`: the file, the keys down to the value, the value, its words),
the rows it judges worse or has not judged, and the helpers its rules write with.
"""
from __future__ import annotations

import dataclasses

WORDS = 120           # the most words of a lead, before its table
MAX_CHOICES = 3
LM_PAGE, MEMORY_PAGE = "lm_length", "mqar_memory"


@dataclasses.dataclass(frozen=True)
class Cite:
  """One figure of a lead or table: read from `path` (a JSON file under the results
  folder) at `keys` (dict keys and list indices down to it); `text`: how it reads."""
  path: str
  keys: tuple
  value: object
  text: str


@dataclasses.dataclass(frozen=True)
class Choice:
  """A choice of an answer: `row`, `when` (the condition under which it wins), `says`
  (its figures in words: its interval and its cost at the question's length)."""
  row: str
  when: str
  says: str


@dataclasses.dataclass(frozen=True)
class Answer:
  """One question's answer. key/title: the question; source: the results page it rests
  on (a folder, or several joined by ", "); device: where its costs were measured
  ("CPU ..."; a GPU figure is only ever in `gpu`); lead: the paragraph (≤ WORDS words);
  choices: ≤ MAX_CHOICES in order; worse: rows judged worse on its own evidence (never
  a choice); pending: rows its evidence does not judge yet; change: what would change
  it; table: page lines; cites: every figure of the lead and the table; gpu: page lines
  of GPU figures from GPU pages, apart from the CPU table; notes: lines after the
  table."""
  key: str
  title: str
  source: str
  device: str
  lead: str
  choices: tuple = ()
  worse: tuple = ()
  pending: tuple = ()
  change: str = ""
  table: tuple = ()
  cites: tuple = ()
  gpu: tuple = ()
  notes: tuple = ()

  def words(self) -> int:
    return len(self.lead.split())


def _get(d, keys):
  for k in keys:
    d = d[k]
  return d


def cite(data, path: str, keys, fmt: str = "{}", value=None) -> Cite:
  """A Cite of data[keys...] (data: the loaded JSON of `path`), in `fmt` (a format, or a
  callable of the value)."""
  v = _get(data, keys) if value is None else value
  text = fmt(v) if callable(fmt) else fmt.format(v)
  return Cite(path, tuple(keys), v, text)


def kib(b) -> str:
  return f"{b / 1024:,.1f} KiB" if b < 2 ** 20 * 4 else f"{b / 2 ** 20:,.1f} MiB"


def _rows_list(xs) -> str:
  return ", ".join(f"`{x}`" for x in xs)


def _lead(parts: list[str]) -> str:
  return " ".join(p for p in parts if p)
