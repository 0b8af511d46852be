"""The length study's presets (issue 101), declared before any of its runs: the rows, the
lengths, the tokens per step, the model, the rate grid and its tie, the check at the
longest length, and the evaluation. Every field is read by studies.length.runner (what
trains), studies.length.plan (what it costs) and studies.length.page (what it states).

  rows        (name, attention, model overrides) in the issue's order: the exact
              reference (flash) first, then the six named rows, then those the budget
              allows, the control row first among them (flash inside gated_deltanet's
              layer: `Row.control`, out of the family). A hybrid row is a config
              override of the same model (a `model.layer_attention` pattern:
              models/config.py), never a new variant.
  lengths     bytes per training window; `batch` keeps the tokens per step the same at
              every length (tokens / length windows a step), and every run trains the
              same `steps`
  model       configs/text.py:pycode (Shakespeare cpu's 4 layers x 128, 4 heads, FFN
              512, no dropout; the 256 byte values of the text task), model.max_len =
              the length trained on (learned positions sized to it)
  grid        the rate grid at `select_at` (protocol.RateGrid: >= 4 rates, an edge
              winner extends it up to protocol.EXTEND a side); the chosen rate is carried
              to the other lengths unchanged
  tie         how the rate choice's tie is set (`tie_of`): before the reference's
              seed noise is measured, `provisional_tie` (Shakespeare's tie, nats ->
              bits); the reference's own rate is chosen under it. Its reporting seeds at
              `select_at` then fix the tie of every other row (protocol.tie_threshold of
              their validation figures, at least `tie_floor`), recorded in the ledger
  check       (length, rows): at that length those rows also train the selection seed
              at the carried rate and its two neighbours on the ladder (x/3, x3); the
              page states whether the carried rate is within the tie of its neighbours
  eval_tokens bytes of each split scored per run (validation: the rate choice; test:
              the page's figures and the recall split): the first eval_tokens / length
              windows of the split, its documents cut in order (data.pipeline.Text)
  recall_n    the n of data.recall_mask (the recall positions: bytes continuing an
              (n+1)-gram seen earlier in the same window)
"""
from __future__ import annotations

import dataclasses
import math
import os

from data import tasks
from studies.core import protocol

# The study's metric, test bits/byte: lower is better, bounded below by 0 (the intervals
# stay inside it)
METRIC = protocol.Metric(higher_better=False, fmt="{:.3f}", lo=0.0, hi=None)

# The causal-LM task's tie (Study.roles "causal_lm": Shakespeare's Study.tie, nats/char)
# in bits/byte, this study's unit: the reference's rate choice is made under it, before the
# reference's seed noise on this corpus exists (`Preset.tie_of`).
SHAKESPEARE_TIE_NATS = protocol.TIES[tasks.with_role("causal_lm")]


@dataclasses.dataclass(frozen=True)
class Row:
  """One row of the page: `attention` (config.attention) and the model overrides that
  make it (a hybrid's layer pattern, a window)."""
  name: str
  attention: str
  model: tuple = ()           # ((field, value), ...) over configs/text.py:pycode's model
  why: str = ""
  control: str = ""           # a control row: the row whose layer pieces it puts around
                              # flash; out of the family (its pair with that row is
                              # exploratory: is the row's gap the layer's or the
                              # attention's?)

  def model_overrides(self) -> dict:
    return {k: (dict(v) if isinstance(v, tuple) else v) for k, v in self.model}


_LOCAL128 = (("attention_options", (("local", {"window": 128}),)),)


def _layer_of(name: str) -> str:
  """The model's `gated_layer` that puts variant `name`'s published layer pieces (its
  record's `layer`: short convolution, norms, gates) around every self-attention."""
  import attention
  return ",".join(("published",) + tuple(attention.variant(name).layer))


ROWS = (
    Row("flash", "flash", why="the exact reference (softmax's function, by a kernel "
        "that never holds the T x T scores)"),
    Row("gated_deltanet", "gated_deltanet", why="fixed state, with its paper's layer"),
    Row("qwen3_next", "flash", (("layer_attention", "gated_deltanet*3,flash+attn_gate"),),
        why="Qwen3-Next-style hybrid: 3 Gated DeltaNet layers, then 1 gated softmax "
        "attention layer (configs/shakespeare.py:qwen3_next's pattern on this model)"),
    Row("local128", "local", _LOCAL128, why="sliding window of 128 bytes"),
    Row("gpt_oss", "flash", (("layer_attention", "local,flash"),) + _LOCAL128,
        why="gpt-oss-style hybrid: window-128 layers alternating with full attention "
        "(configs/shakespeare.py:gpt_oss's pattern, without its sinks, GQA and RoPE)"),
    Row("linear", "linear", why="linear attention (fixed state, no gate)"),
    Row("flash_gdn_layer", "flash", (("gated_layer", _layer_of("gated_deltanet")),),
        control="gated_deltanet",
        why="the control: flash inside gated_deltanet's layer (its q/k/v short "
        "convolution, SiLU, output norm and gate), so that gated_deltanet's gap to flash "
        "reads as its attention's or its layer's (as the budget allows)"),
    Row("gla", "gla", why="as the budget allows"),
    Row("deltanet", "deltanet", why="as the budget allows"),
    Row("mla", "mla", why="as the budget allows"),
    Row("retention", "retention", why="as the budget allows"),
)
NAMED = 6                     # the six rows, which the budget must fit


