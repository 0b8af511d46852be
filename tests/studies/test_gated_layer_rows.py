"""The committed rows were trained with the gated variants bare (before issue 76 built
their papers' layers, `model.gated_layer`): the studies keep training them bare until
re-run, their fingerprints do not move, "published" moves only the rows of variants
whose records list a layer, and the pages say "bare operator" for those rows."""
import ml_collections

from studies.core import protocol, sweep
from studies.recall import mqar
from studies.variants import compare as cv


def _without_field(c):
  old = ml_collections.ConfigDict(c.to_dict())
  del old.model["gated_layer"]
  return old


def test_committed_rows_keep_their_identity_and_published_moves_only_layered_ones():
  assert sweep.NEUTRAL["gated_layer"] == protocol.gated_layer(0) == "bare"
  for variant, layered in (("softmax", False), ("gla", True), ("gated_deltanet", True)):
    c = cv.make_config("copy", "cpu", variant)
    assert c.model.gated_layer == "bare"
    # a row trained before the field existed is this config's row
    assert sweep.config_fingerprint(_without_field(c)) == sweep.config_fingerprint(c)
    pub = ml_collections.ConfigDict(c.to_dict())
    pub.model.gated_layer = "published"
    moved = sweep.config_fingerprint(pub) != sweep.config_fingerprint(c)
    assert moved == layered, variant
  # an MQAR preset that names no layer trains the bare operators; the cpu preset's
  # protocol re-run names "published" (its old page renders from its results.json)
  run = mqar.Run("gla", 16, 16, 2, 1e-2)
  assert mqar.make_config("smoke", run).model.gated_layer == "bare"
  assert mqar.make_config("cpu", run).model.gated_layer == "published"


def test_each_study_sets_the_layer_once_from_its_protocol_version():
  """The gated layer of a study's runs is its protocol version's (protocol.gated_layer),
  whatever models.ModelConfig's own default is: every MQAR preset's from its `protocol`,
  the variants pages' from the overrides of the version they follow."""
  import pytest
  run = mqar.Run("gla", 16, 16, 2, 1e-2)
  for name, p in mqar.PRESETS.items():
    assert "gated_layer" not in p, f"{name}: the layer is the protocol version's"
    want = protocol.gated_layer(p.get("protocol", 0))
    assert mqar.make_config(name, run).model.gated_layer == want, name
  assert protocol.gated_layer(protocol.VERSION) == "published"
  assert cv.make_config("copy", "cpu", "gla", protocol.overrides("copy")).model.gated_layer \
      == protocol.gated_layer(protocol.VERSION)
  with pytest.raises(ValueError, match="names no gated layer"):
    protocol.gated_layer(protocol.VERSION + 1)


def test_the_pages_say_bare_operator_for_the_rows_of_layered_variants():
  notes = cv.layer_notes(cv.make_config("copy", "cpu", "deltanet"))
  assert len(notes) == 1 and notes[0].startswith("bare operator: deltanet without qkv_conv")
  assert cv.layer_notes(cv.make_config("copy", "cpu", "softmax")) == []
  c = cv.make_config("copy", "cpu", "gla", {"model": {"gated_layer": "published,-out_gate"}})
  assert cv.layer_notes(c)[0].startswith("layer in part: gla without out_gate")
  old = _without_field(cv.make_config("copy", "cpu", "retention"))   # a row's old config
  assert cv.layer_notes(old)[0].startswith("bare operator: retention")
  from studies.variants.page import run_notes
  recorded = {"status": "ok", "attention_notes": []}     # the trainer's notes: none
  assert run_notes(recorded, cv.make_config("copy", "cpu", "gla"))[0].startswith(
      "bare operator: gla")
