"""Your own text files as a byte-level LM: bits per byte, samples from a prompt.

  python train.py --config=configs/text.py:cpu --config.text.files='/usr/share/common-licenses/*' \
      --workdir=workdirs/licenses
  python eval.py --workdir=workdirs/licenses

text.files names the corpus: a glob (quote it; ** recurses) or a directory (every
file under it but hidden ones). Each non-empty file is one document; a file that is
not UTF-8 text (a NUL byte, an invalid sequence) is refused, naming it. Split rule
(data.builders.text_corpus, text_split): h = the first 8 bytes of sha256 of the
file's name relative to the corpus root (the directory, or the glob's folder before
its first wildcard) as a fraction of 2^64; test if h < text.test_fraction,
validation if h < test_fraction + validation_fraction, else train. In a small
corpus a split left empty (train, then validation, then test) takes the document of
smallest h from the split with the most documents to spare: 2 files make train +
validation, 3 or more all three. The same file keeps its split wherever the corpus
lies (in a large one, whatever else it holds). Training windows are cut inside documents;
the vocabulary is the 256 byte values (model.vocab_size is set from it).
The model and presets are configs/shakespeare.py's (nanoGPT's shakespeare_char);
`pycode` is the cpu preset on the code corpus of `python -m data fetch pycode`.
"""
from configs import base
from configs import shakespeare


def get_config(preset: str = ""):
  c = base.get_config()
  c.task = "text"              # the data and metric (its record: data/tasks/text.py)
  c.text = base.ml_collections.ConfigDict(dict(
      files="",                # a glob or a directory of UTF-8 text files (required)
      validation_fraction=0.1,  # share of documents (by name hash) held out for validation
      test_fraction=0.1))      # share held out for eval.py's test figure
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=256, attention="softmax", d_model=128, num_heads=4,
      d_ff=512, num_layers=4, max_len=256, pre_ln=True, dropout=0.1)
  c.seq_len = 256              # bytes per training window (<= model.max_len)
  c.eval_seq_len = 0           # bytes per evaluation window (0: seq_len); longer than
                               # model.max_len only for positions that extrapolate
  c.learning_rate = 1e-3       # peak learning rate for this task
  c.batch_size = 32            # windows per micro-batch
  c.num_train_steps = 2000     # micro-batch steps in total
  c.prompt = ""                # eval.py: the prompt of the samples ("" = a document's start)
  c.sample_len = 200           # eval.py: bytes generated per sample
  c.temperature = 0.8          # eval.py: sampling temperature
  return base.with_preset(c, preset, PRESETS)


def cpu(c):
  """configs/shakespeare.py's cpu preset (nanoGPT's shakespeare_char CPU settings:
  4 x 4 x 128, windows of 64, batch 12): minutes on 2 CPU cores."""
  shakespeare.cpu(c)


def gpu(c):
  """configs/shakespeare.py's gpu preset (6 x 6 x 384, windows of 256, batch 64)."""
  shakespeare.gpu(c)


def gpt_oss(c):
  """configs/shakespeare.py's gpt_oss preset on your bytes: 128-byte sliding-window
  layers alternating with full attention, learned sinks on both, GQA, RoPE, on
  256-byte windows (its docstring says what it copies from gpt-oss and what it leaves
  out)."""
  shakespeare.gpt_oss(c)


def qwen3_next(c):
  """configs/shakespeare.py's qwen3_next preset on your bytes: Gated DeltaNet 3 : 1
  gated softmax attention, GQA, partial RoPE on the attention layers (its docstring
  says what it copies from Qwen3-Next and what it leaves out)."""
  shakespeare.qwen3_next(c)


def pycode(c):
  """The cpu preset on the code corpus (`python -m data fetch pycode`, data/pycode.py:
  the .py files of 4 pinned PyPI sdists, 41 MB) in the default data dir; with another
  data dir, name its tree: --config.text.files=<data_dir>/pycode."""
  cpu(c)
  from data import fetch
  c.text.files = str(fetch.default_data_dir() / "pycode")


PRESETS = {"cpu": cpu, "gpu": gpu, "gpt_oss": gpt_oss,    # base.with_preset
           "qwen3_next": qwen3_next, "pycode": pycode}
