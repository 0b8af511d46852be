"""shakespeare: Tiny Shakespeare as a character LM (65 characters), bits per character;
eval.py samples text continuing config.prompt."""
from data import pipeline
from data.tasks.outputs import text_samples
from data.tasks.registry import TaskRecord, register

TASK = register(TaskRecord(
    name="shakespeare",
    pipeline=pipeline.Shakespeare,
    metric="bits_per_char", label="bits/char",
    splits={"train": "the first 90% of the characters (nanoGPT's split), less the "
                     "held-out test characters",
            "validation": "the last 10% of the characters",
            "test": "the last test_fraction of the training characters, held out "
                    "(configs/shakespeare.py: 0.05; 0: none)"},
    seq_key="seq_len",
    lengths=lambda c: {"seq_len": int(c.seq_len)},
    has_test=lambda c: float(c.get("test_fraction", 0.0) or 0.0) > 0,
    free_eval_length=True,
    evaluator=text_samples,
    datasets=("tiny_shakespeare",),
    smoke=lambda folder: dict(seq_len=8, prompt="RO", sample_len=6)))
