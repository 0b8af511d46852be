"""Tiny Shakespeare, character level: a decoder-only LM reporting bits/char.

Presets (`--config=configs/shakespeare.py:cpu`): nanoGPT's shakespeare_char CPU
config (4 layers, 4 heads, 128 wide, block 64, batch 12, 2000 iterations, no dropout)
and its GPU config (6 x 6 x 384, block 256, batch 64, dropout 0.2, 5000 iterations).
Both are what results/variants_shakespeare/ trains; configs/README.md times them.

Two architectures of 2025's open models, at the `cpu` preset's scale (hybrid stacks
by `model.layer_attention`, models/config.py), each docstring saying what it copies
and what it leaves out: `gpt_oss` (sliding-window layers alternating with full
attention, learned sinks, GQA, RoPE) and `qwen3_next` (Gated DeltaNet 3 : 1 gated
softmax attention, GQA).
"""
from configs import base


def get_config(preset: str = ""):
  c = base.get_config()
  c.task = "shakespeare"     # the data and metric (its record: data/tasks/shakespeare.py)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="lm", vocab_size=65, attention="softmax", d_model=128, num_heads=4,
      d_ff=512, num_layers=4, max_len=256, pre_ln=True, dropout=0.1)
  c.seq_len = 256              # characters per training sequence (<= model.max_len)
  c.eval_seq_len = 0           # characters per evaluation window (0: seq_len); longer
                               # than model.max_len only for positions that extrapolate
                               # (sinusoidal, rope, alibi, none; not learned)
  c.test_fraction = 0.05       # the last 5% of the training characters held out as the
                               # test split eval.py reports (studies/PROTOCOL.md's; 0:
                               # none, train on all, as every run before issue 97)
  c.learning_rate = 1e-3     # peak learning rate for this task
  c.batch_size = 32          # sequences per micro-batch
  c.num_train_steps = 2000   # micro-batch steps in total
  c.prompt = "ROMEO:"          # eval.py: the prompt of the text samples
  c.sample_len = 200           # eval.py: characters generated per sample
  c.temperature = 0.8          # eval.py: sampling temperature
  return base.with_preset(c, preset, PRESETS)


def cpu(c):
  """nanoGPT's shakespeare_char CPU settings: minutes on 2 CPU cores."""
  c.seq_len = 64               # nanoGPT's block_size 64
  c.batch_size = 12            # nanoGPT's batch_size 12
  c.num_train_steps = 2000     # nanoGPT's max_iters 2000
  c.warmup_steps = 100         # linear warmup steps
  c.eval_every = 250           # steps between evaluations (and at the end)
  c.eval_batches = 0           # the whole validation split per evaluation
  c.eval_batch_size = 64       # sequences per eval batch
  c.log_every = 50             # steps between train-loss records
  c.checkpoint_every = 500     # steps between checkpoints (and at the end)
  c.model.dropout = 0.0        # nanoGPT's CPU config has none
  # a local window / LSH chunk of 16 characters: a quarter of the 64 trained on
  c.model.attention_options = {"local": {"window": 16}, "reformer": {"chunk_size": 16}}


def gpu(c):
  """nanoGPT's shakespeare_char GPU settings (6 x 6 x 384, block 256)."""
  c.seq_len = 256              # nanoGPT's block_size 256
  c.batch_size = 64            # nanoGPT's batch_size 64
  c.num_train_steps = 5000     # nanoGPT's max_iters 5000
  c.learning_rate = 1e-3       # nanoGPT's learning_rate
  c.warmup_steps = 100         # nanoGPT's warmup_iters 100
  c.b2 = 0.99                  # nanoGPT's beta2
  c.weight_decay = 0.1         # nanoGPT's weight_decay
  c.eval_every = 500           # steps between evaluations (and at the end)
  c.eval_batches = 0           # the whole validation split per evaluation
  c.eval_batch_size = 64       # sequences per eval batch
  c.log_every = 100            # steps between train-loss records
  c.checkpoint_every = 1000    # steps between checkpoints (and at the end)
  c.model.d_model = 384        # nanoGPT's n_embd
  c.model.num_heads = 6        # nanoGPT's n_head
  c.model.d_ff = 1536          # 4 x n_embd
  c.model.num_layers = 6       # nanoGPT's n_layer
  c.model.dropout = 0.2        # nanoGPT's dropout
  # a local window / LSH chunk of 64 characters: a quarter of the 256 trained on
  c.model.attention_options = {"local": {"window": 64}, "reformer": {"chunk_size": 64}}


def gpt_oss(c):
  """In the style of gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"):
  its layers alternate a banded (sliding-window) attention of 128 tokens with full
  attention (`local` window 128, then `softmax`), every head of both has a learned
  attention sink (a logit in the softmax's denominator: Xiao et al. 2024's sinks,
  learned), grouped-query attention and RoPE, pre-norm. At the `cpu` preset's sizes
  (4 layers, 128 wide), on 256-character windows so that the 128-token band is half
  the context, with 2 key/value heads for 4 query heads (gpt-oss: 8 for 64).
  Left out: the mixture of experts (128 or 32 experts, top-4) and its SwiGLU with
  clamping (a dense ReLU FFN here), RMSNorm (LayerNorm), YaRN's context extension of
  RoPE, the attention biases, the sizes (36 or 24 layers, width 2880, 64 heads of 64)
  and the o200k tokenizer (characters here)."""
  cpu(c)
  c.seq_len = 256              # the band (128) is half the window trained on
  c.model.update(dict(
      positions="rope",        # RoPE in every layer (gpt-oss's, without YaRN)
      num_kv_heads=2,          # GQA: 2 query heads per key/value head
      layer_attention="local,softmax"))   # banded 128, then full, repeated
  c.model.attention_options = {"local": {"window": 128, "sinks": True},
                               "softmax": {"sinks": True}}


def qwen3_next(c):
  """In the style of Qwen3-Next (Qwen team 2025, "Qwen3-Next: Towards Ultimate
  Training & Inference Efficiency"): every 4 layers are 3 Gated DeltaNet layers (Yang
  et al. 2025, with their published layer: q/k/v short convolutions, SiLU, an output
  RMSNorm and gate) and 1 softmax attention layer with Qiu et al. 2025's gated
  attention (a sigmoid gate per head and channel on its output, `attn_gate`),
  grouped-query attention, and rotary positions on a quarter of each attention head's
  dimensions (Qwen3-Next's partial RoPE; the DeltaNet layers take none). At the `cpu`
  preset's sizes (4 layers: one period, 128 wide, 64-character windows), 2 key/value
  heads for 4 query heads (Qwen3-Next: 2 for 16). Left out: the mixture of experts
  (512 experts, 10 routed and 1 shared) (a dense ReLU FFN here), zero-centred and
  weight-decayed norms (LayerNorm), the q/k norms of its attention layers, its
  DeltaNet's separate value-head count (32 value heads for 16 q/k heads), multi-token
  prediction, the sizes (48 layers, width 2048, heads of 256 and 128) and the
  tokenizer (characters here)."""
  cpu(c)
  c.model.update(dict(
      positions="rope",        # on the attention layers only (models/config.py)
      rope_fraction=0.25,      # Qwen3-Next rotates 64 of each head's 256 dimensions
      num_kv_heads=2,          # GQA in every layer
      layer_attention="gated_deltanet*3,softmax+attn_gate"))


PRESETS = {"cpu": cpu, "gpu": gpu, "gpt_oss": gpt_oss,    # base.with_preset
           "qwen3_next": qwen3_next}
