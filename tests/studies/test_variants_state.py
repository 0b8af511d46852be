"""studies.variants.state: the copy page's fixed-state section (issue 76, item 3)."""
import json
import os

import numpy as np

from studies.core import protocol
from studies.variants import seeds as vs
from studies.variants import state as st

OV = protocol.with_overrides("copy", None)       # the protocol's: the papers' layers


def _cfg(v, ov=OV):
  return vs.make_config("copy", "cpu", v, ov)


def test_what_each_state_holds_from_its_shapes():
  """cpu copy: 2 heads of 32, 2 layers, 130 positions; local's window 64."""
  assert st.state_shape("linear", _cfg("linear")) == {"kind": "matrix", "heads": 2,
                                                      "features": 32}
  assert st.state_shape("gated_deltanet", _cfg("gated_deltanet"))["kind"] == "matrix"
  assert st.state_shape("local", _cfg("local")) == {"kind": "window", "tokens": 64}
  assert st.state_shape("softmax", _cfg("softmax")) is None       # grows with the context
  # retention's decays: RetNet's schedule for the model's 2 heads; the others learn theirs
  assert np.allclose(st.fixed_decay("retention", _cfg("retention")), [1 - 1 / 32, 1 - 1 / 64])
  assert st.fixed_decay("gla", _cfg("gla")) is None
  # from the registry's `decay`, reading the variant's option: one gamma for every head
  g = {**OV, "model": {**OV["model"], "attention_options": {"retention": {"gamma": 0.9}}}}
  assert st.fixed_decay("retention", _cfg("retention", g)) == [0.9, 0.9]
  # the model's whole state, 2 layers: a 2 x 32 x 32 float32 matrix and a position
  # counter each; deltanet's layer adds its q, k, v convolutions' last 3 inputs of 64
  r = st.state_bytes("retention", _cfg("retention"))
  assert 2 * 2 * 32 * 32 * 4 < r <= 2 * (2 * 32 * 32 * 4 + 8)
  assert st.state_bytes("deltanet", _cfg("deltanet")) - r == 2 * 3 * 3 * 64 * 4


def test_the_section_reads_decay_capacity_and_the_bare_operator_from_the_page(
    tmp_path, monkeypatch):
  out = str(tmp_path / "variants_copy")
  os.makedirs(out)
  protocol.write_page_record(out, "variants_copy", protocol.VERSION)
  base = vs.base_lr("copy", "cpu")
  monkeypatch.setattr(vs, "chosen_lrs", lambda *a, **k: {
      v: base for v in ("softmax", "linear", "retention", "deltanet", "gated_deltanet")})
  fp = lambda v, s, ov: min(vs.fingerprints(_cfg(v, {**ov, "seed": s})))
  seeds = protocol.reporting_seeds("variants_copy")
  means = {"softmax": 1.0, "linear": 0.99, "retention": 0.70, "deltanet": 0.95,
           "gated_deltanet": 0.80}
  rows = [{"variant": v, "task": "copy", "preset": "cpu", "seed": s,
           "quality": min(1.0, q + 0.002 * s) if v != "softmax" else 1.0,
           "config": fp(v, s, OV), "protocol": protocol.VERSION}
          for v, q in means.items() for s in seeds]
  # retention's bare operator on the page before its re-run: seeds 1, 2 and seed 0's
  # run of the lr sweep at the same rate (no "protocol" field)
  bare = {"model": {"gated_layer": "bare"}}
  rows += [{"variant": "retention", "task": "copy", "preset": "cpu", "seed": s,
            "quality": 0.6, "config": fp("retention", s, bare)} for s in (1, 2)]
  json.dump(rows, open(os.path.join(out, "seeds.json"), "w"))
  json.dump([{"variant": "retention", "task": "copy", "preset": "cpu", "lr": base,
              "quality": 0.9, "config": min(vs.fingerprints(_cfg("retention", bare)))}],
            open(os.path.join(out, "lr.json"), "w"))
  res = [{"variant": v, "task": "copy", "preset": "cpu", "status": "ok",
          "eval": {"token_accuracy": q}} for v, q in means.items()]
  res.append({"variant": "gla", "task": "copy", "status": "skipped", "pending": True})
  text = "\n".join(st.lines("copy", "cpu", res, out, OV))
  assert "## Fixed-state rows" in text and "65 positions back" in text
  row = next(l for l in text.splitlines() if l.startswith("| `retention`"))
  assert "13% (γ 0.9688), 36% (γ 0.9844)" in row and "group_norm, out_gate" in row
  assert "70.60% ± " in row and "(5)" in row                 # its 5 reporting seeds
  assert "70.00% (seeds 0, 1, 2; rate 0.002)" in row         # the bare operator, before
  assert "worse (Δ" in row                                   # against softmax
  assert "| `softmax` | 130.0 KiB | every token (130) |" in text
  assert "`gla`" not in text                                 # not run yet
  assert "- `retention` (a fixed decay per head) trails `linear`: worse" in text
  assert "- `gated_deltanet` (a learned decay per token) trails `deltanet`: worse" in text
  assert "- `deltanet` (the delta rule in place of the plain sum) trails `linear`" in text
  assert "exactly the 64 symbols a copy must hold" in text
  assert ("**Which effect this page sees:** decay (`retention` trails the row it extends, "
          "`gated_deltanet` trails the row it extends) and capacity (`deltanet`, `linear`, "
          "with no decay, trail softmax)"
          in text)
  # the section's verdicts are the seed table's (one Holm family per page)
  got = vs.seed_verdicts("copy", "cpu", res, out, OV)
  assert got[("linear", "retention")].flipped().text(vs.METRIC["copy"][3]) in text
  # not a copy page, or a single fixed-state row: no section
  assert st.lines("listops", "cpu", res, out, OV) == []
  assert st.lines("copy", "cpu", res[:2], out, OV) == []


def test_a_verdict_read_the_other_way_round():
  v = protocol.verdicts({("a", "b"): ([1.0, 1.1, 1.2], [2.0, 2.1, 2.3])}, True)[("a", "b")]
  f = v.flipped()
  assert (v.word, f.word) == ("worse", "better") and f.p_adj == v.p_adj
  assert f.test.diff == -v.test.diff and (f.test.lo, f.test.hi) == (-v.test.hi, -v.test.lo)
  assert f.n == v.n[::-1]
