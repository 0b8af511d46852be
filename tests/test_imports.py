"""No import circle among the project's own modules.

Every `import` and `from ... import` of every module of the project's packages and of
its top-level modules is read from the source (`ast`), including imports inside
functions: a circle hidden in a function body still means that neither module can be
read, tested or moved without the other. `from pkg import name` counts as importing
the submodule pkg.name where one exists, else the package itself. Importing a
submodule also runs its package's __init__, which is not counted as an edge (every
submodule would otherwise be in a circle with its package).
"""
import ast
import functools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("attention", "models", "trainer", "data", "studies", "scripts", "configs")


def module_files(root: pathlib.Path, packages=PACKAGES) -> dict[str, pathlib.Path]:
  """{dotted module name: path} of the top-level modules and the packages' modules."""
  files = list(root.glob("*.py"))
  for pkg in packages:
    files += [p for p in (root / pkg).rglob("*.py") if p.is_file()]
  out = {}
  for p in files:
    parts = list(p.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = p
  return out


def import_graph(mods: dict[str, pathlib.Path]) -> dict[str, set[str]]:
  """{module: the project modules it imports anywhere in its source}."""
  graph = {}
  for name, path in mods.items():
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
      if isinstance(node, ast.Import):
        edges |= {a.name for a in node.names if a.name in mods}
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:                       # relative: from .x import y
          up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
          base = ".".join(up + ([node.module] if node.module else []))
        for a in node.names:
          if f"{base}.{a.name}" in mods:
            edges.add(f"{base}.{a.name}")
          elif base in mods:
            edges.add(base)
    graph[name] = edges - {name}
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan), sorted."""
  index, low, stack, on, found = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        found.append(sorted(comp))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return sorted(found)


@functools.cache
def project_graph() -> dict[str, set[str]]:
  """The import graph of this project (read once: the tests below share it)."""
  return import_graph(module_files(ROOT))


def test_the_project_has_no_import_circle():
  graph = project_graph()
  assert {"attention.core.decode", "attention.softmax", "data.fetch", "train"} <= set(graph)
  assert cycles(graph) == []


def core_imports_of_variants(graph: dict[str, set[str]]) -> dict[str, list[str]]:
  """{module of attention.core: the attention modules outside attention.core it
  imports}: the variants (attention/<name>.py) and the package `attention` itself
  (which imports them all)."""
  core = lambda m: m == "attention.core" or m.startswith("attention.core.")
  out = {}
  for name, edges in graph.items():
    bad = sorted(e for e in edges
                 if (e == "attention" or e.startswith("attention.")) and not core(e))
    if core(name) and bad:
      out[name] = bad
  return out


def test_the_attention_core_imports_no_variant():
  """attention/core/ is the machinery under the variants (attention/core/__init__.py):
  it imports none of them, so that a variant is one file that nothing in the core
  names, and the core can be read and tested without any variant."""
  assert core_imports_of_variants(project_graph()) == {}


def test_a_core_import_of_a_variant_is_found(tmp_path):
  """The checker itself: core -> variant and core -> the package are reported, core ->
  core and variant -> core are not."""
  core = tmp_path / "attention" / "core"
  core.mkdir(parents=True)
  (tmp_path / "attention" / "__init__.py").write_text("from attention import lin\n")
  (core / "__init__.py").write_text("")
  (core / "common.py").write_text("")
  (core / "gated.py").write_text("from attention.core import common\n"
                                 "def f():\n  from attention.lin import g\n")
  (core / "weights.py").write_text("import attention\n")
  (tmp_path / "attention" / "lin.py").write_text("from attention.core.gated import f\n")
  graph = import_graph(module_files(tmp_path, ("attention",)))
  assert core_imports_of_variants(graph) == {"attention.core.gated": ["attention.lin"],
                                            "attention.core.weights": ["attention"]}


def test_a_circle_is_found_also_through_a_function_body_import(tmp_path):
  """The checker itself: a circle made by an import inside a function, and one through
  a package's __init__, are both reported; a package importing its own submodule is not."""
  pkg = tmp_path / "attention"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("from attention import a as _a\n")
  (pkg / "a.py").write_text("from attention.b import f\n")
  (pkg / "b.py").write_text("def f():\n  from attention import a\n  return a\n")
  (pkg / "c.py").write_text("import attention\n")
  (tmp_path / "top.py").write_text("import attention.c\n")
  graph = import_graph(module_files(tmp_path, ("attention",)))
  assert graph["top"] == {"attention.c"} and graph["attention.c"] == {"attention"}
  assert cycles(graph) == [["attention.a", "attention.b"]]
  (pkg / "a.py").write_text("import top\n")        # a -> top -> c -> attention -> a
  assert cycles(import_graph(module_files(tmp_path, ("attention",)))) == [
      ["attention", "attention.a", "attention.c", "top"]]


def test_the_attention_distribution_declares_what_it_imports():
  """pyproject.toml's `attnlab` distribution (`pip install -e .`: import attention from
  another project) lists every package under attention/, and its dependencies cover
  every third-party module that attention/ imports, nothing of the training stack."""
  import sys
  import tomllib
  meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
  pkgs = sorted(".".join(p.parent.relative_to(ROOT).parts)
                for p in (ROOT / "attention").rglob("__init__.py"))
  assert sorted(meta["tool"]["setuptools"]["packages"]) == pkgs
  deps = {re.split(r"[<>=!~ \[;]", d)[0].replace("-", "_") for d in meta["project"]["dependencies"]}
  used = set()
  for p in (ROOT / "attention").rglob("*.py"):
    for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
      if isinstance(node, ast.Import):
        used |= {a.name.split(".")[0] for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        used.add(node.module.split(".")[0])
  third = {m for m in used if m not in sys.stdlib_module_names and m != "attention"}
  assert third <= deps, f"attention/ imports {sorted(third - deps)}, not in pyproject's dependencies"


def module_level_definitions(mods: dict[str, pathlib.Path], name: str) -> list[str]:
  """The modules whose top level assigns `name` (an import of it is not a definition)."""
  out = []
  for mod, path in sorted(mods.items()):
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
      targets = (node.targets if isinstance(node, ast.Assign)
                 else [node.target] if isinstance(node, ast.AnnAssign) else [])
      if any(isinstance(t, ast.Name) and t.id == name for t in targets):
        out.append(mod)
  return out


def test_the_output_normalisations_are_listed_once():
  """OUTPUT_NORMS (the layer pieces of which a layer holds at most one) is the registry's:
  models.layers imports it, so that a new normalisation is named in one place only."""
  mods = module_files(ROOT)
  assert module_level_definitions(mods, "OUTPUT_NORMS") == ["attention.core.registry"]
  from attention.core import registry
  from models import layers
  assert layers.OUTPUT_NORMS is registry.OUTPUT_NORMS
