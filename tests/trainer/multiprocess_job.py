"""The multi-process halves of tests/trainer/test_multiprocess.py: run by the launcher,

  python -m trainer.launch --processes=2 --devices_per_process=2 \\
      tests/trainer/multiprocess_job.py JOB ROOT

or, as the one-process reference, with --processes=1 --devices_per_process=4. Each
process prints one line `RESULT {json}` (its own facts). The test asserts and
compares the workdirs' final checkpoints (restored in its own one-device process);
this file only runs.

JOB:
  train ROOT [MESHES]
                the placement check on every mesh of MESHES (every row of a global
                batch placed once, each process handing over only its rows), then
                TINY on each mesh named (comma-separated; default all) in
                ROOT/<mesh>, noting the rows of the train and eval batches each
                process's task read; then (2 processes) a workdir whose lock is held
                (ROOT/locked) refused in every process, and last the run on
                FAULT_MESH in ROOT/killed, process 1 killing itself (SIGKILL) as it
                makes batch KILL_AT, after the checkpoint of step CHECKPOINT_EVERY.
  resume ROOT REF
                the same run again: it resumes ROOT/killed from its last checkpoint;
                the checkpoint of the one-process reference run REF/fsdp restored onto
                this job's FSDP mesh, each process's shards compared with
                ROOT/ref_fsdp_final.npz (the test's one-device restore of it); a
                SIGTERM to process 1 alone (ROOT/sigterm), after which all processes
                must stop at one step and save one checkpoint there.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT_DIR)

STEPS, CHECKPOINT_EVERY, KILL_AT, SIGTERM_AT = 8, 4, 6, 3
SIGTERM_STEPS = 400       # the SIGTERM run's length: it must stop long before
HEARTBEAT_S = 5
LAUNCH_S = 420            # a launch killed after this (a hang); ~70 s on a busy 2-core box
# config changes of each mesh (4 devices in all); seq > 1 runs ring attention
MESHES = {"dp": dict(data=4), "fsdp": dict(data=2, fsdp=2),
          "ring": dict(data=2, seq=2)}
# the mesh of the fault runs (the lock, the kill and its resume, the SIGTERM): the data
# axis across the processes and the parameters split inside each
FAULT_MESH = "fsdp"


def tiny(mesh: str, **kw):
  """The copy task on a one-layer d_model 16 model, STEPS steps, dropout on, float32
  matmuls in full, on MESHES[mesh]; kw: other config fields."""
  from configs import copy as copy_cfg
  c = copy_cfg.get_config()
  c.model.update(dict(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8,
                      dropout=0.1))
  c.update(dict(copy_len=3, num_train_steps=STEPS, batch_size=8, eval_batch_size=8,
                eval_batches=1, eval_every=STEPS, log_every=1,
                checkpoint_every=CHECKPOINT_EVERY, warmup_steps=1, schedule="constant",
                progress=False, attention="ring" if mesh == "ring" else "softmax",
                matmul_precision="highest", prefetch=0))
  c.distributed.heartbeat_timeout_s = HEARTBEAT_S
  c.mesh.update(MESHES[mesh])
  c.update(kw)
  return c


def shard_diff(model, reference: dict) -> float:
  """max |a - b| over every array of a model's state and this process's shards of it
  against the whole arrays `reference` ({path: numpy array}, as `final_state`):
  each process checks its own shards, nothing is gathered."""
  import jax
  import numpy as np
  from flax import nnx
  leaves = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model)))[0]
  worst = 0.0
  for p, x in leaves:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    want = reference[jax.tree_util.keystr(p)]
    for s in x.addressable_shards:
      worst = max(worst, float(np.max(np.abs(np.asarray(s.data, np.float64)
                                             - want[s.index].astype(np.float64)),
                                      initial=0.0)))
  return worst


def placement(config) -> dict:
  """put_batch of a (B, T) batch whose entries name their row and column, on this
  config's mesh: {"rows": this process's local_rows, "equal": each of this process's
  device shards holds the batch's values at its index, "shards": (first row, last
  row, first column, last column) of each}."""
  import jax
  import numpy as np
  from trainer import parallel
  mesh = parallel.make_mesh(config.mesh)
  B, T = 8, 8
  x = (np.arange(B)[:, None] * 100 + np.arange(T)[None]).astype(np.int32)
  y = parallel.put_batch({"x": x}, mesh)["x"]
  rows = parallel.local_rows(mesh, B)
  shards = sorted((int(s.data[0, 0]) // 100, int(s.data[-1, 0]) // 100,
                   int(s.data[0, 0]) % 100, int(s.data[0, -1]) % 100)
                  for s in y.addressable_shards)
  return {"rows": None if rows is None else [rows.start, rows.stop],
          "equal": all(np.array_equal(np.asarray(s.data), x[s.index])
                       for s in y.addressable_shards),
          "shards": shards, "devices": jax.device_count(),
          "processes": jax.process_count()}


def _kill_at(batch: int, sig, slow_s: float = 0.0) -> None:
  """Makes process 1 send itself `sig` as its task makes train batch `batch`, and
  then take `slow_s` seconds more over each later batch (the whole job waits for it):
  the notice of a SIGTERM reaches the others within about a second, and the run must
  not end first on a fast machine."""
  import jax
  from data import pipeline
  create = pipeline.create

  def create_with_fault(config):
    task = create(config)
    make = task.train_batch

    def train_batch(s):
      if s == batch and jax.process_index() == 1:
        print(f"process 1 sends itself {sig.name} at batch {s}", flush=True)
        os.kill(os.getpid(), sig)
        time.sleep(0.2)          # SIGKILL: never returns
      elif s > batch and jax.process_index() == 1:
        time.sleep(slow_s)
      return make(s)
    task.train_batch = train_batch
    return task
  pipeline.create = create_with_fault


def _note_reads(log: list) -> None:
  """Makes each task this process creates append to `log` what its train and eval
  batches read: {"rows": the task's rows of the global batch ([start, stop]; None:
  all, as one process reads), "batch_rows": the rows of each batch it returned,
  "eval_rows", "eval_batch_rows": the same of its eval batches (Task.eval_rows)}."""
  from data import pipeline
  create = pipeline.create
  span = lambda r: None if r is None else [r.start, r.stop]

  def create_noting(config):
    task = create(config)
    make, make_eval = task.train_batch, task.eval_batches
    read = {"rows": None, "batch_rows": [], "eval_rows": None, "eval_batch_rows": []}
    log.append(read)

    def train_batch(s):
      b = make(s)
      read["rows"] = span(task.rows)
      read["batch_rows"].append(len(b["y"]))
      return b

    def eval_batches():
      for b in make_eval():
        read["eval_rows"] = span(task.eval_rows)
        read["eval_batch_rows"].append(len(b["y"]))
        yield b
    task.train_batch, task.eval_batches = train_batch, eval_batches
    return task
  pipeline.create = create_noting


def job_train(root: str, meshes: str = ",".join(MESHES)) -> dict:
  """The placement check on every mesh of MESHES, then training on `meshes` (names of
  MESHES, comma-separated), noting what each run's task read, then (2 processes) the
  lock and the kill."""
  import jax
  import trainer
  from trainer.config import TrainError
  t0 = time.perf_counter()
  mine = {"placement": {m: placement(tiny(m)) for m in MESHES}, "phase_s": {},
          "read": {}}
  mine["phase_s"]["placement"] = round(time.perf_counter() - t0, 1)
  reads = []
  _note_reads(reads)
  for m in meshes.split(","):
    t = time.perf_counter()
    trainer.train_and_evaluate(tiny(m, checkpoint_every=STEPS), os.path.join(root, m))
    mine["phase_s"][m] = round(time.perf_counter() - t, 1)
    mine["read"][m] = reads[-1]
  if jax.process_count() == 1:
    return mine
  # a workdir whose lock another run holds (the test process): refused everywhere
  try:
    trainer.train_and_evaluate(tiny(FAULT_MESH), os.path.join(root, "locked"))
    mine["locked"] = None
  except TrainError as e:
    mine["locked"] = str(e)
  print("RESULT " + json.dumps({**mine, "process": jax.process_index()}), flush=True)
  _kill_at(KILL_AT, signal.SIGKILL)
  trainer.train_and_evaluate(tiny(FAULT_MESH), os.path.join(root, "killed"))
  return {"unexpected": "process 1 was not killed"}


def job_resume(root: str, ref: str) -> dict:
  import jax
  import numpy as np
  import trainer
  from trainer import checkpoint as ckpt
  from trainer import parallel
  mine = {"resumed": trainer.train_and_evaluate(tiny(FAULT_MESH),
                                                os.path.join(root, "killed"))}
  _, model, step = trainer.load_model(os.path.join(ref, "fsdp"),
                                      mesh=parallel.make_mesh(tiny("fsdp").mesh))
  reference = dict(np.load(os.path.join(root, "ref_fsdp_final.npz")))
  mine["ref_fsdp_restored_diff"] = shard_diff(model, reference)
  mine["ref_fsdp_restored_spec"] = str(model.decoder.blocks[0].ffn.fc1.kernel[...]
                                       .sharding.spec)
  mine["ref_step"] = step
  # SIGTERM to process 1 alone, as it makes batch SIGTERM_AT
  _kill_at(SIGTERM_AT, signal.SIGTERM, slow_s=0.05)
  got = trainer.train_and_evaluate(
      tiny(FAULT_MESH, num_train_steps=SIGTERM_STEPS, checkpoint_every=SIGTERM_STEPS,
           eval_every=SIGTERM_STEPS), os.path.join(root, "sigterm"))
  mine["stopped_at_step"] = got.get("stopped_at_step")
  mngr = ckpt.checkpoint_manager(os.path.join(root, "sigterm"), tiny(FAULT_MESH))
  mine["sigterm_checkpoints"] = sorted(mngr.all_steps())
  mngr.close()
  return mine


# ---- the launches and their figures (run from the test, or by `record`) --------------

def launch(processes: int, devices: int, args: list[str], timeout: float,
           grace_s: float = 5.0, env: dict | None = None, log: str | None = None) -> dict:
  """Runs `python -m trainer.launch ... multiprocess_job.py ARGS` as a test does: its
  own process group, killed whole if it outlives `timeout` seconds (AssertionError).

  Args:
    processes, devices: the launcher's --processes and --devices_per_process.
    args: this file's JOB and its arguments.
    timeout: seconds before the group is killed.
    grace_s: the launcher's --grace_s.
    env: the environment (default: this process's).
    log: the launcher's --log (default: its own, in the temp directory).
  Returns {"status", "out" (the launcher's lines), "results" ({process: RESULT}),
  "wall_s", "cpu_s" (user + system of its processes, as the launcher says)}.
  Launches may run at once, each from its own thread.
  """
  import subprocess
  cmd = [sys.executable, "-m", "trainer.launch", f"--processes={processes}",
         f"--devices_per_process={devices}", f"--grace_s={grace_s:g}",
         f"--timeout_s={max(timeout - 10, 1):g}", *([f"--log={log}"] if log else []),
         os.path.abspath(__file__), *args]
  t = time.perf_counter()
  p = subprocess.Popen(cmd, cwd=ROOT_DIR, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, start_new_session=True)
  try:
    out, _ = p.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    out, _ = p.communicate(timeout=30)
    raise AssertionError(f"{' '.join(cmd[2:])} ran past {timeout} s; killed:\n"
                         f"{out[-4000:]}") from None
  wall = time.perf_counter() - t
  import re
  cpu = re.search(r"^\[launch\] exit status -?\d+: [\d.]+ s wall, ([\d.]+) s CPU", out,
                  re.M)
  results = {}
  for line in out.splitlines():
    head, _, rest = line.partition(" ")
    if rest.startswith("RESULT "):
      r = json.loads(rest[len("RESULT "):])
      results[r["process"]] = r
  return {"status": p.returncode, "out": out, "results": results, "wall_s": wall,
          "cpu_s": float(cpu.group(1)) if cpu else None}


def losses(workdir: str) -> dict:
  """{step: train_loss} of a workdir's metrics.jsonl."""
  recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  return {r["step"]: r["train_loss"] for r in recs if "train_loss" in r}


def eval_metrics(workdir: str) -> dict:
  """{"step key": value} of every evaluation in a workdir's metrics.jsonl (eval_loss,
  eval_sequences, the task metric)."""
  recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  return {f"{r['step']} {k}": v for r in recs if "eval_loss" in r
          for k, v in r.items() if k != "step"}


def final_state(workdir: str) -> dict:
  """{path: numpy array} of the newest checkpoint of a workdir, restored in this
  process onto its default device (trainer.load_model)."""
  import jax
  import numpy as np
  from flax import nnx
  import trainer
  _, model, _ = trainer.load_model(workdir)
  leaves = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model)))[0]
  out = {}
  for p, x in leaves:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    out[jax.tree_util.keystr(p)] = np.asarray(x)
  return out


