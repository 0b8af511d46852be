"""studies.mechanisms.positions and studies.bench.rope_cost, cheaply: configs, the
extrapolation figures and verdicts, the page from made-up JSON, and the rotation's timed
function. (The trainings themselves are train.py's, tested in test_train.py; the smoke
preset of scripts/positions.py runs the whole study on tiny shapes.)"""
import os

import numpy as np
import pytest

from studies.bench import rope_cost
from studies.core import pages
from studies.mechanisms import positions as S

P = S.PRESETS["smoke"]


def _run(scheme, variant, losses):
  L = P.L
  return {"scheme": scheme, "variant": variant, "seed": 0,
          "loss": {str(f * L): x for f, x in zip(S.FACTORS, losses) if x is not None},
          "refused": [f * L for f, x in zip(S.FACTORS, losses) if x is None]}


def _ext():
  runs_ = [_run("sinusoidal", v, [2.0, 2.6, 3.5, 4.0]) for v in S.VARIANTS]
  runs_ += [_run("alibi", v, [2.0, 1.99, 2.01, 2.02]) for v in S.VARIANTS]
  runs_ += [_run("learned", "softmax", [2.1, None, None, None])]
  return {"run": pages.run_record("python -m scripts.positions", "smoke"), "L": P.L,
          "seed": 0, "runs": runs_}


def test_configs_train_at_L_and_learned_cannot_go_past_it():
  import trainer
  c = S.lm_config(P, "learned", "linear")
  m = trainer.validate(c)
  assert (c.seq_len, m.max_len, m.positions, m.attention) == (P.L, P.L, "learned", "linear")
  assert S.reachable(m, P.L) and not S.reachable(m, 2 * P.L)
  assert S.reachable(trainer.validate(S.lm_config(P, "alibi", "softmax")), 8 * P.L)
  img = S.mnist_config(P, "rope2d")
  mi = trainer.validate(img)
  assert mi.positions == "rope2d" and mi.image_side == img.image_size
  assert img.num_train_steps == P.mnist_steps and img.model.attention == "linear"


def test_ratio_and_shape_verdicts():
  d = _ext()
  by = {(r["variant"], r["scheme"]): r for r in d["runs"]}
  assert S.ratio(by["softmax", "sinusoidal"], P.L) == pytest.approx(1.75)
  assert S.ratio(by["softmax", "learned"], P.L) is None
  s = S.shape_holds(d["runs"], P.L)["softmax"]
  assert s["sinusoidal_degrades"] and s["alibi_flat"]
  flat = [dict(r, loss={k: 2.0 for k in r["loss"]}) for r in d["runs"]]
  assert not S.shape_holds(flat, P.L)["linear"]["sinusoidal_degrades"]


def test_difference_uses_two_standard_errors():
  a = {"x": 1.00, "se": 0.01}
  assert S.difference(a, {"x": 1.05, "se": 0.01}, "x", "se")[2] == "a lower"
  assert S.difference(a, {"x": 1.02, "se": 0.01}, "x", "se")[2] == "unresolved"
  assert S.difference(a, {"x": 0.90, "se": 0.01}, "x", "se")[2] == "b lower"


def test_rope_cost_verdict_is_the_interval_against_the_target():
  d = lambda lo, hi: {"target": 0.05, "cpu": {"lo": lo, "hi": hi}}
  assert rope_cost.verdict(d(0.01, 0.04)) == "met"
  assert rope_cost.verdict(d(0.06, 0.09)) == "missed"
  assert rope_cost.verdict(d(0.03, 0.07)) == "unresolved"


def test_rotation_fn_is_a_gradient_of_q_and_k():
  import trainer
  p = rope_cost.PRESETS["smoke"]
  c = rope_cost.config(p, "rope")
  f, (q, k) = rope_cost.rotation_fn(c, trainer.validate(c))
  gq, gk = f(q, k)
  assert gq.shape == q.shape and gk.shape == k.shape
  assert q.shape == (p.batch, p.seq_len, c.model.num_heads,
                     c.model.d_model // c.model.num_heads)
  assert np.isfinite(np.asarray(gq)).all()


def test_page_from_json_names_missing_parts_and_draws_the_figure(tmp_path):
  out = str(tmp_path)
  path = S.write_page(out)
  text = open(path).read()
  assert text.count("Not run yet") == 3
  pages.write_json(os.path.join(out, "extrapolation.json"), _ext())
  comp = dict(completion_accuracy=0.6, completion_accuracy_se=0.02, original_accuracy=0.99,
              original_accuracy_se=0.005, blank_accuracy=0.5, blank_accuracy_se=0.02,
              random_bottom_accuracy=0.4, random_bottom_accuracy_se=0.02, n_images=500,
              classifier_test_accuracy=0.988)
  img = [{"scheme": s, "steps": 400, "bits_per_dim": b, "bits_per_dim_se": 0.002,
          "completion": comp} for s, b in
         (("sinusoidal", 2.30), ("learned", 2.31), ("rope2d", 2.25))]
  pages.write_json(os.path.join(out, "images.json"), {
      "run": pages.run_record("python -m scripts.positions", "smoke"), "side": 14,
      "seed": 0, "runs": img})
  text = open(S.write_page(out)).read()
  assert "Not run yet: `python -m scripts.rope_cost`" in text
  assert "Written by `python -m scripts.positions`" in text
  assert "**met** (1.005)" in text and "the paper's shape holds here" in text
  assert "| `softmax` | `learned` | 2.100 | refused | refused | refused | — |" in text
  assert "rope2d − sinusoidal" in text and "-0.0500 ± 0.0028, rope2d lower" in text
  assert open(os.path.join(out, "extrapolation.png"), "rb").read(4) == b"\x89PNG"


def test_image_runs_are_stored_one_by_one_in_scheme_order(tmp_path):
  path = str(tmp_path / "images.json")
  S.store_image_run(path, {"scheme": "rope2d", "seed": 0, "x": 1}, {"command": "a"}, 14)
  S.store_image_run(path, {"scheme": "sinusoidal", "seed": 0}, {"command": "b"}, 14)
  d = S.store_image_run(path, {"scheme": "rope2d", "seed": 0, "x": 2}, {"command": "c"}, 14)
  assert [r["scheme"] for r in d["runs"]] == ["sinusoidal", "rope2d"]
  assert d["runs"][1]["x"] == 2 and pages.read_json(path) == d
