"""studies/mechanisms/packing.py without measuring: token counts of packed and padded
batches, the BLEU verdicts, and a page that states its JSON's figures."""
import numpy as np

from studies.mechanisms import packing


def test_batch_counts_of_a_padded_and_a_packed_batch():
  padded = {"src": np.array([[5, 2, 0], [0, 0, 0]]), "y": np.array([[6, 7, 2], [0, 0, 0]])}
  assert packing.batch_counts(padded) == {"computed": 12, "real": 5, "pairs": 1}
  packed = {"src": np.array([[5, 2, 8, 2]]), "y": np.array([[6, 2, 9, 0]]),
            "y_seg": np.array([[1, 1, 2, 0]]), "y_pos": np.array([[0, 1, 0, 0]])}
  assert packing.batch_counts(packed) == {"computed": 8, "real": 7, "pairs": 2}


def _run(arm, seed, bleu):
  return {"arm": arm, "seed": seed, "steps": 300, "test_bleu": bleu, "test_sentences": 256,
          "test_loss": 3.0, "train_cpu_s": 100.0, "train_wall_s": 600.0}


def test_bleu_verdicts_follow_the_seeds_there_are():
  one = packing.bleu_summary([_run("bucketed", 0, 10.0), _run("packed", 0, 9.0)])
  assert one["difference"]["verdict"].startswith("unresolved")
  two = packing.bleu_summary([_run("bucketed", 0, 10.0), _run("bucketed", 1, 8.0),
                              _run("packed", 0, 9.0)])
  assert two["difference"]["verdict"].startswith("within")
  assert two["packed_within_bucketed_range"] and "packed_within_bucketed_range" not in one
  assert two["bucketed"]["mean"] == 9.0
  four = packing.bleu_summary([_run("bucketed", 0, 10.0), _run("bucketed", 1, 10.2),
                               _run("packed", 0, 5.0), _run("packed", 1, 5.1)])
  assert four["difference"]["verdict"] == "packed lower"


def test_the_page_states_its_json():
  run = {"command": "python -m scripts.packing --part=x", "date": "2026-11-25",
         "host": "AMD EPYC, 2 cores", "backend": "cpu", "preset": "cpu"}
  d = {"padding": {"bucketed": {"padding": 0.25, "computed_per_step": 2304.0,
                                "real_per_step": 1744.0, "pairs_per_step": 64.0,
                                "steps": 4},
                   "packed": {"padding": 0.046, "computed_per_step": 2048.0,
                              "real_per_step": 1954.0, "pairs_per_step": 58.2,
                              "steps": 4}, "run": run},
       "throughput": {a: {"real_tokens_per_cpu_s": t, "cpu_s_per_step": 1.0,
                          "wall_s_per_step": 2.0, "real_tokens_per_step": 1900.0}
                      for a, t in (("bucketed", 1000.0), ("packed", 1300.0))},
       "bleu": {"runs": [_run("bucketed", 0, 10.0), _run("packed", 0, 9.5)], "run": run}}
  d["throughput"]["ratio"] = {"median": 1.3, "lo": 1.25, "hi": 1.35, "coverage": 0.97,
                              "per_round": [1.3, 1.25, 1.35], "steps": 30, "rounds": 3}
  d["throughput"]["run"] = run
  text = "\n".join(packing.page(d))
  for s in ("| bucketed | 25.0% |", "| packed | 4.6% |", "at most 5% packed: met",
            "median 1.30x", "1.25..1.35x", "at least 1.2x: met.", "| packed | 0 | 300 | 9.50 |",
            "Packed minus bucketed: -0.50 BLEU (two standard errors decide); unresolved", "--part=x",
            "would give 1.27x", "112% of a bucketed one's", "a step took 2.0, 2.0 s"):
    assert s in text, s
