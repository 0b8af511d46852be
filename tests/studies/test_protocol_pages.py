"""Protocol version 2 on the committed pages (studies/PROTOCOL.md, "Version 1 pages under
version 2"): a page that ran under version 1 (or before the protocol) keeps its verdicts
and its Holm family; only their presentation changed. v1_verdicts.json holds every
verdict word and adjusted p the pages stated, computed from the committed JSON by the
version 1 code (commit 3acf746) before the presentation changed."""
import json
import os

import pytest

from studies.core import pages, protocol
from studies.mechanisms import gated_ablation, mla_train
from studies.recall import page as mqar_page
from studies.variants import seeds as vs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEFORE = json.load(open(os.path.join(os.path.dirname(__file__), "v1_verdicts.json")))
VARIANTS = [("copy", "cpu"), ("copy", "cpu_258"), ("mnist", "cpu"), ("listops", "cpu"),
            ("multi30k", "cpu")]      # Shakespeare re-ran under version 2 (below)
# pages moved to results/archive/ since the verdicts were recorded (still the same JSON)
ARCHIVED = {"results/variants_multi30k": "results/archive/variants_multi30k"}


def _words(v: dict) -> dict:
  return {("|".join(map(str, k)) if isinstance(k, tuple) else str(k)):
          [x.word, None if x.p_adj is None else round(x.p_adj, 6)] for k, x in v.items()}


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
  monkeypatch.chdir(ROOT)


def test_variants_pages_state_the_same_verdicts_as_before():
  for task, preset in VARIANTS:
    key = f"results/variants_{task}" + ("" if preset == "cpu" else f"_{preset}")
    d = ARCHIVED.get(key, key)
    rows = pages.read_json(os.path.join(d, "results.json"))
    got = vs.seed_verdicts(task, preset, rows, d, protocol.page_overrides(task, d))
    assert vs.family_version(d) == 1, d           # none of them is on version 2 yet
    assert _words(got) == BEFORE[key], d


def test_shakespeare_follows_version_2_and_keeps_its_old_verdicts_on_record():
  """Shakespeare re-ran its key rows under version 2 (issue 100): its page's family is
  version 2's, and its protocol.json keeps the verdicts the page stated before the
  re-run, each row against softmax, the same words as the v1 record's."""
  d = "results/variants_shakespeare"
  assert vs.family_version(d) == 2
  before = json.load(open(os.path.join(d, "protocol.json")))["before"]["verdicts"]
  v1 = {k.split("|")[0]: w for k, (w, _) in BEFORE[d].items() if k.split("|")[1] == "softmax"}
  assert before == v1 and before["retention"] == "worse"


def test_mqar_gated_ablation_and_mla_pages_state_the_same_verdicts_as_before():
  data = mqar_page.reported(pages.read_json("results/variants_mqar/results.json"))
  got = {(n, "w%d·%d·%d" % c): x for (n, c), x in mqar_page.page_verdicts(data).items()}
  assert _words(got) == BEFORE["results/variants_mqar"]
  g = pages.read_json("results/gated_ablation/results.json")
  got = protocol.verdicts(gated_ablation.comparisons(g["rows"]), True,
                          metric=mqar_page.ACCURACY)
  assert _words({(" ".join(a), " ".join(b)): x for (a, b), x in got.items()}) == \
      BEFORE["results/gated_ablation"]
  assert gated_ablation.VERSION == 1 and mla_train.VERSION == 1
  rows = mla_train.summary(mla_train.runs_done(mla_train.OUT))
  assert _words(mla_train.compare(rows)) == BEFORE["results/mla_train"]


def test_each_committed_page_says_which_version_its_verdicts_follow():
  for d in ["variants_copy", "variants_copy_cpu_258", "variants_mnist", "variants_listops",
            "variants_mqar", "gated_ablation", "mla_train"]:
    text = open(os.path.join("results", d, "README.md"), encoding="utf-8").read()
    assert "Its verdicts follow version 1; shown with version 2's presentation" in text, d
  for d in ["archive/variants_multi30k"]:
    text = open(os.path.join("results", d, "README.md"), encoding="utf-8").read()
    assert text.split("\n")[2].startswith("**Old protocol: not to be relied on.**"), d
