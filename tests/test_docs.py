"""The front door and the docs: README.md stays short, its layout table names every
top-level package and directory, and every relative link (and image) of README.md,
docs/*.md and every results page (results/**/*.md, the archived ones too) resolves to a
file, and its anchor to a heading."""
import pathlib
import re

import pytest


def _root() -> pathlib.Path:
  """The repository root: the first parent of this file that holds README.md and
  train.py (this file may sit in tests/ or a folder under it)."""
  for p in pathlib.Path(__file__).resolve().parents:
    if (p / "README.md").is_file() and (p / "train.py").is_file():
      return p
  raise AssertionError("no repository root above " + __file__)


ROOT = _root()
MAX_README_LINES = 200
# Listed in the layout table whether or not they are Python packages.
REQUIRED = ("configs", "attention", "models", "scripts", "tests", "data", "trainer",
            "studies", "docs", "results", "pretrained", "train.py", "eval.py")
LAYOUT_HEADING = "## Where things are"


def _pages() -> list[pathlib.Path]:
  return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
          *sorted((ROOT / "results").rglob("*.md"))]


def _outside_code(text: str) -> str:
  """The text without fenced code blocks and inline code spans."""
  text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
  return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
  s = re.sub(r"`", "", heading.strip().lower())
  s = re.sub(r"[^\w\- ]", "", s)
  return s.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
  text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", path.read_text(encoding="utf-8"),
                flags=re.M | re.S)
  seen: dict[str, int] = {}
  out = set()
  for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
    base = _slug(m.group(1))
    n = seen.get(base, 0)
    seen[base] = n + 1
    out.add(base if n == 0 else f"{base}-{n}")
  return out


def _links(path: pathlib.Path) -> list[str]:
  """The targets of the page's markdown links and images, inline and reference-style."""
  text = _outside_code(path.read_text(encoding="utf-8"))
  inline = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
  refs = re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, flags=re.M)
  return inline + refs


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
  assert page.is_file(), f"{page.relative_to(ROOT)} is missing"
  broken = []
  for url in _links(page):
    if re.match(r"^[a-z][a-z0-9+.-]*:", url, flags=re.I):     # http:, https:, mailto:
      continue
    target, _, anchor = url.partition("#")
    dest = (page.parent / target).resolve() if target else page
    if not dest.exists():
      broken.append(f"{url} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
    elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
      broken.append(f"{url} (no heading #{anchor} in {dest.relative_to(ROOT)})")
  assert not broken, f"{page.relative_to(ROOT)}: broken links: " + "; ".join(broken)


def test_readme_is_short():
  n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
  assert n <= MAX_README_LINES, (
      f"README.md has {n} lines, more than {MAX_README_LINES}: move the long prose to docs/")


def _layout_entries() -> list[str]:
  """The first cells of the README's layout table (`name/` or `name.py`), unquoted."""
  text = (ROOT / "README.md").read_text(encoding="utf-8")
  assert LAYOUT_HEADING in text, f"README.md has no '{LAYOUT_HEADING}' section"
  section = text.split(LAYOUT_HEADING, 1)[1].split("\n## ", 1)[0]
  return [m.group(1).rstrip("/") for m in
          re.finditer(r"^\|\s*`([^`]+)`\s*\|", section, flags=re.M)]


def _top_level_packages() -> list[str]:
  return sorted(p.name for p in ROOT.iterdir()
                if p.is_dir() and not p.name.startswith((".", "_"))
                and (p / "__init__.py").is_file())


def test_the_layout_table_lists_every_top_level_package_and_entry_point():
  listed = set(_layout_entries())
  for name in sorted(set(REQUIRED) | set(_top_level_packages())):
    assert name in listed, (
        f"README.md's layout table ('{LAYOUT_HEADING}') has no line for {name!r}: "
        f"add one ('| `{name}{'/' if (ROOT / name).is_dir() else ''}` | what it holds |')")


def test_the_layout_table_lists_only_what_exists():
  for name in _layout_entries():
    assert (ROOT / name).exists(), (
        f"README.md's layout table lists {name!r}, which is not in the repository")


# ---- attention/README.md: the contract's rules, each with its test -------------------

RULES_HEADING = "## The contract's rules"


def _contract_module() -> pathlib.Path:
  """The contract's test module: tests/attention/test_contract.py, or tests/ before
  the tests were sorted into folders."""
  for p in (ROOT / "tests" / "attention" / "test_contract.py",
            ROOT / "tests" / "test_contract.py"):
    if p.is_file():
      return p
  raise AssertionError("no tests/attention/test_contract.py nor tests/attention/test_contract.py")


def _rules_section() -> str:
  text = (ROOT / "attention" / "README.md").read_text(encoding="utf-8")
  assert RULES_HEADING in text, f"attention/README.md has no '{RULES_HEADING}' section"
  return text.split(RULES_HEADING, 1)[1].split("\n## ", 1)[0]


def test_the_guide_lists_the_contracts_rules_each_with_the_test_that_checks_it():
  """attention/README.md's rules name every test function of the contract module and
  only those, and every rule (a row of its table) names at least one: a new check
  comes with its rule, and a renamed one cannot leave the list stale."""
  import ast
  path = _contract_module()
  tests = {f.name for f in ast.parse(path.read_text(encoding="utf-8")).body
           if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")}
  section = _rules_section()
  rows = [l for l in section.splitlines()
          if l.startswith("|") and not re.match(r"^\|\s*(rule|-)", l)]
  assert rows, f"attention/README.md '{RULES_HEADING}' lists no rules"
  for row in rows:
    assert re.search(r"`test_\w+`", row), f"a rule names no test that checks it: {row}"
  named = set(re.findall(r"`(test_\w+)`", section))
  rel = path.relative_to(ROOT)
  assert not tests - named, (f"attention/README.md '{RULES_HEADING}' does not name "
                             f"{sorted(tests - named)} of {rel}: add its rule")
  assert not named - tests, (f"attention/README.md '{RULES_HEADING}' names "
                             f"{sorted(named - tests)}, which {rel} does not define")


# ---- every module and test path the docs name exists ---------------------------------

# The project's own packages: a dotted name under one of them, or a path into one,
# must be there.
OWN = ("attention", "models", "trainer", "data", "studies", "scripts", "configs", "tests")


def _doc_pages() -> list[pathlib.Path]:
  """README.md, docs/*.md and the packages' own docs (every */README.md of the tree
  but the generated results/ and pretrained/ pages, and studies/PROTOCOL.md)."""
  own = [p for p in sorted(ROOT.glob("*/*.md"))
         if p.parts[-2] in OWN and p.parts[-2] != "docs"]
  return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *own]


def _named_paths(text: str) -> set[str]:
  """Repository paths the text names, like `studies/core/sweep.py` or
  `tests/attention/test_<name>.py` (a placeholder stands for any name; globs skipped)."""
  own = "|".join(OWN)
  found = re.findall(rf"(?<![\w/.<-])((?:{own})/[\w/.<>-]*[\w>]\.(?:py|md|sh|txt|json))"
                     r"(?![\w*<])", text)
  return set(found)


def _path_missing(path: str) -> bool:
  """Whether `path` names no file; a placeholder (`test_<name>.py`) must match one."""
  if "<" in path:
    return not list(ROOT.glob(re.sub(r"<[^>]*>", "*", path)))
  return not (ROOT / path).exists()


def _named_modules(text: str) -> set[str]:
  """Dotted names under the project's packages the text names, like
  `python -m scripts.pages` or `studies.core.timing.matmul_peak`."""
  own = "|".join(OWN)
  return set(re.findall(rf"(?<![\w./-])((?:{own})(?:\.[A-Za-z_]\w*)+)(?![\w/<-])", text))


def _top_names(path: pathlib.Path) -> set[str]:
  """The names a module defines or imports at its top level."""
  import ast
  out = set()
  for node in ast.parse(path.read_text(encoding="utf-8")).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      out.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
        out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      out |= {(a.asname or a.name).split(".")[0] for a in node.names}
  if "__getattr__" in out:       # lazy names (PEP 562): the keys of its name tables
    out |= {k.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Dict) for k in node.keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str)}
  return out


