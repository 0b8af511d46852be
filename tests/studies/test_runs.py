"""studies.core.runs: the one reader of metrics.jsonl, training time and rate over the
segments of a resumed run, fingerprints and setting stale runs aside."""
import json
import os
import sys
import time

import pytest

from studies.core import runs


def write(tmp_path, recs, checkpoint_every=None):
  (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
  if checkpoint_every:
    (tmp_path / "config.json").write_text(json.dumps(
        {"config": {"checkpoint_every": checkpoint_every}}))
  return str(tmp_path)


def test_train_seconds_adds_the_segments_of_a_resumed_run(tmp_path):
  recs = [{"step": 0, "params": 10},
          {"step": 50, "steps_per_s": 1.0}, {"step": 100, "steps_per_s": 2.0},   # 50 s
          {"step": 60, "resumed_at_step": 60},
          {"step": 80, "steps_per_s": 0.5}, {"step": 100, "steps_per_s": 1.0},   # 40 s
          {"step": 100, "eval_loss": 1.0}]
  wd = write(tmp_path, recs)
  assert runs.read_metrics(wd) == recs
  assert runs.train_seconds(wd) == pytest.approx(90.0)
  rate, evals, params = runs.rates(wd)
  # the eval at step 100 is timed by the resumed segment's record: 50 s + 40 s
  assert params == 10 and evals == [(100, pytest.approx(90.0), recs[-1])]


def test_rates_time_a_resumed_segment_from_its_resumed_step(tmp_path):
  """A resumed process's steps_per_s counts from its resumed step: steps 850 and 1600
  of a run resumed at 800, at 0.5 and 1.0 steps/s, are 100 s and 800 s into the
  segment, so it trained at 750 / 700 steps/s, not 1600/1.0 - 850/0.5 (negative)."""
  recs = [{"step": 0, "params": 10},
          {"step": 800, "steps_per_s": 2.0},                                     # 400 s
          {"step": 800, "eval_loss": 1.0},
          {"step": 800, "resumed_at_step": 800},
          {"step": 850, "steps_per_s": 0.5}, {"step": 1600, "steps_per_s": 1.0},
          {"step": 1600, "eval_loss": 0.5}]
  wd = write(tmp_path, recs)
  rate, evals, _ = runs.rates(wd)
  assert rate == pytest.approx(750 / 700)
  assert [(s, t) for s, t, _ in evals] == [(800, pytest.approx(400.0)),
                                           (1600, pytest.approx(1200.0))]
  assert runs.train_seconds(wd) == pytest.approx(1200.0)


def test_rates_leave_out_the_intervals_that_hold_an_evaluation_or_a_save(tmp_path):
  """Train records at 25..100 (10, 20, 40, 50 s in): the interval after step 50 holds
  its evaluation (10 s), the one after 100 would hold a save (checkpoint_every 100);
  the first holds the compilation. Training alone: 50 steps in 20 s."""
  recs = [{"step": 0, "params": 10},
          {"step": 25, "steps_per_s": 2.5}, {"step": 50, "steps_per_s": 2.5},
          {"step": 50, "eval_loss": 1.0},
          {"step": 75, "steps_per_s": 75 / 40}, {"step": 100, "steps_per_s": 2.0},
          {"step": 100, "eval_loss": 0.9}]
  wd = write(tmp_path, recs, checkpoint_every=100)
  assert runs.busy_steps(wd, recs) == {50, 100}
  rate, evals, _ = runs.rates(wd)
  assert rate == pytest.approx(50 / 20)            # not 75 steps / 40 s
  assert [(s, t) for s, t, _ in evals] == [(50, pytest.approx(20.0)),
                                           (100, pytest.approx(50.0))]
  # a run whose every interval holds an evaluation: the whole span, as before
  write(tmp_path, recs, checkpoint_every=25)
  assert runs.rates(wd)[0] == pytest.approx(75 / 40)


def test_fingerprints_set_aside_and_subprocess(tmp_path):
  assert runs.fingerprint({"a": 1, "b": 2}) == runs.fingerprint({"b": 2, "a": 1})
  assert runs.fingerprint({"a": 1}) != runs.fingerprint({"a": 2})
  wd = tmp_path / "run"
  wd.mkdir()
  assert runs.set_aside(str(wd), "old", "old") is None and wd.exists()
  assert runs.set_aside(str(wd), None, "new") is None
  dest = runs.set_aside(str(wd), "old", "new")
  assert dest == f"{wd}.stale-old" and not wd.exists()
  code, tail, secs = runs.in_subprocess(
      [sys.executable, "-c", "print('one'); print('two'); raise SystemExit(3)"],
      str(tmp_path / "log.txt"))
  assert (code, tail) == (3, "two") and "one" in (tmp_path / "log.txt").read_text()
  show = [sys.executable, "-c", "import os; print(os.environ['GLIBC_TUNABLES'])"]
  assert runs.in_subprocess(show, str(tmp_path / "env.txt"))[1] == \
      runs.child_env()["GLIBC_TUNABLES"]           # a study's children: child_env's
  assert "glibc.malloc.hugetlb=0" in runs.in_subprocess(
      show, str(tmp_path / "env.txt"), huge_pages=False)[1].split(":")
  assert runs.in_subprocess(show, str(tmp_path / "env.txt"), huge_pages=False,
                            keep_heap=False)[1] == "glibc.malloc.hugetlb=0"
  with pytest.raises(SystemExit, match="stopped at step 5 of 10"):
    runs.require_finished(str(wd), 10, step=5)
  assert runs.require_finished(str(wd), 10, step=10) == 10


def test_child_env_sets_huge_pages_keeps_other_tunables_and_a_users_choice():
  # keep_heap=False: the huge-pages setting alone (the heap's tunables: the next test)
  env = lambda tun, hp=None: runs.child_env(hp, {"X": "1", **(
      {"GLIBC_TUNABLES": tun} if tun is not None else {})}, keep_heap=False)
  got = env(None)
  assert got["X"] == "1" and got["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
  assert env("a.b=2")["GLIBC_TUNABLES"] == "a.b=2:glibc.malloc.hugetlb=1"
  assert env("glibc.malloc.hugetlb=0")["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"
  assert env("a=1:glibc.malloc.hugetlb=0", True)["GLIBC_TUNABLES"] == \
      "a=1:glibc.malloc.hugetlb=1"                  # forced, for an A/B
  assert env("glibc.malloc.hugetlb=1", False)["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"


def test_child_env_keeps_the_heap_unless_told_or_a_user_set_a_tunable():
  tun = lambda env: dict(x.split("=") for x in env["GLIBC_TUNABLES"].split(":"))
  got = tun(runs.child_env(environ={}))
  assert got == {"glibc.malloc.hugetlb": "1", **runs.KEEP_HEAP}
  assert got["glibc.malloc.arena_max"] == "1" and got["glibc.malloc.mmap_max"] == "0"
  user = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}      # a user's choice stands
  assert tun(runs.child_env(environ=user))["glibc.malloc.arena_max"] == "4"
  assert tun(runs.child_env(environ=user, keep_heap=True))["glibc.malloc.arena_max"] == "1"
  assert tun(runs.child_env(environ={"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:a=1"},
                            keep_heap=False)) == {"a": "1", "glibc.malloc.hugetlb": "1"}


def test_child_env_shares_a_compilation_cache_unless_a_user_names_one():
  env = runs.child_env(environ={})
  assert env["JAX_COMPILATION_CACHE_DIR"] == os.path.abspath(runs.COMPILE_CACHE)
  assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
  mine = runs.child_env(environ={"JAX_COMPILATION_CACHE_DIR": "/elsewhere"})
  assert mine["JAX_COMPILATION_CACHE_DIR"] == "/elsewhere"
  off = runs.child_env(environ={"JAX_COMPILATION_CACHE_DIR": ""})      # "" = off
  assert off["JAX_COMPILATION_CACHE_DIR"] == "" and not any(
      k.startswith("JAX_PERSISTENT_CACHE") for k in off)


def test_stop_children_ends_a_streaming_child(tmp_path):
  """A child run from a worker thread streams its lines to the log as they come, and
  stop_children (what a study's main thread calls on Ctrl-C) ends it."""
  import threading
  log = tmp_path / "log.txt"
  out = {}
  code = "import time; print('up', flush=True); time.sleep(60)"
  th = threading.Thread(target=lambda: out.update(r=runs.in_subprocess(
      [sys.executable, "-c", code], str(log))))
  th.start()
  t0 = time.time()
  while "up" not in (log.read_text() if log.exists() else "") and time.time() - t0 < 30:
    time.sleep(0.05)
  assert "up" in log.read_text()                  # streamed before the child ended
  assert runs.stop_children() == 1
  th.join(30)
  assert not th.is_alive() and out["r"][0] != 0 and out["r"][1] == "up"
  assert runs.stop_children() == 0


def test_a_stop_file_ends_a_study_before_its_next_run(tmp_path, monkeypatch):
  """`touch workdirs/STOP` (ATTNLAB_STOP_FILE here): in_subprocess starts nothing and
  raises StopRequested (a SystemExit, status 3) while the file exists; a run in flight
  is not touched; removing the file lets the same call go on."""
  stop = tmp_path / "STOP"
  monkeypatch.setenv("ATTNLAB_STOP_FILE", str(stop))
  started = tmp_path / "started"
  cmd = [sys.executable, "-c", f"open({str(started)!r}, 'w').write('x')"]
  assert runs.in_subprocess(cmd, str(tmp_path / "log.txt"))[0] == 0 and started.exists()
  started.unlink()
  stop.touch()
  with pytest.raises(runs.StopRequested, match="STOP exists: stopped before the next run") as e:
    runs.in_subprocess(cmd, str(tmp_path / "log.txt"))
  assert e.value.code == 3 and isinstance(e.value, SystemExit) and not started.exists()
  stop.unlink()
  runs.check_stop()                                 # gone: nothing raised
  monkeypatch.setenv("ATTNLAB_STOP_FILE", "")
  stop.touch()
  runs.check_stop()                                 # "": no stop file