def max_diff(a: dict, b: dict) -> float:
  """max |a - b| over the keys of two {key: number or array} (float64); inf when the
  keys differ or there are none."""
  import numpy as np
  if set(a) != set(b) or not a:
    return float("inf")
  return max(float(np.max(np.abs(np.asarray(a[k], np.float64)
                                 - np.asarray(b[k], np.float64)))) for k in a)


def measure(root: str, hold_lock=None, meshes=tuple(MESHES)) -> dict:
  """The three launches under `root` (ref: 1 process x 4 devices; mp: 2 x 2, then
  the kill; resume) and what the test asserts: {"launches": {name: launch()},
  "diffs": {...}, ...}. `hold_lock(workdir)`: a context manager holding a workdir's
  lock during the second launch (default: trainer.checkpoint.WorkdirLock). meshes:
  the names of MESHES trained on and compared (FAULT_MESH among them: the resumed
  kill is compared with its uninterrupted run)."""
  assert FAULT_MESH in meshes and set(meshes) <= set(MESHES), meshes
  names = ",".join(meshes)
  from trainer.checkpoint import WorkdirLock
  hold_lock = hold_lock or WorkdirLock
  env = dict(os.environ)
  # tests/conftest.py's compile flags (the test process has them already): LLVM's
  # costly passes off, the same programs
  env.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 "
                 "--xla_llvm_disable_expensive_passes=true")
  env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(root, "jit_cache"))
  env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
  ref, mp = os.path.join(root, "ref"), os.path.join(root, "mp")
  # the reference beside the 2-process launch (they share nothing; processes that
  # wait in collectives leave the cores to the other)
  import threading
  runs = {}
  t = threading.Thread(target=lambda: runs.update(ref=launch(1, 4, ["train", ref, names],
                                                             LAUNCH_S, env=env,
                                                             log=f"{ref}_launch.log")))
  t.start()
  with hold_lock(os.path.join(mp, "locked")):
    # the kill at the end: process 0 must end by itself, within the heartbeat timeout,
    # before the launcher's grace ends it
    runs["mp"] = launch(2, 2, ["train", mp, names], LAUNCH_S, grace_s=HEARTBEAT_S + 25,
                        env=env, log=f"{mp}_launch.log")
  t.join(timeout=LAUNCH_S + 20)
  if "ref" not in runs or runs["ref"]["status"] != 0:
    raise AssertionError("the reference launch failed:\n"
                         f"{runs.get('ref', {}).get('out', 'no output')[-5000:]}")
  import numpy as np
  from trainer import checkpoint as ckpt
  m = ckpt.checkpoint_manager(os.path.join(mp, "killed"), tiny(FAULT_MESH))
  killed_steps = sorted(m.all_steps())
  m.close()
  if runs["mp"]["status"] != 137 or len(runs["mp"]["results"]) != 2:
    raise AssertionError("the 2-process launch did not run to its kill:\n"
                         f"{runs['mp']['out'][-5000:]}")
  # each workdir's final state restored once (a model built and restored per call)
  states = {}
  state = lambda wd: states[wd] if wd in states else states.setdefault(wd, final_state(wd))
  np.savez(os.path.join(mp, "ref_fsdp_final.npz"), **state(os.path.join(ref, "fsdp")))
  runs["resume"] = launch(2, 2, ["resume", mp, ref], LAUNCH_S, env=env,
                          log=f"{mp}_resume_launch.log")
  if runs["resume"]["status"] != 0:
    raise AssertionError(f"the resume launch failed:\n{runs['resume']['out'][-5000:]}")
  out = {"launches": runs, "killed_checkpoints": killed_steps, "diffs": {}}
  for name in meshes:
    a, b = losses(os.path.join(ref, name)), losses(os.path.join(mp, name))
    out["diffs"][name] = {"steps": sorted(b), "loss": max_diff(a, b),
                          "params": max_diff(state(os.path.join(ref, name)),
                                             state(os.path.join(mp, name))),
                          "eval": max_diff(eval_metrics(os.path.join(ref, name)),
                                           eval_metrics(os.path.join(mp, name)))}
  out["diffs"]["ref_fsdp_restored_on_2_processes"] = max(
      r["ref_fsdp_restored_diff"] for r in runs["resume"]["results"].values())
  a, b = losses(os.path.join(mp, FAULT_MESH)), losses(os.path.join(mp, "killed"))
  out["diffs"]["killed_resumed"] = {
      "steps": sorted(b), "loss": max_diff(a, b),
      "params": max_diff(state(os.path.join(mp, FAULT_MESH)),
                         state(os.path.join(mp, "killed"))),
      "eval": max_diff(eval_metrics(os.path.join(mp, FAULT_MESH)),
                       eval_metrics(os.path.join(mp, "killed")))}
  return out


