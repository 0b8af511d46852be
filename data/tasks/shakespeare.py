"""shakespeare: Tiny Shakespeare as a character LM (65 characters), bits per character;
eval.py samples text continuing config.prompt."""
from data import pipeline
from data.tasks.outputs import text_samples
from data.tasks.registry import Study, TaskRecord, register

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
    smoke=lambda folder: dict(seq_len=8, prompt="RO", sample_len=6),
    study=Study(
        metric=("eval_loss", "val loss (nats/char)", False, "{:.3f}"),
        test_label="test loss (nats/char)",
        validation_label="loss (nats/char)",
        train_metric="eval_loss",
        decode=("tokens_per_s", "tok/s"),
        in_bits="bits/char",
        # the sample: no positions beyond those trained on
        test_overrides=lambda c: {"sample_len": int(c.seq_len) - len(c.prompt)},
        sections=("samples",),
        config_keys=("seq_len",),
        presets=("cpu",), order=1,
        lr_tie=0.02,
        tie=0.017,          # from its old-protocol seeds (0-2), until its re-run
        data_overrides={"test_fraction": 0.05},
        reference="NANOGPT",
        timing={"cpu": (50, 300, 50)},
        roles=("causal_lm",))))
