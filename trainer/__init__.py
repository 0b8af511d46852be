"""The training library behind train.py and eval.py (Flax-examples style: train.py is
a thin `main`, everything here is importable and tested).

  config.py      validate(config), make_optimizer(config), the config vocabularies
  checkpoint.py  orbax checkpoints, make_model, load_model(workdir)
  step.py        the jitted functional train step (TrainStep), evaluate, bleu
  loop.py        train_and_evaluate(config, workdir)
  evaluate.py    evaluate_workdir(workdir): eval.py's test metrics, samples, timings
  metrics.py     metrics.jsonl / TensorBoard / stdout, runtime_info()
  cli.py         one-line errors for the command line
"""
