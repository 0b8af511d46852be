"""Starts a multi-process job on this machine: N processes of simulated CPU devices,
joined by `jax.distributed` over the loopback interface, as a test bed for training on
several hosts.

  python -m trainer.launch --processes=2 [--devices_per_process=2] \\
      train.py --config=configs/copy.py --workdir=workdirs/copy_2proc --config.mesh.fsdp=2

Each process runs `python SCRIPT ARGS...` with ATTNLAB_COORDINATOR_ADDRESS (a free
port of 127.0.0.1), ATTNLAB_NUM_PROCESSES, ATTNLAB_PROCESS_ID (trainer/parallel.py
reads them), JAX_PLATFORMS=cpu and XLA_FLAGS with
--xla_force_host_platform_device_count. Their output (stdout and stderr together) is
streamed line by line, each line prefixed by the process id ("[1] step 4: ..."), and
written whole to the log (--log; default a file in the temp directory, named on the
launcher's first line). Gloo's connection lines ("[Gloo] Rank 0 is connected to 1
peer ranks...", printed by its C++ side as the processes join, a dozen per job) go to
the log only, unless --verbose: one line at the end counts them.

Exit status: 0 when every process exits 0; else the first non-zero status (a process
killed by signal S counts as 128 + S), after one line naming that process and the
others are ended (SIGTERM, then SIGKILL after --grace_s). SIGTERM or SIGINT (Ctrl-C)
to the launcher is passed on as SIGTERM to every process: the job agrees on a step,
saves one checkpoint there and exits 0 (trainer/loop.py); a second one kills them.
--timeout_s bounds the whole job (exit status 124).

On a cluster there is no launcher: the scheduler starts one process per host with
the same three variables, or --config.distributed.* (docs/scaling.md).
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A process's line that only the log gets unless --verbose: gloo's TCP transport logs
# each peer connection (gloo/transport/tcp/debug_logger.cc).
QUIET = re.compile(r"\[Gloo\] ")


def default_log() -> str:
  """A new file name in the temp directory for a launch's log."""
  return os.path.join(tempfile.gettempdir(),
                      f"attnlab-launch-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port of `host` that nothing listens on now (the kernel's choice)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def process_env(process_id: int, processes: int, address: str, devices: int,
                base: dict | None = None) -> dict:
  """The environment of one process of the job.

  Args:
    process_id: this process, 0..processes-1.
    processes: how many processes the job has.
    address: the coordinator's host:port (process 0 serves it).
    devices: simulated CPU devices of this process (XLA_FLAGS'
      --xla_force_host_platform_device_count, which replaces any count given there).
    base: the environment to start from (default: this process's).
  """
  env = dict(os.environ if base is None else base)
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_force_host_platform_device_count")]
  env.update({"ATTNLAB_COORDINATOR_ADDRESS": address,
              "ATTNLAB_NUM_PROCESSES": str(processes),
              "ATTNLAB_PROCESS_ID": str(process_id),
              "JAX_PLATFORMS": "cpu",
              "XLA_FLAGS": " ".join(flags + [
                  f"--xla_force_host_platform_device_count={devices}"]),
              "PYTHONUNBUFFERED": "1",
              "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))})
  return env


def _die_with_parent():
  """In the child before exec: SIGKILL when the launcher dies (Linux prctl), so that a
  killed launcher leaves no process waiting on its peers."""
  try:
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


def _status(rc: int) -> tuple[int, str]:
  """(exit status, words) of a Popen returncode (negative: killed by a signal)."""
  if rc < 0:
    name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
    return 128 - rc, f"was killed by {name}"
  return rc, f"exited with status {rc}"


class Job:
  """The processes of one launch.

  Args:
    command: argv after `python` (a script and its arguments).
    processes: how many processes.
    devices_per_process: simulated CPU devices of each.
    port: the coordinator's port on 127.0.0.1 (0: a free one).
    grace_s: seconds between SIGTERM and SIGKILL when ending the others.
    out: where the prefixed lines go (default sys.stdout).
    log: the file that gets every line, the launcher's and the processes' (default
      `default_log()`).
    verbose: also print the lines that only the log gets otherwise (`QUIET`).
  """

  def __init__(self, command: list[str], processes: int, devices_per_process: int = 2,
               port: int = 0, grace_s: float = 5.0, out=None, log: str | None = None,
               verbose: bool = False):
    self.command, self.n, self.devices = list(command), processes, devices_per_process
    self.address = f"127.0.0.1:{port or free_port()}"
    self.grace_s, self.out = grace_s, out or sys.stdout
    self.log_path, self.verbose, self.quieted = log or default_log(), verbose, 0
    self.log = None
    self.procs: list[subprocess.Popen] = []
    self.threads: list[threading.Thread] = []
    self.lock = threading.Lock()
    self.signals = 0

  def _write(self, line: str, terminal: bool = True) -> None:
    """One whole line to the log, and to `out` unless terminal is False."""
    with self.lock:
      if self.log is not None:
        self.log.write(line)
        self.log.flush()
      if terminal:
        self.out.write(line)
        self.out.flush()
      else:
        self.quieted += 1

  def say(self, line: str) -> None:
    """One line of the launcher's own, prefixed [launch]."""
    self._write(f"[launch] {line}\n")

  def _pump(self, i: int, stream) -> None:
    for line in iter(stream.readline, ""):
      self._write(f"[{i}] {line if line.endswith(chr(10)) else line + chr(10)}",
                  terminal=self.verbose or not QUIET.match(line))
    stream.close()

  def start(self) -> None:
    """Starts every process, each streamed through a thread."""
    self.t0 = time.monotonic()
    self.log = open(self.log_path, "a", encoding="utf-8")
    for i in range(self.n):       # all started before any thread (preexec_fn)
      self.procs.append(subprocess.Popen(
          [sys.executable, *self.command], cwd=os.getcwd(),
          env=process_env(i, self.n, self.address, self.devices),
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
          preexec_fn=_die_with_parent))
    for i, p in enumerate(self.procs):
      t = threading.Thread(target=self._pump, args=(i, p.stdout), daemon=True)
      t.start()
      self.threads.append(t)
    self.say(f"{self.n} processes x {self.devices} CPU devices, coordinator "
             f"{self.address}, pids " + " ".join(f"{i}:{p.pid}"
                                                for i, p in enumerate(self.procs))
             + f"; log {self.log_path}")

  def signal_all(self, signum: int) -> None:
    """Sends `signum` to every process still running."""
    for p in self.procs:
      if p.poll() is None:
        try:
          p.send_signal(signum)
        except ProcessLookupError:
          pass

  def on_signal(self, signum, frame) -> None:
    """SIGTERM/SIGINT to the launcher: the first is passed on as SIGTERM (the job
    saves and stops together), a second kills every process."""
    self.signals += 1
    if self.signals == 1:
      self.say(f"{signal.Signals(signum).name}: passing SIGTERM to every process")
      self.signal_all(signal.SIGTERM)
    else:
      self.say(f"{signal.Signals(signum).name} again: killing every process")
      self.signal_all(signal.SIGKILL)

  def end_others(self) -> None:
    """SIGTERM to the processes still running, SIGKILL to those left after grace_s;
    then one line per process so ended: how it ended and how long it took (a process
    whose peer died also ends by itself, when jax.distributed's heartbeat timeout
    passes: exit status 134)."""
    running = [i for i, p in enumerate(self.procs) if p.poll() is None]
    t0 = time.monotonic()
    self.signal_all(signal.SIGTERM)
    ended = {}
    while time.monotonic() < t0 + self.grace_s and len(ended) < len(running):
      for i in running:
        if i not in ended and self.procs[i].poll() is not None:
          ended[i] = time.monotonic() - t0
      time.sleep(0.05)
    self.signal_all(signal.SIGKILL)
    for i in running:
      self.procs[i].wait(timeout=30)
      if i in ended:
        self.say(f"process {i} {_status(self.procs[i].returncode)[1]} "
                 f"{ended[i]:.1f} s later")
      else:
        self.say(f"process {i} was still running after --grace_s={self.grace_s:g}: "
                 "killed (SIGKILL)")

  def wait(self, timeout_s: float = 0) -> int:
    """Waits for the job; returns its exit status (see the module doc).

    Args:
      timeout_s: > 0: after this many seconds every process is ended and 124 returned.
    """
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    status = 0
    while True:
      codes = [p.poll() for p in self.procs]
      failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
      if failed:
        i, c = failed[0]
        status, how = _status(c)
        running = [j for j, c in enumerate(codes) if c is None]
        self.say(f"process {i} (pid {self.procs[i].pid}) {how}; " + (
            f"ending processes {', '.join(map(str, running))}" if running
            else "no other process is running"))
        self.end_others()
        break
      if all(c == 0 for c in codes):
        break
      if deadline is not None and time.monotonic() > deadline:
        self.say(f"the job ran past --timeout_s={timeout_s:g}; ending every process")
        self.end_others()
        status = 124
        break
      time.sleep(0.05)
    for t in self.threads:
      t.join(timeout=5)
    if self.quieted:
      self.say(f"{self.quieted} lines of gloo's connection log are in the log only "
               "(--verbose prints them)")
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    self.say(f"exit status {status}: {time.monotonic() - self.t0:.1f} s wall, "
             f"{ru.ru_utime + ru.ru_stime:.1f} s CPU of the processes")
    self.log.close()
    self.log = None
    return status


def main(argv=None) -> int:
  """The command line (see the module doc); returns the exit status."""
  ap = argparse.ArgumentParser(
      prog="python -m trainer.launch", description=__doc__.split("\n\n")[0],
      usage="python -m trainer.launch --processes=N [--devices_per_process=D] "
            "SCRIPT [ARGS...]")
  ap.add_argument("--processes", type=int, required=True, help="processes to start")
  ap.add_argument("--devices_per_process", type=int, default=2,
                  help="simulated CPU devices of each process (default 2)")
  ap.add_argument("--port", type=int, default=0,
                  help="the coordinator's port on 127.0.0.1 (default: a free one)")
  ap.add_argument("--grace_s", type=float, default=5.0,
                  help="seconds from SIGTERM to SIGKILL when ending the others")
  ap.add_argument("--timeout_s", type=float, default=0,
                  help="end the whole job after this many seconds (0: no limit)")
  ap.add_argument("--log", default="",
                  help="the file that gets every line of the job (default: a new file "
                       "in the temp directory, named on the first line)")
  ap.add_argument("--verbose", action="store_true",
                  help="also print gloo's connection lines, which otherwise go to the "
                       "log only")
  ap.add_argument("command", nargs=argparse.REMAINDER,
                  help="the script and its arguments, e.g. train.py --config=...")
  a = ap.parse_args(argv)
  if a.processes < 1:
    ap.error(f"--processes must be >= 1, got {a.processes}")
  if a.devices_per_process < 1:
    ap.error(f"--devices_per_process must be >= 1, got {a.devices_per_process}")
  if not a.command:
    ap.error("give the script to run, e.g. train.py --config=... --workdir=...")
  if a.command[0].endswith(".py") and not os.path.exists(a.command[0]):
    ap.error(f"script {a.command[0]} not found (from {os.getcwd()})")
  job = Job(a.command, a.processes, a.devices_per_process, a.port, a.grace_s,
            log=a.log or None, verbose=a.verbose)
  for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, job.on_signal)
  job.start()
  return job.wait(a.timeout_s)


if __name__ == "__main__":
  sys.exit(main())