def controls() -> dict:
  """{control row: the row whose layer it copies} (`Row.control`)."""
  return {r.name: r.control for r in ROWS if r.control}


def row(name: str) -> Row:
  for r in ROWS:
    if r.name == name:
      return r
  raise ValueError(f"unknown row {name!r}; rows: {', '.join(r.name for r in ROWS)}")


@dataclasses.dataclass(frozen=True)
class Preset:
  name: str
  lengths: tuple              # bytes per window, shortest first
  tokens_per_step: int        # the same at every length: batch = tokens / length
  steps: int                  # training steps of every run
  grid: tuple                 # the rate grid at select_at (>= protocol.MIN_RATES)
  select_at: int              # the length whose validation chooses each row's rate
  check: tuple                # (length, (row names)): the carried rate's check
  rows: tuple                 # row names trained, in order
  eval_tokens: int            # bytes of each split scored per run
  files: str = ""             # text.files relative to the data dir ("": pycode whole)
  warmup: int = 100           # linear warmup steps (configs/shakespeare.py:cpu's)
  recall_n: int = 4           # data.recall_mask's n (data.recall.N_RECALL)
  tie_floor: float = 0.001    # bits/byte: the tie where the reference shows no spread
  dropped: tuple = ()         # (length, why): lengths the plan left out
  trained: int = 10           # the first `trained` rows are run by default (the budget's)
  model: tuple = ()           # ((field, value), ...) over the model of every row (tests)
  why: str = ""

  def __post_init__(self):
    for L in self.lengths:
      if self.tokens_per_step % L:
        raise ValueError(f"preset {self.name}: {self.tokens_per_step} tokens a step is "
                         f"not a whole number of {L}-byte windows")
    protocol.RateGrid(tuple(self.grid), 0.0)       # >= MIN_RATES rates

  def batch(self, length: int) -> int:
    return self.tokens_per_step // int(length)

  @property
  def tokens_per_run(self) -> int:
    return self.tokens_per_step * self.steps

  @property
  def provisional_tie(self) -> float:
    """Shakespeare's tie in bits (Shakespeare's nats/char / ln 2): the reference's own
    rate choice's tie, made before its seed noise on this corpus is measured."""
    return SHAKESPEARE_TIE_NATS / math.log(2)

  def tie_of(self, reference_seeds) -> float:
    """The tie of a row's rate choice: protocol.tie_threshold of the reference's
    reporting seeds' validation figures at select_at (>= tie_floor) once all of them
    ran; before that, `provisional_tie`."""
    ref = [float(x) for x in reference_seeds]
    if len(ref) < len(protocol.reporting_seeds(PAGE)):
      return self.provisional_tie
    return protocol.tie_threshold(ref, self.tie_floor)

  def rule(self, tie: float) -> protocol.RateGrid:
    """The rate choice at select_at (lower bits/byte is better)."""
    return protocol.RateGrid(tuple(self.grid), float(tie), higher_better=False,
                             chance=8.0)


PAGE = "lm_length"            # protocol.reporting_seeds' key: 3 seeds (an expensive page)
SEEDS = protocol.reporting_seeds(PAGE)

