"""multi30k: Multi30k English -> German as sentencepiece ids (a shared vocabulary), an
encoder-decoder scored by BLEU (sacrebleu) of beam or greedy translations."""
import os

from data import pipeline
from data.tasks.outputs import timed
from data.tasks.registry import Study, TaskRecord, register


def eval_translation(config, task, model, out, mode, key, **_):
  """translations.txt: source / reference / hypothesis of the first 16 sentences of the
  evaluated split; their speed (sentences/s)."""
  import numpy as np
  from models.generate import translate
  src, _, refs = task.splits[task.eval_split]
  (toks, _), dt = timed(translate, model, src[:16], max_len=int(config.tgt_len),
                        beam_size=int(config.get("beam_size", 0)), mode=mode)
  with open(os.path.join(out, "translations.txt"), "w", encoding="utf-8") as f:
    for s, r, h in zip(src[:16], refs[:16], np.asarray(toks)):
      f.write(f"src: {task.detokenize(s)}\nref: {r}\nhyp: {task.detokenize(h)}\n\n")
  return {"sentences_per_s": 16 / dt}


TASK = register(TaskRecord(
    name="multi30k",
    pipeline=pipeline.Multi30k,
    metric="bleu", label="BLEU",
    kind="encdec",
    splits={"train": "Multi30k task 1's 29,000 training pairs",
            "validation": "val2016 (1,014 pairs)",
            "test": "test_2016_flickr (1,000 pairs)"},
    seq_key="tgt_len",
    lengths=lambda c: {"src_len": int(c.src_len), "tgt_len": int(c.tgt_len)},
    evaluator=eval_translation,
    datasets=("multi30k",),
    smoke=lambda folder: dict(src_len=8, tgt_len=8, bleu_sentences=4, beam_size=2),
    study=Study(
        metric=("bleu", "BLEU (test2016)", True, "{:.1f}"),
        validation_label="BLEU (val2016)",
        train_metric="bleu",
        decode=("sentences_per_s", "sent/s"),
        validation_overrides={"bleu_sentences": 100000},       # the whole split
        test_overrides=lambda c: {"bleu_sentences": 100000},
        sections=("bleu_signature",),
        config_keys=("src_len", "tgt_len", "length_buckets"),
        presets=(), order=2,   # its page is archived (results/archive/README.md)
        lr_tie=0.5,
        tie=0.14,           # from its old-protocol seeds (0-2), until its re-run
        reference="MULTI30K",
        timing={"cpu": (30, 90, 30)})))
