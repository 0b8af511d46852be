"""studies.core.sweep, the one runner of the studies' sweeps (compare_variants, mqar): a
run's identity (fingerprints, NEUTRAL fields), the ledgers, the child processes and
the learning-rate rule every sweep shares."""
import json
import os

import pytest

from studies.core import runs, sweep
from studies.variants import compare as cv


def test_a_new_field_at_its_neutral_value_keeps_finished_runs(tmp_path):
  """A config field added after a run (at the value that reproduces the old code) does
  not make the run stale; the field at another value does; a run recorded with the
  neutral field in its hash (before NEUTRAL named it) still counts."""
  import ml_collections
  c = cv.make_config("copy", "cpu", "softmax")
  key = next(iter(sweep.NEUTRAL))
  old = ml_collections.ConfigDict(c.to_dict())
  old.unlock()
  if key in old:
    del old[key]
  c.unlock()
  c[key] = sweep.NEUTRAL[key]
  assert sweep.config_fingerprint(old) == sweep.config_fingerprint(c)
  full = runs.fingerprint(sweep.config_dict(c))
  assert sweep.fingerprints(c) == {sweep.config_fingerprint(c), full}
  wd = tmp_path / "softmax"
  wd.mkdir()
  (wd / "result.json").write_text(json.dumps({"status": "ok", "config": full}))
  assert sweep.finished(str(wd), c) is not None and sweep.set_aside(str(wd), c) is None
  changed = ml_collections.ConfigDict(c.to_dict())
  changed[key] = 7
  assert sweep.config_fingerprint(changed) not in sweep.fingerprints(c)
  assert sweep.finished(str(wd), changed) is None
  # another config: set aside under the fingerprint it was trained with, kept
  moved = sweep.set_aside(str(wd), changed)
  assert moved == f"{wd}.stale-{full}" and os.path.exists(os.path.join(moved, "result.json"))


def test_train_run_keeps_a_finished_run_and_records_its_cpu_time(tmp_path, monkeypatch):
  """train_run: a finished run is returned as it is (never trained again); else it
  trains, measures, and writes result.json with the fingerprint, CPU seconds, date."""
  import trainer
  c = cv.make_config("copy", "cpu", "softmax")
  trained = []
  monkeypatch.setattr(trainer, "train_and_evaluate", lambda config, wd: trained.append(wd))
  wd = str(tmp_path / "run")
  res = sweep.train_run(c, wd, lambda config, w: {"status": "ok", "quality": 0.5})
  assert trained == [wd] and res["config"] == sweep.config_fingerprint(c)
  assert res["cpu_seconds"] >= 0 and res["date"] and sweep.finished(wd, c) == res
  again = sweep.train_run(c, wd, lambda config, w: pytest.fail("measured again"))
  assert again == res and trained == [wd]
  # a run a signal stopped before its last step: neither measured nor reported finished
  # (its checkpoint resumes it); stopped at its last step: finished
  n = int(c.num_train_steps)
  monkeypatch.setattr(trainer, "train_and_evaluate",
                      lambda config, wd: {"stopped_at_step": n - 1})
  cut = str(tmp_path / "cut")
  with pytest.raises(SystemExit, match=f"stopped at step {n - 1} of {n}"):
    sweep.train_run(c, cut, lambda config, w: pytest.fail("measured a partial run"))
  assert sweep.finished(cut, c) is None
  monkeypatch.setattr(trainer, "train_and_evaluate", lambda config, wd: {"stopped_at_step": n})
  assert sweep.train_run(c, cut, lambda config, w: {"status": "ok"})["status"] == "ok"


def test_a_killed_call_still_counts_its_wall_time(tmp_path):
  """The ledger gets a line every `every` seconds, so a call killed outright (no
  `finally`) counts up to its last line; each invocation counts once, at its largest."""
  import time
  clock = sweep.WallClock(str(tmp_path), jobs=2, every=0.02)
  time.sleep(0.15)
  clock.done.set()           # killed: the beats stop, no closing line
  clock.thread.join()
  elapsed = time.time() - clock.t0
  lines = [json.loads(l) for l in open(tmp_path / "wall_ledger.jsonl")]
  assert len(lines) >= 3 and len({l["invocation"] for l in lines}) == 1
  # its largest line, not their sum; bounded by the time measured here, not a fixed
  # 0.15 s: under 15 pytest workers on the H200 (2026-11-28) the last beat came at 0.157 s
  assert sweep.wall_seconds(lines) == max(l["wall_seconds"] for l in lines)
  assert 0.05 < sweep.wall_seconds(lines) <= elapsed
  done = sweep.WallClock(str(tmp_path), jobs=2, every=60)
  time.sleep(0.05)
  done.stop()               # a clean end: one closing line
  old = [{"wall_seconds": 10.0, "jobs": 1}]  # a line of the old ledger, no invocation id
  both = [json.loads(l) for l in open(tmp_path / "wall_ledger.jsonl")]
  assert sweep.wall_seconds(both + old) == pytest.approx(
      sweep.wall_seconds(lines) + both[-1]["wall_seconds"] + 10.0)


