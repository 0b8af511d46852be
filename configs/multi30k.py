"""Multi30k English -> German with an encoder-decoder, scored by BLEU (sacrebleu)."""
from configs import base


def get_config():
  c = base.get_config()
  c.task = "multi30k"        # the data and metric (see input_pipeline.TASKS)
  c.spm_vocab_size = 8000      # shared sentencepiece vocabulary trained on the train split
  c.src_len = 64               # source tokens per example (longer ones are truncated)
  c.tgt_len = 64               # target tokens incl. EOS (longer ones are truncated)
  c.length_buckets = (16, 24, 32, 48, 64)  # train batches group sentences of similar
                               # length, cut to the smallest bucket that holds them (one
                               # compile per bucket; () = every batch src_len/tgt_len wide)
  # model section; every field is documented in models/config.py
  c.model = base.model_config(
      kind="encdec", vocab_size=8000, attention="softmax", d_model=256, num_heads=4,
      d_ff=1024, num_layers=3, max_len=65, dropout=0.1, share_embeddings=True,
      tie_output=True)
  c.learning_rate = 5e-4     # peak learning rate for this task
  c.warmup_steps = 500       # linear warmup steps
  c.batch_size = 64          # sequences per micro-batch
  c.num_train_steps = 5000   # micro-batch steps in total
  c.beam_size = 4              # eval.py / BLEU: beam width (0 = greedy)
  c.length_penalty = 0.6       # eval.py / BLEU: GNMT alpha
  c.bleu_sentences = 256       # BLEU: validation sentences translated per eval in
                               # training (eval.py translates the whole test split)
  return c