def _lost_line(out: str) -> str | None:
  """Process 0's coordination-service error naming the process it lost (the ids of
  the lost tasks follow on the next line), as one line; None if absent."""
  lines = [l.split("] ", 1)[-1] for l in out.splitlines() if l.startswith("[0] ")]
  for i, l in enumerate(lines[:-1]):
    if "stopped sending heartbeats" in l:
      return l[l.index("The following"):] + " " + lines[i + 1].strip()
  return None


def record(out_dir: str) -> dict:
  """Runs `measure` in a temporary folder and writes its figures to
  out_dir/results.json and out_dir/README.md (the command: RECORD_COMMAND).

  Args:
    out_dir: the results folder, e.g. results/multiprocess.
  """
  import re
  import tempfile
  import datetime
  import jax
  from trainer.metrics import host_cpu
  with tempfile.TemporaryDirectory(prefix="attnlab_multiprocess_") as root:
    got = measure(root)
  mp, res = got["launches"]["mp"], got["launches"]["resume"]
  kill_line = re.search(r"^\[launch\] process 0 (was killed by \w+|exited with status "
                        r"\d+) ([\d.]+) s later$", mp["out"], re.M)
  stops = {p: r["stopped_at_step"] for p, r in res["results"].items()}
  rec = {
      "command": RECORD_COMMAND,
      "date": datetime.date.today().isoformat(), "jax_version": jax.__version__,
      "host": f"{host_cpu()}, {os.cpu_count()} cores (shared: wall seconds vary)",
      "setup": {"processes": 2, "devices_per_process": 2, "reference": "1 process x 4 "
                "devices", "model": "copy task, 1 layer, d_model 16, dropout 0.1",
                "steps": STEPS, "batch_size": 8, "meshes": MESHES,
                "cpu_collectives": "gloo", "heartbeat_timeout_s": HEARTBEAT_S},
      "max_abs_diff": {k: v for k, v in got["diffs"].items()},
      "faults": {
          "sigterm_to_process_1_at_batch": SIGTERM_AT,
          "stopped_at_step": {str(k): v for k, v in stops.items()},
          "checkpoints_after_sigterm": {str(p): r["sigterm_checkpoints"]
                                        for p, r in res["results"].items()},
          "sigterm_launch_status": res["status"],
          "kill9_process_1_at_batch": KILL_AT,
          "kill9_launch_status": mp["status"],
          "process_0_after_kill": (None if kill_line is None else
                                   {"ended": kill_line.group(1),
                                    "seconds_after": float(kill_line.group(2))}),
          "coordinator_says": _lost_line(mp["out"]),
          "checkpoints_left_by_kill": got["killed_checkpoints"],
          "second_launch_refused": {str(p): r["locked"].replace(root, "<root>")
                                    for p, r in mp["results"].items()}},
      "launches": {k: {"status": v["status"], "wall_s": round(v["wall_s"], 1),
                       "cpu_s": round(v["cpu_s"], 1)} for k, v in got["launches"].items()},
  }
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "results.json"), "w") as f:
    json.dump(rec, f, indent=1)
  write_page(out_dir)
  return rec