def test_ledger_totals_sum_the_children_and_the_invocations(tmp_path):
  sweep.record_cpu(str(tmp_path), "softmax", 10.0)
  sweep.record_cpu(str(tmp_path), "linear", 5.0)
  with open(tmp_path / sweep.WALL_LEDGER, "w") as f:
    for line in ({"invocation": "a", "wall_seconds": 3.0, "jobs": 1},
                 {"invocation": "a", "wall_seconds": 7.0, "jobs": 1},
                 {"invocation": "b", "wall_seconds": 2.0, "jobs": 2}):
      f.write(json.dumps(line) + "\n")
  assert sweep.ledger_totals(str(tmp_path)) == {"cpu_seconds": 15.0, "wall_seconds": 9.0,
                                                "invocations": 2, "jobs": 2}
  assert sweep.ledger_totals(str(tmp_path / "none")) == {
      "cpu_seconds": 0, "wall_seconds": 0, "invocations": 0, "jobs": 1}


def test_a_child_records_its_cpu_time_even_when_its_work_fails(tmp_path):
  job = json.dumps({"root": str(tmp_path), "variant": "softmax"})
  assert sweep.child(job, lambda j: j["variant"] * 2,
                     ledger=lambda j: (j["root"], j["variant"])) == "softmaxsoftmax"

  def boom(j):
    raise RuntimeError("boom")

  with pytest.raises(RuntimeError):
    sweep.child(job, boom, ledger=lambda j: (j["root"], j["variant"]))
  lines = [json.loads(l) for l in open(tmp_path / sweep.CPU_LEDGER)]
  assert [l["variant"] for l in lines] == ["softmax", "softmax"]
  assert all(l["cpu_seconds"] > 0 for l in lines)


def test_execute_runs_one_child_per_name_each_on_a_core_of_its_own(tmp_path, monkeypatch):
  seen = []
  monkeypatch.setattr(sweep, "spawn", lambda module, job, log_path: seen.append(
      (module, job, log_path)) or (0, "done", 0.0))
  sweep.execute(["a", "b", "c"], lambda n, core: {"variant": n, "core": core},
                "studies.x", lambda n: str(tmp_path / n / "log.txt"), jobs=1,
                log=lambda s: None)
  assert [j["variant"] for _, j, _ in seen] == ["a", "b", "c"]
  assert {j["core"] for _, j, _ in seen} == {None}         # one at a time: not pinned
  assert seen[0][0] == "studies.x" and seen[0][2].endswith("a/log.txt")
  if len(os.sched_getaffinity(0)) > 1:
    seen.clear()
    sweep.execute(["a", "b"], lambda n, core: {"variant": n, "core": core}, "studies.x",
                  lambda n: str(tmp_path / n / "log.txt"), jobs=2, log=lambda s: None)
    assert all(j["core"] in os.sched_getaffinity(0) for _, j, _ in seen)


def test_execute_starts_no_child_once_the_stop_file_exists(tmp_path, monkeypatch):
  """A study hands execute every run due at once (a free core takes the next): `touch
  workdirs/STOP` must still stop it at the next child, the running one finishing."""
  stop = tmp_path / "STOP"
  monkeypatch.setenv("ATTNLAB_STOP_FILE", str(stop))
  seen = []

  def spawn(module, job, log_path):
    seen.append(job["variant"])
    stop.touch()                  # asked to stop while the first child runs
    return 0, "done", 0.0
  monkeypatch.setattr(sweep, "spawn", spawn)
  sweep.execute(["a", "b", "c"], lambda n, core: {"variant": n}, "studies.x",
                lambda n: str(tmp_path / n / "log.txt"), jobs=1, log=lambda s: None)
  assert seen == ["a"]


