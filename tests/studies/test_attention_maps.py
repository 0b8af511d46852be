"""studies.mechanisms.attention_maps on a tiny trained pixel model: every layer's maps
drawn, the page written from the draw records, rewritten from maps.json alone, and the
maps of a compare_variants row credited to that row's page only when the page holds it."""
import json
import os

import pytest

from studies.mechanisms import attention_maps as am

# one xdist worker runs this module (`--dist loadgroup`): its module-scoped fixtures
# are built once, not once per worker
pytestmark = pytest.mark.xdist_group("studies_attention_maps")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, prepared_data):
  """A 4-step run of 4x4 MNIST images: the model, batches and schedule of
  tests/trainer/test_train.py's and test_pretrained.py's MNIST runs, whose compiled
  programs this run reuses (16 pixels still give a query pixel with 15 before it)."""
  import trainer
  from configs import mnist
  c = mnist.get_config()
  c.image_size, c.batch_size, c.eval_batch_size, c.eval_batches = 4, 4, 4, 1
  c.model.update(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16)
  c.num_train_steps = c.eval_every = 4
  c.checkpoint_every = c.log_every = 2
  c.warmup_steps, c.progress, c.data_dir = 1, False, prepared_data
  wd = str(tmp_path_factory.mktemp("maps") / "tiny_linear")
  c.attention = "linear"
  trainer.train_and_evaluate(c, wd)
  return wd


def test_maps_page_and_its_rewrite(tiny, tmp_path):
  out = str(tmp_path / "drawn")
  info = am.draw(tiny, out, index=0, query=(3, 3))
  assert info["files"] == ["layer0.png", "query_pixel.png"] and info["side"] == 4
  assert "feature_map=elu" in info["options"] and "q_pos" not in info["options"]
  assert info["row"] is None
  for f in info["files"]:
    assert os.path.getsize(os.path.join(out, f)) > 1000
  page_dir = tmp_path / "page"
  run = {"command": "python -m scripts.attention_maps --page=x", "date": "2026-01-01",
         "host": "h", "jax_version": "0"}
  am.write_page(str(page_dir), run, [dict(info, out=out)], results=str(tmp_path))
  page = (page_dir / "README.md").read_text()
  assert "## tiny_linear: `linear`, 1 layers" in page and "no results page shows it" in page
  assert (page_dir / "tiny_linear" / "query_pixel.png").exists()
  saved = json.load(open(page_dir / "maps.json"))
  (page_dir / "README.md").unlink()
  am.write_page(str(page_dir), saved["run"], saved["maps"], results=str(tmp_path))
  assert (page_dir / "README.md").read_text() == page
  # --add: a later run's map joins the page; the earlier one keeps its section and says
  # which run drew it; the same workdir drawn again replaces its section
  later = dict(run, date="2026-02-02", command="python -m scripts.attention_maps --add")
  other = dict(info, workdir="wd/other")
  maps = am.merged(saved, later, [other])
  assert [m["workdir"] for m in maps] == [tiny, "wd/other"]
  assert maps[0]["run"]["date"] == "2026-01-01" and maps[1]["run"] is later
  assert [m["workdir"] for m in am.merged({"run": run, "maps": maps}, later, [info])] == [
      "wd/other", tiny]
  am.write_page(str(page_dir), later, maps, results=str(tmp_path))
  page = (page_dir / "README.md").read_text()
  assert page.count("Drawn by `python -m scripts.attention_maps --page=x` on 2026-01-01") == 1


def test_signed_weights_get_a_diverging_scale_that_keeps_their_sign():
  import numpy as np
  cmap, norm = am.colour_scale(np.array([[0.0, 0.25, 1.0]]))
  assert cmap == "viridis" and norm(0.25) == pytest.approx(0.5)     # square root from 0
  w = np.array([[-0.25, 0.0, 1.0]])
  cmap, norm = am.colour_scale(w)
  assert cmap == "RdBu_r" and norm(0.0) == pytest.approx(0.5)       # white at 0
  assert norm(-0.25) == pytest.approx(0.25) and norm(1.0) == pytest.approx(1.0)
  assert not am.signed(np.array([-1e-12, 1.0]))                    # float rounding


def test_a_published_row_is_credited_only_when_its_page_holds_it(tmp_path):
  row = {"task": "mnist", "variant": "softmax", "config": "abc", "quality": 2.3,
         "metric": "test bits/dim"}
  info = {"row": row}
  assert "not that page's row" in am.row_words(info, str(tmp_path))
  (tmp_path / "variants_mnist").mkdir()
  (tmp_path / "variants_mnist" / "results.json").write_text(json.dumps(
      [{"variant": "softmax", "config": "abc", "status": "ok"}]))
  assert am.row_words(info, str(tmp_path)).startswith(
      "The `softmax` row of [results/variants_mnist]")
