"""Fields shared by every task config; each task's get_config() starts from these.

Every field can be overridden on the command line, e.g.
  python train.py --config=configs/mnist.py --config.attention=softmax \
      --config.num_train_steps=100 --workdir=workdirs/run
A task config may take a preset (`with_preset`): `--config=configs/shakespeare.py:cpu`.
"""
import typing

import ml_collections
import ml_collections.config_dict

from models.config import ModelConfig


def model_config(**overrides) -> ml_collections.ConfigDict:
  """The model section: every ModelConfig field, with its default (see models/config.py).

  A field whose value is None (e.g. num_kv_heads: None = MHA) is a typed placeholder
  (`ml_collections.config_dict.placeholder` of the field's type), so that it can be set
  from the command line (`--config.model.num_kv_heads=2`): a plain None cannot be
  overridden there."""
  import dataclasses
  d = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
       for f in dataclasses.fields(ModelConfig)}
  d.update(overrides)
  d["attention_options"] = ml_collections.ConfigDict(d["attention_options"])
  hints = typing.get_type_hints(ModelConfig)
  for k, v in d.items():
    if v is None:
      d[k] = ml_collections.config_dict.placeholder(_not_none(hints[k], k))
  return ml_collections.ConfigDict(d)


def _not_none(hint, key):
  """The type T of an `T | None` annotation (a placeholder's type)."""
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  if len(args) != 1 or not isinstance(args[0], type):
    raise TypeError(f"model field {key!r}: None default with annotation {hint!r}; "
                    "give it `T | None` for one type T so that it can be overridden")
  return args[0]


def with_preset(c: ml_collections.ConfigDict, preset: str,
                presets: dict) -> ml_collections.ConfigDict:
  """`c` as the named preset changes it ("" leaves it as it is).

  `presets` maps a name to a function that sets fields of a config in place: a task
  config's sizes for one kind of machine (`cpu`: minutes on 2 CPU cores, `gpu`: one
  GPU), chosen as `--config=configs/<task>.py:<preset>`. The results pages train
  these (studies/variants/compare.py). An unknown name lists the valid ones."""
  if preset:
    if preset not in presets:
      raise ValueError(f"configs/{c.task}.py has no preset {preset!r}; valid: "
                       f"{', '.join(sorted(presets))} (or none: configs/{c.task}.py)")
    presets[preset](c)
  return c


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.task = ""                  # a registered task (data/tasks/: `data.tasks.names()`):
                               # copy | listops | mnist | mqar | multi30k | shakespeare |
                               # text | tfds
  c.data_dir = ""              # "" = $ATTNLAB_DATA_DIR, else <repo>/.data (`make data`)
  c.seed = 0                   # parameters, data order and dropout all derive from it
  c.attention = ""             # "" = keep model.attention; a name swaps every layer
  c.model = model_config()     # ModelConfig fields (models/config.py documents each)
  # how the model runs (a run may resume under other values)
  c.dtype = ""                 # "" = model.dtype; float32 | bfloat16 (mixed: float32
                               # parameters, softmax statistics and loss)
  c.remat = ""                 # "" = model.remat; none | block (recompute each block in
                               # the backward pass, keep its matmul outputs) | full
  c.matmul_precision = "default"  # float32 matmuls: default (JAX's setting as it is:
                               # the backend's default) | high | highest. CPU: all true
                               # float32. NVIDIA GPU: default = TF32 (~1e-3 relative
                               # error, fast), highest = float32. TPU: 1/3/6 bf16 passes
  c.deterministic = False      # GPU: XLA's deterministic ops (bit-reproducible, slower)
  c.prefetch = 2               # batches put on the devices ahead by a thread (0 = none)
  # optimisation
  c.optimizer = "adamw"        # adamw | radam
  c.learning_rate = 1e-3       # peak learning rate
  c.schedule = "cosine"        # cosine (decay to 0 after warmup) | constant (after warmup)
  c.warmup_steps = 100         # linear warmup from 0
  c.weight_decay = 0.0         # decoupled weight decay (adamw; radam adds it too)
  c.b1 = 0.9                   # Adam beta1
  c.b2 = 0.98                  # Adam beta2
  c.grad_clip = 1.0            # global-norm clipping; 0 disables
  c.grad_accum_steps = 1       # micro-batches per optimizer update (optax.MultiSteps)
  c.batch_size = 32            # sequences per micro-batch (packed rows with packing)
  c.packing = False            # multi30k, listops: several examples per train row, with
                               # segment ids and per-example positions (no compute on
                               # padding; batch_size then counts rows; eval is unpacked)
  c.num_train_steps = 1000     # micro-batch steps in total
  # evaluation, logging, checkpoints
  c.eval_every = 250           # steps between evaluations (and at the end)
  c.eval_batches = 4           # batches of the eval split per evaluation in training
                               # (0 = all; eval.py scores the whole test split)
  c.eval_batch_size = 64       # sequences per eval batch
  c.log_every = 50             # steps between train-loss records
  c.checkpoint_every = 250     # steps between checkpoints (and at the end)
  c.keep_checkpoints = 2       # the last k checkpoints are kept, plus the best by eval
  c.progress = True            # tqdm progress bar with steps/s and ETA
  c.init_from = ""             # a train.py workdir whose weights start this run (full
                               # fine-tuning); for LoRA use lora.base_workdir instead
  # LoRA (Hu et al. 2021) on Dense layers, via nnx.LoRALinear (models/lora.py)
  c.lora = ml_collections.ConfigDict()
  c.lora.rank = 0              # 0: no adapters, all parameters train
  c.lora.targets = "q,k,v,o,mlp"  # Dense layers to adapt: q k v o fc1 fc2, mlp = fc1+fc2
  c.lora.alpha = 0.0           # scale numerator: updates are scaled by alpha/rank (0: rank)
  c.lora.base_workdir = ""     # a train.py workdir whose weights are the frozen base
  c.lora.adapters_only = True  # checkpoints hold the adapters only (base stays there)
  # scaling out (trainer/parallel.py): a data x fsdp x seq x tensor mesh over every device
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = 0              # batch split over it; 0 or -1 = the devices the others leave
  c.mesh.fsdp = 1              # batch split too; params + optimizer state sharded (ZeRO-3)
  c.mesh.seq = 1               # sequence split over it (context parallel; attention=ring)
  c.mesh.tensor = 1            # heads split over it (Megatron tensor parallel)
  # multi-host: jax.distributed.initialize; unset = one process (trainer/parallel.py)
  c.distributed = ml_collections.ConfigDict()
  c.distributed.coordinator_address = ""  # process 0's host:port; "" = $ATTNLAB_COORDINATOR_ADDRESS
  c.distributed.num_processes = 0   # processes in the job; 0 = $ATTNLAB_NUM_PROCESSES, else 1
  c.distributed.process_id = -1     # this process, 0..n-1; -1 = $ATTNLAB_PROCESS_ID
  c.distributed.heartbeat_timeout_s = 100  # seconds without a heartbeat after which a
                               # process counts as lost and the others end (exit status
                               # 134, the coordinator's log naming it); jax's default
  return c
