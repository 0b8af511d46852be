"""studies.bench.scale_memory: a config's compiled initialiser and training step per mesh
(XLA's per-device plans), and the page and docs/scaling.md table written from them.
On the test process's one device; the 8-device figures are test_scale.py's."""
import json

from studies.bench import scale_memory as S
from tests import multidevice


def _tiny():
  c = multidevice.tiny_copy()
  c.seq_len = 8           # the copy task's 2 * copy_len + 2 tokens
  return c


def test_measure_reads_the_compiled_plans_and_the_page_and_doc_show_them(tmp_path):
  r = S.measure(_tiny(), "python -m scripts.scale_memory", axes=("data", "tensor"),
                devices=(1,), step=True, log=lambda s: None)
  p = r["plans"]["tensor"][1]
  assert p is r["plans"]["data"][1]          # one 1-device mesh, compiled once
  # the state: 2,602 parameters and two AdamW moments, float32, and a few scalars
  state = p["init"]["output_bytes"]
  assert 3 * 2602 * 4 <= state < 3 * 2602 * 4 + 1024, p
  assert p["step"]["alias_bytes"] > 0.95 * state                 # the donated state
  assert p["step_total"] > state, p
  assert r["model"]["params"] == 2602 and r["batch"] == [8, 8]
  # a refused mesh reads as such, with its reason
  r["plans"]["data"][8] = {"init": {"output_bytes": 2 ** 20}, "step_total": 2 ** 21}
  r["plans"]["tensor"][8] = {"refused": "config 'mesh.tensor': 8 devices split the "
                                        "heads, but num_heads=2 is not a multiple of it"}
  r["devices"] = [1, 8]
  r = json.loads(json.dumps(r))          # as read back from memory.json: string keys
  doc = tmp_path / "doc.md"
  doc.write_text(f"before\n{S.BEGIN}\nSTALE TABLE\n{S.END}\nafter\n")
  S.write(r, str(tmp_path / "out"), str(doc))
  text = doc.read_text()
  assert text.startswith("before\n" + S.BEGIN) and text.endswith(S.END + "\nafter\n")
  assert "STALE TABLE" not in text
  cell = f"{state / S.MiB:.1f} / {p['step_total'] / S.MiB:.1f}"
  assert f"| `tensor` | {cell} | refused |" in text, text
  assert f"| `data` | {cell} | 1.0 / 2.0 |" in text, text
  assert "Refused: config 'mesh.tensor': 8 devices split the heads" in text
  page = (tmp_path / "out" / "README.md").read_text()
  assert page.startswith("# Memory per device over each mesh axis\n\nWritten by "
                         "`python -m scripts.scale_memory` on ")
  assert f"| `tensor` | {cell} | refused |" in page


def test_load_config_reads_a_preset():
  c = S.load_config("configs/shakespeare.py:gpu")
  assert c.model.d_model == 384 and c.seq_len == 256 and c.batch_size == 64

