"""mqar: multi-query associative recall of Zoology (Arora et al. 2023, §3), generated
by data/mqar.py; scored on the queried values (token_accuracy)."""
from data import mqar, pipeline
from data.tasks.registry import Study, TaskRecord, register


def _check(config, mcfg) -> None:
  """The (vocab_size, num_pairs, seq_len) of config.mqar make an MQAR sequence, and so
  does every shape of its training mixture (mqar.train_mix)."""
  m = config.mqar
  try:
    mqar.check(m.vocab_size, m.num_pairs, m.seq_len)
    mqar.check_mix(m.vocab_size, m.num_pairs, m.seq_len,
                   mqar.parse_mix(m.get("train_mix", "")), config.batch_size)
  except ValueError as e:
    from models import ConfigError
    raise ConfigError(f"config {e}") from None


TASK = register(TaskRecord(
    name="mqar",
    pipeline=pipeline.Mqar,
    metric="token_accuracy", label="accuracy on the queried values",
    splits={"train": "fresh sequences per step, from (seed, step)",
            "validation": "as copy's: a stream of the training seed, (seed, 2^31 - 1)",
            "test": "as copy's: data.pipeline.TEST_STREAM"},
    seq_key="mqar.seq_len",
    lengths=lambda c: {"mqar.seq_len": int(c.mqar.seq_len)},
    check=_check,
    smoke=lambda folder: dict(mqar=dict(vocab_size=16, num_pairs=2, seq_len=16,
                                        train_mix=""),
                              model=dict(max_len=16)),
    study=Study(tie=0.00037, roles=("recall",))))    # its page is the recall study's (studies/recall/)
