"""Multi30k English -> German with an encoder-decoder, scored by BLEU (sacrebleu)."""
from configs import base


def get_config():
  c = base.get_config()
  c.task = "multi30k"
  c.spm_vocab_size = 8000      # shared sentencepiece vocabulary trained on the train split
  c.src_len = 64               # source tokens per example (longer ones are truncated)
  c.tgt_len = 64               # target tokens incl. EOS (longer ones are truncated)
  c.model = base.model_config(
      kind="encdec", vocab_size=8000, attention="softmax", d_model=256, num_heads=4,
      d_ff=1024, num_layers=3, max_len=65, dropout=0.1, share_embeddings=True,
      tie_output=True)
  c.learning_rate = 5e-4
  c.warmup_steps = 500
  c.batch_size = 64
  c.num_train_steps = 5000
  c.beam_size = 4              # eval.py / BLEU: beam width (0 = greedy)
  c.length_penalty = 0.6       # eval.py / BLEU: GNMT alpha
  c.bleu_sentences = 256       # eval.py / BLEU: validation sentences translated per eval
  return c