def test_execute_starts_a_later_part_on_a_free_core_once_its_own_first_part_ended(
    tmp_path, monkeypatch):
  """Two cores, a's first part short and b's long: a's later part starts while b's
  first part still runs (no barrier after every first part), b's later part only
  after b's first; 'b' waits for 'a:rest' to start, so a barrier fails the test."""
  import threading
  started, order = {n: threading.Event() for n in ("a", "b", "a:rest", "b:rest")}, []

  def spawn(module, job, log_path):
    n = job["name"]
    order.append(("start", n))
    started[n].set()
    if n == "b":
      assert started["a:rest"].wait(10), "a's later part waited for b's first part"
    if n == "b:rest":
      assert ("end", "b") in order
    order.append(("end", n))
    return 0, "done", 0.0
  monkeypatch.setattr(sweep, "spawn", spawn)
  sweep.execute(["a", "b", "a:rest", "b:rest"], lambda n, core: {"name": n}, "studies.x",
                lambda n: str(tmp_path / "log.txt"), jobs=2, log=lambda s: None,
                after={"a:rest": "a", "b:rest": "b"})
  assert order.index(("end", "a")) < order.index(("start", "a:rest"))
  assert order.index(("end", "b")) < order.index(("start", "b:rest"))
  assert len(order) == 8


def test_the_ladder_of_every_task_preset_is_its_rate_times_powers_of_3():
  """One ladder formula for every sweep (the grid's ends stepped by their own ratio)
  gives each task preset's rate x 0.3^k and x 3^k (k <= LR_EXTEND + 1), the rates
  compare_variants' committed lr.json rows were trained at."""
  for task in cv.TASKS:
    for preset in cv.presets(task):
      b = cv.base_lr(task, preset)
      want = sorted({b} | {float(f"{b * f ** k:.3g}") for f in (0.3, 3.0)
                           for k in range(1, cv.LR_EXTEND + 2)})
      assert cv.lr_rule(task, preset).ladder == want, (task, preset)
  assert sweep.lr_ladder([3e-4, 1e-3, 3e-3], 2) == [2.7e-05, 9e-05, 3e-4, 1e-3, 3e-3,
                                                     9e-3, 0.027]
  assert sweep.lr_ladder([1e-3, 3e-3], 0) == [1e-3, 3e-3]


def test_the_rule_trains_the_grid_then_past_a_winning_end_and_picks_the_smallest_tie():
  grid = (1e-3, 3e-3, 1e-2)
  rule = sweep.LrRule(grid, extend=2, tie=0.01)
  lad = rule.ladder
  assert rule.next({1e-3: 0.5}) == 3e-3 and rule.choose({1e-3: 0.5}) is None  # grid first
  assert rule.next(dict(zip(grid, (0.3, 0.7, 0.99)))) == lad[lad.index(1e-2) + 1]
  assert rule.next(dict(zip(grid, (0.9, 0.5, 0.3)))) == lad[lad.index(1e-3) - 1]
  assert rule.rates(dict(zip(grid, (0.9, 0.5, 0.3))))[0] == lad[lad.index(1e-3) - 1]
  assert rule.next(dict(zip(grid, (1.0, 1.0, 1.0)))) is None          # a tie settles it
  assert rule.choose(dict(zip(grid, (1.0, 1.0, 1.0)))) == 1e-3        # the smallest
  assert rule.choose(dict(zip(grid, (0.3, 0.995, 1.0)))) == 3e-3      # within the tie
  assert rule.next(dict(zip(lad, [0.1] * 6 + [0.9]))) is None          # the ladder's end
  assert rule.choose(dict(zip(lad, [0.1] * 6 + [0.9]))) == lad[-1]
  low = sweep.LrRule(grid, extend=2, tie=0.005, higher_better=False)  # a loss
  assert low.choose({1e-3: 2.30, 3e-3: 2.20, 1e-2: 2.25}) == 3e-3
  # a failed (None) or diverged rate never wins
  assert runs.choose_lr({1e-3: 0.995, 3e-3: 1.0, 1e-2: None}, 0.01) == 1e-3
  diverged = {1e-3: 0.4, 3e-3: 0.5, 1e-2: float("nan")}
  assert rule.next(diverged) is None and rule.choose(diverged) == 3e-3
  # a best end whose neighbour failed: the rate past it might do better still
  assert rule.next({1e-3: 0.5, 3e-3: None, 1e-2: 0.4}) == lad[lad.index(1e-3) - 1]