def page(rec: dict) -> list[str]:
  """The lines of results/multiprocess/README.md from its results.json (`record`'s
  `rec`): what was run and each check's outcome, as docs/scaling.md describes them."""
  d, f, su = rec["max_abs_diff"], rec["faults"], rec["setup"]
  meshes = lambda m: " x ".join(f"{a} {n}" for a, n in su["meshes"][m].items())
  same = lambda x: (f"losses {x['loss']:g}, final parameters {x['params']:g}"
                    + (f", eval metrics {x['eval']:g}" if "eval" in x else "")
                    + f" (max abs difference over steps {x['steps'][0]}-"
                    f"{x['steps'][-1]})")
  stops = sorted(set(f["stopped_at_step"].values()))
  ckpts = sorted({tuple(c) for c in f["checkpoints_after_sigterm"].values()})
  after = f["process_0_after_kill"]
  rows = [[f"{m} ({meshes(m)}), {su['steps']} steps, against {su['reference']}",
           same(d[m])] for m in su["meshes"] if m in d]
  rows += [
      ["the 1-process FSDP checkpoint restored onto the 2-process FSDP mesh",
       f"each process's shards: {d['ref_fsdp_restored_on_2_processes']:g}"],
      [f"SIGTERM to process 1 alone, at batch {f['sigterm_to_process_1_at_batch']}",
       f"stopped at step {' and '.join(map(str, stops))} (processes "
       f"{', '.join(f'{p}: {s}' for p, s in sorted(f['stopped_at_step'].items()))}), "
       f"checkpoints {' and '.join(str(list(c)) for c in ckpts)}, launcher status "
       f"{f['sigterm_launch_status']}"],
      [f"kill -9 of process 1 at batch {f['kill9_process_1_at_batch']} "
       f"(heartbeat_timeout_s={su['heartbeat_timeout_s']})",
       f"launcher status {f['kill9_launch_status']}; process 0 "
       + ("did not end by itself" if after is None else
          f"{after['ended']} {after['seconds_after']:g} s later")
       + (f", its log: `{f['coordinator_says']}`" if f["coordinator_says"] else "")
       + f"; checkpoints left: {f['checkpoints_left_by_kill']}"],
      ["the killed run rerun (it resumes from its checkpoint)", same(d["killed_resumed"])],
      ["a second job on a workdir in use (its lock held)",
       "; ".join(f"process {p}: {why}" for p, why in sorted(
           f["second_launch_refused"].items()))]]
  what = {"ref": "the reference, 1 process x 4 devices",
          "mp": "2 x 2: training, the workdir in use, the kill",
          "resume": "2 x 2: the rerun, the restore, the SIGTERM"}
  runs = [[f"{name} ({what.get(name, '')})", r["status"], f"{r['wall_s']:g}",
           f"{r['cpu_s']:g}"] for name, r in rec["launches"].items()]
  return [
      "# Multi-process training: 2 processes against 1", "",
      f"Written by `{rec['command']}` on {rec['date']}: {rec['host']}, jax "
      f"{rec['jax_version']}. The page is rewritten from `results.json` by "
      f"`{PAGE_COMMAND}`.", "",
      f"{su['processes']} processes x {su['devices_per_process']} simulated CPU devices "
      f"(`python -m trainer.launch`, joined by jax.distributed, {su['cpu_collectives']} "
      f"collectives) against {su['reference']}: {su['model']}, batch "
      f"{su['batch_size']}. What each check means and how the faults are handled: "
      "[docs/scaling.md](../../docs/scaling.md); `tests/trainer/test_multiprocess.py` "
      "runs the same checks (FSDP only) in `make test`.", ""] + pages_table(
          ["check (2 processes x 2 devices)", "outcome"], rows) + [
      "", "The launches (wall seconds measure the other work of a shared machine too):",
      ""] + pages_table(["launch", "exit status", "wall s", "CPU s"], runs)


