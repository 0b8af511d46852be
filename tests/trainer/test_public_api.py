"""The trainer's public API from a script outside the repository, as docs/training.md
("From another project") shows it: `import trainer` with the repository on the path,
`trainer.load_model` of a shipped model -> (config, model, step)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import trainer
config, model, step = trainer.load_model("mnist14_linear")
print(type(model).__name__, step, config.task, config.model.attention)
"""


def test_load_model_from_a_script_in_another_directory(tmp_path):
  (tmp_path / "my_script.py").write_text(SCRIPT)
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
  p = subprocess.run([sys.executable, "my_script.py"], cwd=tmp_path, env=env,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr[-3000:]
  name, step, task, att = p.stdout.split()
  assert (name, task, att) == ("TransformerLM", "mnist", "linear") and int(step) > 0, p.stdout
