"""studies/mechanisms/gated_ablation.py without training: the rows' layer pieces, the
comparisons (each row against its bare row; each published layer against linear with the
same pieces) and the page from synthetic results."""
import attention
from studies.mechanisms import gated_ablation as A


def test_rows_cover_each_published_piece_and_linear_has_each_published_set():
  for v in ("gla", "deltanet", "gated_deltanet"):
    published = attention.variant(v).layer
    assert set(A.pieces(v, "published")) == set(published)
    singles = {tuple(A.pieces(x, s)) for x, s in A.ROWS if x == v and s.count(",") == 1}
    assert singles == {(p,) for p in published}, v
    assert any(x == "linear" and set(A.pieces(x, s)) == set(published) for x, s in A.ROWS)
  assert A.pieces("linear", "published") == ()        # linear's paper adds no layer


def test_comparisons_and_page(tmp_path):
  rows = [dict(variant=v, spec=s, pieces=list(A.pieces(v, s)), lr=1e-3, seeds=[1, 2, 3],
               test=[a, a + 0.01, a + 0.02], cpu_seconds=90.0)
          for (v, s), a in zip(A.ROWS, [0.1 + 0.03 * i for i in range(len(A.ROWS))])]
  pairs = A.comparisons(rows)
  assert (("deltanet", "published"), ("deltanet", "bare")) in pairs
  assert (("gla", "published"), ("linear", "bare,rms_norm,out_gate")) in pairs
  assert (("gated_deltanet", "published"), ("linear", A.ALL)) in pairs
  assert len(pairs) == len(A.ROWS) - 4 + 3
  run = dict(command="python -m scripts.gated_ablation", date="2026-11-28", backend="cpu",
             host="cpu", device_count=1, jax_version="0.11.2", preset="gated_ablation")
  A.write_page({"rows": rows, "run": run, "totals": {"cpu_seconds": 600.0}}, str(tmp_path))
  page = (tmp_path / "README.md").read_text()
  assert "| `deltanet` | `published` | qkv_conv, qkv_silu, rms_norm | 0.001 |" in page
  assert "What the recurrence buys" in page and "p_adj" in page
  assert (tmp_path / "ablation.png").stat().st_size > 1000


def test_reading_names_the_pieces_that_win_and_the_rows_that_split():
  """The reading is computed: a piece that beats its bare operator on this page is named
  for its variant, one that beats none is named as such, and a row whose seeds lie
  SPLIT or more apart is listed with its seeds."""
  from studies.core import protocol
  row = lambda v, s, test: dict(variant=v, spec=s, pieces=list(A.pieces(v, s)), test=test)
  rows = [row("linear", "bare", [0.14, 0.15, 0.15]),
          row("linear", "bare,qkv_conv", [0.98, 0.99, 1.0]),
          row("linear", "bare,out_gate", [0.15, 0.16, 0.15]),
          row("deltanet", "bare", [0.30, 0.33, 0.35]),
          row("deltanet", "bare,rms_norm", [0.36, 1.0, 0.35])]
  text = "\n".join(A.reading(rows, protocol.verdicts(A.comparisons(rows), True)))
  assert "`linear` (bare 14.7% ± 0.6 (3)): alone, qkv_conv (99.0% ± 1.0 (3)) beats" in text
  assert "`deltanet` (bare 32.7% ± 2.5 (3)): no single piece beats" in text
  assert "Alone, out_gate, rms_norm beat no bare operator here." in text
  assert "1 row split between modes" in text and "`deltanet` `bare,rms_norm` (36, 100, 35)" in text