def pages_table(head: list, rows: list) -> list[str]:
  from studies.core import pages
  return pages.table(head, rows)


def write_page(out_dir: str) -> None:
  """Rewrites out_dir/README.md from out_dir/results.json."""
  from studies.core import pages
  with open(os.path.join(out_dir, "results.json"), encoding="utf-8") as f:
    pages.write_text(os.path.join(out_dir, "README.md"), page(json.load(f)))


RECORD_COMMAND = ("PYTHONPATH=. .venv/bin/python tests/trainer/multiprocess_job.py "
                  "record results/multiprocess")
PAGE_COMMAND = "python -m tests.trainer.multiprocess_job page results/multiprocess"


if __name__ == "__main__":
  job, args = sys.argv[1], sys.argv[2:]
  if job == "record":
    print(json.dumps(record(*args)["max_abs_diff"], indent=1))
    sys.exit(0)
  if job == "page":              # the page from the committed JSON (make pages)
    write_page(*args)
    sys.exit(0)
  import jax
  from trainer import parallel
  parallel.initialize(tiny(FAULT_MESH))      # the job of the launcher's environment
  os.makedirs(args[0], exist_ok=True)
  mine = {"train": job_train, "resume": job_resume}[job](*args)
  mine["process"] = jax.process_index()
  print("RESULT " + json.dumps(mine), flush=True)
