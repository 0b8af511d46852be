"""studies.recall.diagnose: a diagnostic run's record (its command as the flags that
differ from the preset, its evaluations) read back from a workdir, and the block's
reading computed from it."""
import json

from configs import mqar as mqar_cfg
from studies.recall import diagnose as md


def _workdir(tmp_path, accs, **changes):
  c = mqar_cfg.get_config("cpu")
  c.update(changes.pop("top", {}))
  c.mqar.update(changes)
  wd = tmp_path / "run"
  wd.mkdir()
  (wd / "config.json").write_text(json.dumps({"config": json.loads(
      c.to_json_best_effort()), "model": {}}))
  lines = [{"step": 0, "params": 1}] + [
      {"step": s, "eval_loss": 1 - a, "token_accuracy": a} for s, a in accs] + [
      {"step": accs[-1][0] + 50, "train_loss": 0.1}]
  (wd / "metrics.jsonl").write_text("\n".join(json.dumps(l) for l in lines) + "\n")
  return str(wd)


def test_a_run_is_recorded_from_its_workdir_and_read_back_in_one_line(tmp_path):
  wd = _workdir(tmp_path, [(250, 0.02), (500, 0.991), (750, 0.995)], seq_len=512,
                num_pairs=64, train_mix="64:4", top={"batch_size": 8})
  r = md.record(wd)
  assert r["command"] == (
      "python train.py --config=configs/mqar.py:cpu --config.batch_size=8 "
      "--config.mqar.num_pairs=64 --config.mqar.seq_len=512 --config.mqar.train_mix=64:4 "
      f"--workdir={wd}")
  assert (r["tokens"], r["pairs"], r["batch"], r["stopped_at_step"]) == (512, 64, 8, 800)
  assert [e["step"] for e in r["evals"]] == [250, 500, 750]
  assert md.summary(r) == ("softmax w64, 512 tokens / 64 pairs, batch 8, rate 0.001 "
                           "cosine, trained on 64:4 too: 99.5% at step 750; first >= "
                           "99% at step 500")
  out = tmp_path / "diag.json"
  out.write_text(json.dumps({"other": {"kept": True}}))
  block = md.add_block("mix", "a question", [wd], str(out))
  data = json.loads(out.read_text())
  assert data["other"] == {"kept": True} and data["mix"]["reading"] == block["reading"]


def test_a_run_that_never_recalls_says_so(tmp_path):
  r = md.record(_workdir(tmp_path, [(500, 0.02), (1000, 0.03)]))
  assert md.summary(r).endswith("3.0% at step 1000; never >= 99% in 1050 steps")
