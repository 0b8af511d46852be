"""The one completion table and the one verdict rule of every page that judges MNIST
completions (variants_mnist, mnist_completion, mnist_demo and its frontier).

The figures are eval.py's `completion_metric`: the digit classifier
(trainer/digit_judge.py) reads test images whose bottom half a model completed from
the top half, against the true labels, beside three baselines from the same
classifier on the same images: the originals, the top half over a blank bottom, and
the top half over the bottom half of another test image; each with its standard
error over the images.

The verdict: a model's completions draw digits when they are read right more often
than the top halves over a blank bottom by more than two standard errors of the
difference, fall behind when they are read right less often by as much, and are
unresolved in between.
"""
from __future__ import annotations

import math

HEAD = ["completions read right", "originals", "blank bottom", "another image's bottom",
        "lead over blank (points)", "verdict"]


def lead(c: dict) -> tuple[float, float]:
  """(lead of the completions over the blank baseline, the standard error of that
  difference), in points; the two accuracies' errors added in quadrature (as if
  independent: the stored figures hold each accuracy's error, not their covariance)."""
  se = math.hypot(c["completion_accuracy_se"], c["blank_accuracy_se"])
  return (100 * (c["completion_accuracy"] - c["blank_accuracy"]), 100 * se)


def verdict(c: dict) -> str:
  """'ahead', 'behind' or 'unresolved': the lead over the blank bottom against two
  standard errors of the difference."""
  d, se = lead(c)
  return "ahead" if d > 2 * se else "behind" if d < -2 * se else "unresolved"


def _pm(c, k):
  return f"{100 * c[k]:.1f} ± {100 * c[k + '_se']:.1f}%"


def cells(c: dict) -> list[str]:
  """The row cells under HEAD for one judged model."""
  d, se = lead(c)
  return [_pm(c, "completion_accuracy"), _pm(c, "original_accuracy"),
          _pm(c, "blank_accuracy"), _pm(c, "random_bottom_accuracy"),
          f"{d:+.1f} ± {se:.1f}", verdict(c)]


def judge(c: dict, side: int) -> str:
  """The judge in words, the same on every page: which classifier, how accurate, how
  many images; a page that sets figures of two judges side by side names both."""
  acc = c.get("classifier_test_accuracy")
  acc = f"{100 * acc:.2f}% test accuracy" if acc is not None else "test accuracy not recorded"
  return (f"the digit classifier of `trainer/digit_judge.py` (a CNN trained on "
          f"{side}×{side} MNIST, {acc}) on the first {c['n_images']} test images")


def method(c: dict, side: int) -> str:
  """The paragraph that explains the table and the rule, before every table."""
  return (f"Completions read right: {judge(c, side)}, each completed once from its top "
          "half, read against the true labels; beside it, the same classifier on the "
          "originals, on the top half over a blank bottom and on the top half over the "
          "bottom half of another test image (± one standard error over the images). "
          "The verdict, the same on every page (`studies/core/completion.py`): a model's "
          "completions are `ahead` when they are read right more often than the top "
          "halves over a blank bottom by more than two standard errors of the "
          "difference, `behind` when less often by as much, else `unresolved`.")


def sentence(label: str, c: dict) -> str:
  """The verdict of one model in words, with its figures."""
  d, se = lead(c)
  v = verdict(c)
  if v == "ahead":
    return (f"{label}'s completions are read right {d:.1f} points more often than the "
            f"top halves over a blank bottom (± {se:.1f}): it draws more of the digit "
            "than the top half already shows")
  if v == "behind":
    return (f"{label}'s completions are read right {-d:.1f} points less often than the "
            f"top halves over a blank bottom (± {se:.1f}): its strokes mislead the "
            "classifier more than they complete the digit")
  return (f"{label}'s completions are read no better or worse than the top halves over "
          f"a blank bottom ({d:+.1f} ± {se:.1f} points): unresolved")


def table(rows: list[tuple[str, dict]], first: str = "model") -> list[str]:
  """Markdown lines of the completion table, one row per (label, figures)."""
  from studies.core.pages import table as md
  return md([first] + HEAD, [[label] + cells(c) for label, c in rows])
