"""studies.core.completion: the one completion table and its one verdict rule."""
import pytest

from studies.core import completion


def figures(comp, blank, se=0.02):
  return dict(completion_accuracy=comp, completion_accuracy_se=se, original_accuracy=0.99,
              original_accuracy_se=0.005, blank_accuracy=blank, blank_accuracy_se=se,
              random_bottom_accuracy=0.37, random_bottom_accuracy_se=se, n_images=500,
              classifier_test_accuracy=0.988)


def test_the_verdict_is_the_lead_against_two_standard_errors_of_the_difference():
  se = 100 * (2 * 0.02 ** 2) ** 0.5                  # 2.83 points
  assert completion.lead(figures(0.60, 0.54)) == (pytest.approx(6.0), pytest.approx(se))
  assert completion.verdict(figures(0.60, 0.54)) == "ahead"          # 6.0 > 5.66
  assert completion.verdict(figures(0.59, 0.54)) == "unresolved"     # 5.0 < 5.66
  assert completion.verdict(figures(0.46, 0.54)) == "behind"
  assert completion.verdict(figures(0.50, 0.54)) == "unresolved"


def test_table_and_words_are_the_same_on_every_page():
  lines = completion.table([("linear", figures(0.552, 0.538))])
  assert lines[0].startswith("| model | completions read right | originals | blank bottom")
  assert lines[2] == ("| linear | 55.2 ± 2.0% | 99.0 ± 0.5% | 53.8 ± 2.0% | 37.0 ± 2.0% "
                      "| +1.4 ± 2.8 | unresolved |")
  assert "98.80% test accuracy" in completion.method(figures(0.5, 0.5), 14)
  assert "14×14" in completion.judge(figures(0.5, 0.5), 14)
  assert "unresolved" in completion.sentence("linear", figures(0.552, 0.538))
  assert "mislead" in completion.sentence("softmax", figures(0.40, 0.54))
