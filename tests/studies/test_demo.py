"""studies.repro.demo: the `make demo` page from a workdir's files, kept as demo.json and
rewritten from it alone; the one completion table and verdict; the frontier table
names each row's judge."""
import json
import os

import pytest

from studies.repro import demo

COMP = dict(completion_accuracy=0.552, completion_accuracy_se=0.022, original_accuracy=0.988,
            original_accuracy_se=0.005, blank_accuracy=0.538, blank_accuracy_se=0.022,
            random_bottom_accuracy=0.374, random_bottom_accuracy_se=0.022, n_images=500,
            classifier_test_accuracy=0.988)


def workdir(tmp_path):
  wd = tmp_path / "wd"
  (wd / "eval").mkdir(parents=True)
  recs = [{"step": 0, "params": 118494},
          {"step": 800, "train_loss": 1.53, "steps_per_s": 4.79}]
  (wd / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
  model = dict(attention="linear", num_layers=2, d_model=64, num_heads=4, d_ff=256,
               num_mixtures=10)
  config = dict(image_size=14, num_train_steps=800, batch_size=32, optimizer="adamw",
                learning_rate=0.003, schedule="cosine", log_every=20, num_samples=4)
  (wd / "config.json").write_text(json.dumps({"model": model, "config": config}))
  ev = dict(COMP, bits_per_dim=2.22, eval_sequences=10000, completion_batch=32,
            decode_mode="cache", completion_images_per_s=42.5, sample_images_per_s=31.6,
            backend="cpu", device_kind="cpu", host="AMD EPYC, 2 cores", device_count=1,
            jax_version="0.11.2")
  (wd / "eval" / "eval.json").write_text(json.dumps(ev))
  for f in ("completions.png", "samples.png"):
    (wd / "eval" / f).write_bytes(b"\x89PNG")
  return str(wd)


def test_the_page_comes_from_demo_json_alone(tmp_path):
  wd, out = workdir(tmp_path), str(tmp_path / "page")
  d = demo.record(wd, "configs/mnist_demo.py")
  demo.copy_pictures(wd, out)
  frontier = [dict(COMP, name="lin", steps=400, overrides={"image_size": 14},
                   train_cpu_seconds=188.0, bits_per_dim=2.3, date="2026-11-23",
                   completion_accuracy=0.484),
              dict(COMP, name="lin", steps=800, overrides={"image_size": 14},
                   train_cpu_seconds=341.0, bits_per_dim=2.22, date="2026-11-23",
                   classifier_test_accuracy=0.9887)]
  demo.write_page(d, out, frontier)
  page = open(os.path.join(out, "README.md")).read()
  assert page.startswith("# MNIST demo") and "Written by `make demo` on" in page
  assert "| this run (linear) | 55.2 ± 2.2% | 98.8 ± 0.5% | 53.8 ± 2.2% |" in page
  assert "unresolved" in page and "is not met" in page
  assert "| 98.80% | 2026-11-23 |" in page and "| 98.87% | 2026-11-23 |" in page
  assert "another instance of the classifier" in page       # two judges in the table
  assert "Doubling the training steps added 7 points" in page
  assert "CPU-s per step" in page                # the same model's CPU time
  os.remove(os.path.join(out, "README.md"))
  demo.write_page(json.load(open(os.path.join(out, "demo.json"))), out, frontier)
  assert open(os.path.join(out, "README.md")).read() == page


def test_frontier_runs_parse_and_configure():
  name, steps, over = demo.parse_run("s14:400,800:image_size=14,model.d_model=32,attention=softmax")
  assert (name, steps) == ("s14", [400, 800])
  assert over == {"image_size": 14, "model.d_model": 32, "attention": "softmax"}
  c = demo.make_config(over, 400)
  assert (c.image_size, c.model.d_model, c.attention, c.num_train_steps) == (14, 32, "softmax", 400)
  with pytest.raises(KeyError, match="no such config field"):
    demo.make_config({"model.nope": 1}, 10)
  with pytest.raises(ValueError, match="not key=value"):
    demo.parse_run("a:1:oops")


def test_the_shipped_model_stands_beside_the_run(tmp_path, monkeypatch):
  from trainer import pretrained
  wd, out = workdir(tmp_path), str(tmp_path / "page")
  root = tmp_path / "pretrained"
  (root / "m14").mkdir(parents=True)
  meta = dict(steps=6000, num_train_steps=12000, train_wall_seconds=7200.0, params=118494,
              sha256="ab" * 32, config={}, model={"attention": "linear"})
  (root / "m14" / pretrained.META).write_text(json.dumps(meta))
  monkeypatch.setattr(pretrained, "ROOT", root)
  sh = os.path.join(wd, "shipped")
  os.makedirs(sh)
  ev = dict(json.load(open(os.path.join(wd, "eval", "eval.json"))), bits_per_dim=1.9,
            completion_accuracy=0.84, completion_images_per_s=40.0)
  open(os.path.join(sh, "eval.json"), "w").write(json.dumps(ev))
  for f in ("completions.png", "samples.png"):
    open(os.path.join(sh, f), "wb").write(b"\x89PNG")
  assert demo.record(wd, "c.py", "m14", str(tmp_path / "none"))["shipped"] is None
  d = demo.record(wd, "configs/mnist_demo.py", "m14", sh)
  assert "config" not in d["shipped"]["meta"] and d["shipped"]["meta"]["steps"] == 6000
  demo.copy_pictures(wd, out, sh)
  assert os.path.exists(os.path.join(out, "shipped_completions.png"))
  demo.write_page(d, out, [])
  page = open(os.path.join(out, "README.md")).read()
  assert page.index("## The shipped model beside this run") < page.index("## This run")
  assert "| training | step 6,000 of 12,000 (2.0 h wall on 2 shared CPU cores) | 800 steps" in page
  assert "| completions read right | 84.0 ± 2.2% | 55.2 ± 2.2% |" in page
  assert "| shipped `m14` | 84.0 ± 2.2% |" in page and "![shipped completions]" in page
  os.remove(os.path.join(out, "README.md"))
  demo.write_page(json.load(open(os.path.join(out, "demo.json"))), out, [])
  assert open(os.path.join(out, "README.md")).read() == page