PRESETS = {
    # Fixed from the step costs measured on this 2-core host before any run
    # (results/lm_length/step_costs.json; studies.length.plan's arithmetic in plan.json):
    # 368 steps (the fewest in 16s reaching 3M bytes a run), 256 dropped (`dropped`).
    "cpu": Preset(
        name="cpu", lengths=(1024, 4096), tokens_per_step=8192, steps=368, trained=6,
        grid=(3e-4, 1e-3, 3e-3, 9e-3), select_at=1024,
        check=(4096, ("flash", "gated_deltanet")), rows=tuple(r.name for r in ROWS),
        eval_tokens=131072,
        dropped=((256, "the six named rows at 256, 1,024 and 4,096 take 2,375 "
                  "CPU-minutes (results/lm_length/plan.json, from the step costs "
                  "measured 2026-12-07), over the 2,000 of issue 101, which drops 256 "
                  "before any row; at 1,024 and 4,096 they take 1,966"),),
        why="8,192 bytes a step (batch 8 at 1,024, 2 at 4,096), 368 steps: 3.0M "
            "training bytes a run, the fewest steps (in 16s) reaching 3M"),
    # For a lent GPU (issue 101 item 4; run by the GPU issue, not here): the same rows,
    # lengths to 16,384, 4x the tokens per step and 8x the steps (100M bytes a run),
    # on a slice of the corpus that fits a 64 MiB carry: networkx and pygments (the
    # top folders n* and p*), 1,012 files, 10,938,132 bytes of text (measured
    # 2026-12-07), each in the same split as in the cpu preset's corpus (the split
    # hashes names relative to <data_dir>/pycode, the glob's folder), extracted from
    # the sha256-verified archives (`python -m data fetch pycode`).
    "gpu": Preset(
        name="gpu", lengths=(1024, 4096, 16384), tokens_per_step=32768, steps=3072,
        grid=(3e-4, 1e-3, 3e-3, 9e-3), select_at=4096, trained=len(ROWS),
        check=(16384, ("flash", "gated_deltanet")), rows=tuple(r.name for r in ROWS),
        eval_tokens=1048576, files="pycode/[np]*/**/*.py",
        why="32,768 bytes a step (batch 32, 8, 2), 3,072 steps: 100M bytes a run"),
}
# Longer training, exploratory (studies.length.longer, 2026-12-08): the cpu preset's
# runs at 1,024 with 4x the steps (12M bytes a run), for flash, gated_deltanet and the
# control, at the rates the cpu preset chose (carried: this preset sweeps nothing, and
# its grid is the cpu one's only for the record). Added after the floors showed flash
# at 3M bytes between the 2-gram and 3-gram of its own bytes.
PRESETS["cpu_x4"] = dataclasses.replace(
    PRESETS["cpu"], name="cpu_x4", lengths=(1024,), steps=4 * 368, trained=0,
    check=(1024, ()), dropped=(),
    why="the cpu preset at 1,024 with 4x its steps (1,472: 12.1M training bytes a run), "
        "rates carried from it; exploratory")
GPU_SLICE = {"files": 1012, "bytes": 10938132}     # the gpu preset's slice, measured


OUT = "results/lm_length"     # the cpu preset's page; another preset's: OUT/<name>


def out_of(name: str) -> str:
  """The folder of preset `name`'s page, ledger and plots: results/lm_length for cpu
  (the page the decision page reads), results/lm_length/<name> for another (the gpu
  preset's runs on a lent GPU never overwrite the CPU page or mix into its ledger)."""
  return OUT if name == "cpu" else f"{OUT}/{name}"


def folder_of(name: str) -> str:
  """out_of(name) relative to the cpu page's folder ("." for cpu, "gpu" for gpu): the
  link from the cpu page, and from results/<it> on the decision page."""
  return os.path.relpath(out_of(name), OUT)


def preset(name: str) -> Preset:
  if name not in PRESETS:
    raise ValueError(f"--preset: unknown preset {name!r}; valid: {sorted(PRESETS)}")
  return PRESETS[name]


def make_config(p: Preset, row_name: str, length: int, lr: float, seed: int,
                data_dir: str | None = None):
  """configs/text.py:pycode for one run: `row_name`'s attention and model overrides, at
  `length` bytes a window (batch tokens_per_step / length, model.max_len = length),
  `steps` steps at rate `lr` from `seed`, evaluated once, at the end, on the first
  eval_tokens bytes of validation; the gated family's layer by protocol version 2
  (protocol.overrides)."""
  from configs import text
  from data import fetch
  r = row(row_name)
  c = text.get_config("pycode")
  if p.files:
    c.text.files = str(fetch.default_data_dir() / p.files)
  if data_dir:
    c.data_dir = data_dir
    c.text.files = str(_under(data_dir, p.files or "pycode"))
  c.progress = False
  # a hybrid's layer pattern sets each layer's variant; config.attention would swap
  # them all (trainer.validate refuses both at once)
  c.attention = "" if dict(r.model).get("layer_attention") else r.attention
  c.seq_len = int(length)
  c.batch_size = p.batch(length)
  c.num_train_steps = int(p.steps)
  c.warmup_steps = int(p.warmup)
  c.learning_rate = float(lr)
  c.seed = int(seed)
  c.eval_every = int(p.steps)             # once, at the end
  c.eval_batch_size = p.batch(length)
  c.eval_batches = max(1, p.eval_tokens // p.tokens_per_step)
  c.checkpoint_every = max(1, int(p.steps) // 4)
  c.log_every = max(1, int(p.steps) // 16)
  c.model.max_len = int(length)
  c.model.gated_layer = protocol.gated_layer(protocol.VERSION)
  c.model.update(dict(p.model))
  ov = r.model_overrides()
  opts = ov.pop("attention_options", None)
  c.model.update(ov)
  for name, o in (opts or {}).items():
    c.model.attention_options[name] = dict(o)
  return c


def fingerprint(config, p: Preset) -> str:
  """sweep.config_fingerprint of a run's config with its corpus named as the preset
  names it (relative to the data dir), so that a run's identity does not depend on
  where a clone keeps its data."""
  from studies.core import sweep
  c = config.copy_and_resolve_references()
  c.text.files = p.files or "pycode"
  return sweep.config_fingerprint(c)


def _under(data_dir, rel):
  import pathlib
  return pathlib.Path(data_dir) / rel