def _module_missing(dotted: str) -> str | None:
  """Why `dotted` names nothing (its longest prefix that is a module or package, then
  at most one attribute of it, defined at its top level), or None."""
  parts = dotted.split(".")
  for n in range(len(parts), 0, -1):
    base = ROOT.joinpath(*parts[:n])
    path = (base.with_suffix(".py") if base.with_suffix(".py").is_file() else
            base / "__init__.py" if (base / "__init__.py").is_file() else None)
    if path is None:
      continue
    if n == len(parts):
      return None
    attr = parts[n]
    if (base / f"{attr}.py").is_file() or attr in _top_names(path):
      return None
    return f"{dotted} ({path.relative_to(ROOT)} defines no {attr!r})"
  return f"{dotted} (no module {parts[0]}/{parts[1]}.py)"


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_and_test_path_the_docs_name_exists(page):
  text = page.read_text(encoding="utf-8")
  missing = sorted(p + " (no such file)" for p in _named_paths(text) if _path_missing(p))
  missing += sorted(filter(None, map(_module_missing, _named_modules(text))))
  assert not missing, (f"{page.relative_to(ROOT)} names what the repository does not "
                       "hold: " + "; ".join(missing))


def test_reproductions_names_every_room_module_and_script():
  """docs/reproductions.md's 'Where the code is' names every room of studies/ with its
  modules (studies/__init__.py's MAP) and every file of scripts/."""
  import studies
  text = (ROOT / "docs" / "reproductions.md").read_text(encoding="utf-8")
  section = text.split("## Where the code is", 1)[1].split("\n## ", 1)[0]
  bullets = {m.group(1): m.group(2) for m in
             re.finditer(r"^- `(\w+)/`[,:]?(.*?)(?=^- |\Z)", section, flags=re.M | re.S)}
  for room, mods in studies.MAP.items():
    assert room in bullets, f"docs/reproductions.md does not name studies/{room}/"
    left = [m for m in mods if f"`{m}`" not in bullets[room]]
    assert not left, f"docs/reproductions.md's studies/{room}/ leaves out {left}"
  for p in sorted((ROOT / "scripts").iterdir()):
    if p.suffix in (".py", ".sh", ".txt") and p.name != "__init__.py":
      name = p.stem if p.suffix == ".py" else p.name
      assert (f"`{name}`" in bullets["scripts"] or f"`{p.name}`" in bullets["scripts"]), (
          f"docs/reproductions.md's scripts/ leaves out {p.name}")
