"""Find the module references a text makes and say whether each resolves (tests/test_module_references.py).

A reference is a dotted name (`pipesim.sim.steps`, `pipesim_executor.rank.worker.main`, `app_pages.parts.state`), a
module run with `-m`, or a path in the checkout (`pipesim/cli/plan.py`). A dotted name resolves when its longest
prefix is a module of the checkout and the rest names something that module defines (read from its source, so
nothing is imported: the executor's modules import torch); a class's member is checked one level down.

The design map (docs/design.md) also names things short, in backticks: `Class.member` (`UnitProfile.spread`) and
a module by its tail (`charts.gantt.MAX_EXACT_BARS`, `lower.crossing_stage`). `short_unresolved` checks those whose
first part is a class or a module tail of the checkout; anything else (`st.cache_data`, a JSON key) is not ours.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("pipesim", "pipesim_executor", "app_pages", "executor")
DOTTED = re.compile(r"(?<![\w./-])((?:pipesim_executor|pipesim|app_pages|executor)(?:\.[A-Za-z_]\w*)+)")
RUN_MODULE = re.compile(r"(?<![\w-])-m\s+([A-Za-z_][\w.]*)")
PATH = re.compile(
    r"(?<![\w./-])((?:pipesim_executor|pipesim|app_pages|executor|tests|docs|bench|scripts|examples)/[\w/.-]*\w)"
)


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").exists() else None


@cache
def _defined(path: Path) -> dict[str, ast.AST | str | None]:
    """The names a module defines at its top (functions, classes, assignments, imports, also under `if`); a
    package's `__init__` adds its lazy exports (`pipesim._API`: name -> the module defining it) and the other
    identifiers it spells as strings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, ast.AST | str | None] = {}
    for node in tree.body:
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else (node,):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[sub.name] = sub
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                for target in targets:
                    names.update({n.id: sub for n in ast.walk(target) if isinstance(n, ast.Name)})
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names.update({(a.asname or a.name).split(".")[0]: sub for a in sub.names})
    if path.name == "__init__.py":
        for n in ast.walk(tree):
            if isinstance(n, ast.Dict):
                for key, value in zip(n.keys, n.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                        if isinstance(value.value, str) and value.value.startswith(PROJECT):
                            names[str(key.value)] = value.value
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
                names.setdefault(n.value, None)
    return names


def _members(node: ast.ClassDef) -> set[str]:
    found = set()
    for sub in node.body:
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(sub.name)
        elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
            found.add(sub.target.id)
        elif isinstance(sub, ast.Assign):
            found.update(t.id for t in sub.targets if isinstance(t, ast.Name))
    return found


def dotted_resolves(name: str) -> bool:
    parts = name.split(".")
    if parts[-1].startswith("__") and parts[-1].endswith("__"):  # pipesim.__file__, pipesim.__all__
        parts = parts[:-1]
    for k in range(len(parts), 0, -1):
        path = module_file(parts[:k])
        if path is None:
            continue
        rest = parts[k:]
        if not rest:
            return True
        names = _defined(path)
        if rest[0] not in names:
            return False
        node = names[rest[0]]
        if isinstance(node, str):  # a lazy export: resolved in the module that defines it
            return dotted_resolves(".".join([node, *rest]))
        if len(rest) == 1 or isinstance(node, (ast.Import, ast.ImportFrom)):  # past an import: not followed
            return True
        return isinstance(node, ast.ClassDef) and rest[1] in _members(node)  # a member of a function: not a name
    return False


def module_resolves(name: str) -> bool:
    """A module `python -m` can run: the checkout's own, or one installed (pytest, torch.distributed.run)."""
    parts = name.split(".")
    if parts[0] in PROJECT:
        return module_file(parts) is not None
    try:
        spec = importlib.util.find_spec(parts[0])  # the top package only: importing torch to find a file is slow
    except (ImportError, ValueError):
        return False
    if spec is None or len(parts) == 1:
        return spec is not None
    for location in spec.submodule_search_locations or ():
        base = Path(location).joinpath(*parts[1:])
        if (base / "__init__.py").exists() or base.with_suffix(".py").exists():
            return True
    return False


def path_resolves(text: str) -> bool:
    return (ROOT / text).exists()


def references(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, reference) of every reference in `text`; a quoted JSON format name ("pipesim.plan", on a
    line about formats) is a name, not a module."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in DOTTED.finditer(line):
            start, end = match.span(1)
            quoted = line[start - 1 : start] == '"' and line[end : end + 1] == '"'
            if not (quoted and "format" in line.lower()):
                found.append((number, "dotted", match.group(1)))
        found += [(number, "module", m.group(1)) for m in RUN_MODULE.finditer(line)]
        found += [(number, "path", m.group(1).rstrip(".")) for m in PATH.finditer(line)]
    return found


RESOLVERS = {"dotted": dotted_resolves, "module": module_resolves, "path": path_resolves}


def unresolved(text: str) -> list[tuple[int, str, str]]:
    return [(n, kind, ref) for n, kind, ref in references(text) if not RESOLVERS[kind](ref)]


SHORT = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
FILE_SUFFIXES = {"py", "json", "toml", "md", "csv", "txt", "html", "yaml", "cfg", "ipynb"}


@cache
def _index() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[ast.ClassDef, ...]]]:
    """Every module of the checkout by each of its tails (`gantt`, `charts.gantt`, ...), and every class by name."""
    tails: dict[str, list[str]] = {}
    classes: dict[str, list[ast.ClassDef]] = {}
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            for k in range(1, len(parts)):
                tails.setdefault(".".join(parts[k:]), []).append(".".join(parts))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append(node)
    return {k: tuple(v) for k, v in tails.items()}, {k: tuple(v) for k, v in classes.items()}


def _class_has(name: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether a class of the checkout named `name`, or a class it derives from by name, defines `member`."""
    for node in _index()[1].get(name, ()):
        if member in _members(node):
            return True
        for base in node.bases:
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if base_name and base_name not in seen and _class_has(base_name, member, seen | {name}):
                return True
    return False


def short_resolves(ref: str) -> bool | None:
    """Whether a short reference resolves; None when its first part is neither a class nor a module of ours."""
    parts = ref.split(".")
    tails, classes = _index()
    if parts[0] in classes:
        return _class_has(parts[0], parts[1])
    for k in range(len(parts), 0, -1):
        modules = tails.get(".".join(parts[:k]))
        if modules:
            return k == len(parts) or any(dotted_resolves(".".join([m, *parts[k:]])) for m in modules)
    return None


def short_unresolved(text: str) -> list[tuple[int, str]]:
    """(line, reference) of every short reference in backticks that names a class or module of ours wrongly."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for ref in SHORT.findall(line):
            if ref.split(".")[0] in PROJECT or ref.rsplit(".", 1)[-1] in FILE_SUFFIXES:
                continue  # a full name (`unresolved` checks it) or a file name
            if short_resolves(ref) is False:
                found.append((number, ref))
    return found
