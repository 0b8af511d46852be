"""studies/__init__.py's MAP is the package map: every module of studies/ is listed
under its room, and every listed module exists."""
import pathlib

import studies

ROOT = pathlib.Path(studies.__file__).resolve().parent


def _tree() -> set[tuple[str, str]]:
  """(room, module) of every .py file of studies/'s subpackages."""
  return {(p.parent.name, p.stem) for p in ROOT.glob("*/*.py") if p.stem != "__init__"}


def test_the_map_lists_every_module_and_only_modules_that_exist():
  listed = {(room, m) for room, mods in studies.MAP.items() for m in mods}
  tree = _tree()
  path = lambda pairs: sorted(f"{r}/{m}.py" for r, m in pairs)
  assert not tree - listed, (f"studies/ has modules that studies/__init__.py's MAP does "
                             f"not list: {path(tree - listed)}")
  assert not listed - tree, (f"studies/__init__.py's MAP lists modules that do not "
                             f"exist: {path(listed - tree)}")


def test_studies_is_rooms_only():
  """No module sits at studies/'s top level or deeper than a room, and every room is
  a package the MAP names."""
  loose = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
  assert not loose, f"modules outside a room of studies/: {loose} (add them to a room)"
  deep = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("*/*/*.py"))
  assert not deep, f"modules below a room of studies/: {deep}"
  rooms = {p.parent.name for p in ROOT.glob("*/__init__.py")}
  assert rooms == set(studies.MAP), (f"studies/'s rooms {sorted(rooms)} differ from "
                                     f"MAP's {sorted(studies.MAP)}")


def test_no_module_is_over_500_lines():
  long = {f"{p.parent.name}/{p.name}": n for p in ROOT.glob("*/*.py")
          if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
  assert not long, f"studies/ modules over 500 lines (split them): {long}"


def test_the_core_imports_no_study():
  """studies/core/ is the shared floor: it imports no other room (a study may import
  the core, and another study's modules, never the other way down)."""
  import ast
  bad = []
  for p in (ROOT / "core").glob("*.py"):
    for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
               [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
      bad += [f"core/{p.name}: {n}" for n in names
              if n.startswith("studies.") and not n.startswith("studies.core")]
  assert not bad, f"studies/core/ imports a study: {bad}"
