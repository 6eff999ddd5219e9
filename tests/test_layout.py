"""The code's shape: folders by concern, imports pointing down the flow, no cycles (docs/design.md).

Read from the source with `ast` (nothing is imported), lazy imports inside functions included: a lazy import
that points up the flow is a cycle waiting to happen, only hidden from the interpreter.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# pipesim's folders from the bottom of the flow to its top: each may import only from those before it (and
# from itself). `pipesim` alone is the package's public face and sits on top (it may re-export anything).
PIPESIM_ORDER = [
    "pipesim._perf",
    "pipesim._face",
    "pipesim.numbers",
    "pipesim.url_query",
    "pipesim.programs",
    "pipesim.progress_bar",
    "pipesim.flags",
    "pipesim.form_fields",
    "pipesim.ir",
    "pipesim.limits",
    "pipesim.units",
    "pipesim.records",
    "pipesim.schedules",
    "pipesim.cost",
    "pipesim.semantics",
    "pipesim.sim",
    "pipesim.synth",
    "pipesim.io",
    "pipesim.analysis",
    "pipesim.plan",
    "pipesim.charts",
    "pipesim.cli",
    "pipesim.api",
]
EXECUTOR_SHARED = {
    "pipesim_executor.config",
    "pipesim_executor.model_config",
    "pipesim_executor.devices",
    "pipesim_executor.custom_model",
    "pipesim_executor.progress",
    "pipesim_executor.processes",
    "pipesim_executor.run_files",
    "pipesim_executor.shipped_examples",
}


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = {**_modules("pipesim"), **_modules("pipesim_executor")}


def _typing_only(tree: ast.Module) -> set[int]:
    """The import nodes under `if TYPE_CHECKING:`: annotations only, never run."""
    guarded = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            guarded.update(id(inner) for inner in ast.walk(node))
    return guarded


def _imports(path: Path, runtime_only: bool = False) -> list[tuple[str, bool]]:
    """(imported module, at module level) for every import of a pipesim or executor module in `path`
    (with `runtime_only`, leaving out those under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    skip = _typing_only(tree) if runtime_only else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name in MODULES:
                found.append((name, id(node) in top))
    return found


def _layer(module: str) -> int | None:
    best = None
    for index, prefix in enumerate(PIPESIM_ORDER):
        if module == prefix or module.startswith(prefix + "."):
            best = index
    return best


def _edges() -> dict[str, set[str]]:
    """Imports between modules, lazy ones and those made for type checking included (a TYPE_CHECKING import is a
    dependency the interpreter does not see: a circle through one is still one concern split in two); a package's
    own __init__ is not an edge."""
    return {
        module: {name for name, _ in _imports(path) if name != module and not module.startswith(name + ".")}
        for module, path in MODULES.items()
    }


def test_pipesim_imports_point_down_the_flow() -> None:
    upward = []
    for module, path in MODULES.items():
        own = _layer(module)
        if own is None:
            continue
        for name, _ in _imports(path):
            other = _layer(name)
            if other is not None and other > own:
                upward.append(f"{module} -> {name}")
    assert not upward, "imports pointing up the flow (docs/design.md's order): " + ", ".join(upward)


def test_executor_sides_keep_their_boundaries() -> None:
    wrong = []
    for module, path in MODULES.items():
        if not module.startswith("pipesim_executor"):
            continue
        for name, at_top in _imports(path):
            if module.startswith("pipesim_executor.rank") and name.startswith("pipesim_executor.host"):
                wrong.append(f"{module} -> {name} (the rank side never imports the host side)")
            if module in EXECUTOR_SHARED and name.startswith(("pipesim_executor.host", "pipesim_executor.rank")):
                wrong.append(f"{module} -> {name} (shared modules import neither side)")
            if module.startswith("pipesim_executor.host") and name.startswith("pipesim_executor.rank") and at_top:
                wrong.append(f"{module} -> {name} (the host imports rank code only lazily: it must not load torch)")
            if name.startswith("pipesim.charts"):
                wrong.append(f"{module} -> {name} (the executor never draws)")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles_even_lazy() -> None:
    edges = _edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The layer rule is not vacuous: an import of the CLI from the records would be caught."""
    assert _layer("pipesim.records") < _layer("pipesim.cli.main")
    assert _layer("pipesim.sim.metrics") > _layer("pipesim.semantics.lower")
    assert _layer("pipesim.ir") is not None and _layer("pipesim_executor.config") is None


def test_the_cycle_check_counts_imports_made_for_type_checking(tmp_path: Path) -> None:
    """A circle through `if TYPE_CHECKING:` is still a circle (launch and phase once closed one that way)."""
    module = tmp_path / "typed.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pipesim_executor.host.launch import RunHandle\n"
    )
    assert ("pipesim_executor.host.launch", True) not in _imports(module, runtime_only=True)
    assert "pipesim_executor.host.launch" in {name for name, _ in _imports(module)}
    assert "pipesim_executor.host.launch" not in _edges()["pipesim_executor.host.phase"]


# A tracker citation ("issue 29", "issues 18 and 19" anywhere, a bare "#12" in a comment or docstring) says which
# ticket asked, not why the code is so: history lives in git. An upstream project's tracker stays citable as
# `repo#N` or `owner/repo#N` (a fact about torch, say), and hex colours (#555555) are not numbers of anything.
ISSUE_WORDS = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
BARE_TICKET = re.compile(r"(?<![\w/&#])#\d{1,5}(?![\w])")
CODE_ROOTS = ("pipesim", "pipesim_executor", "executor", "app_pages", "app.py")
# Files another change is reshaping; each still cites a ticket and leaves this list when that change lands.
CITES_TODAY: set[str] = set()


def _prose(source: str) -> list[tuple[int, str, bool]]:
    """(line, text, is prose) of every comment and string literal in `source`: comments and triple-quoted strings
    (docstrings) are prose, where a bare "#12" is a ticket; in a short string it may be a colour ("#555")."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string[1:], True))
        elif token.type == tokenize.STRING:
            quotes = token.string.lstrip("rbfuRBFU")[:3]
            found.append((token.start[0], token.string, quotes in ('"""', "'''")))
    return found


def _ticket_citations(source: str) -> list[str]:
    cited = []
    for line, text, prose in _prose(source):
        for pattern in (ISSUE_WORDS, BARE_TICKET) if prose else (ISSUE_WORDS,):
            cited += [f"line {line}: {match.group(0)!r}" for match in pattern.finditer(text)]
    return cited


def _code_files() -> list[Path]:
    files = []
    for root in CODE_ROOTS:
        path = ROOT / root
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_no_module_cites_a_ticket() -> None:
    cited, still = [], []
    for path in _code_files():
        name = path.relative_to(ROOT).as_posix()
        found = _ticket_citations(path.read_text())
        if name in CITES_TODAY:
            still += [name] if found else []
            continue
        cited += [f"{name} {where}" for where in found]
    assert not cited, "ticket numbers in the code (say why instead; history lives in git):\n" + "\n".join(cited)
    assert still == sorted(CITES_TODAY), (
        f"no longer cite a ticket, drop from CITES_TODAY: {set(CITES_TODAY) - set(still)}"
    )


def test_ticket_check_tells_a_citation_from_a_colour() -> None:
    cited = _ticket_citations(
        '"""Priced so (issue 29), see #7."""\nx = 1  # see #12\ny = "Issues 3"  # the fix of #4, in the tracker\n'
    )
    assert [c.split(": ", 1)[1] for c in cited] == ["'issue 29'", "'#7'", "'#12'", "'Issues 3'", "'#4'"]
    assert not _ticket_citations('c = "#555555"  # torch\'s pytorch/pytorch#1234 and torchtitan#773\nd = "#000"\n')


# A folder whose files share a prefix wants to be a package (docs/design.md): at five modules named `run_*` (the
# module `run` itself counts), the prefix stands in for a subfolder. Any new pile fails here; give it its folder.
PILE = 5
PILED_ROOTS = ("pipesim", "pipesim_executor", "app_pages")


def _piles(root: Path) -> dict[str, list[str]]:
    """'folder: prefix' -> the modules of one folder under `root` that share the name up to their first `_`, for
    each prefix held by PILE modules or more."""
    piles = {}
    for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        by_prefix: dict[str, list[str]] = {}
        for path in sorted(folder.glob("*.py")):
            if path.stem != "__init__":
                by_prefix.setdefault(path.stem.split("_", 1)[0], []).append(path.stem)
        for prefix, names in by_prefix.items():
            if len(names) >= PILE:
                piles[f"{folder.relative_to(root.parent).as_posix()}: {prefix}_*"] = names
    return piles


def test_no_folder_holds_a_pile_of_one_prefix() -> None:
    piles = {where: names for root in PILED_ROOTS for where, names in _piles(ROOT / root).items()}
    assert not piles, "modules sharing a prefix where a subpackage belongs:\n" + "\n".join(
        f"{where} ({', '.join(names)})" for where, names in piles.items()
    )


def test_pile_check_counts_by_the_first_underscore(tmp_path: Path) -> None:
    folder = tmp_path / "pkg" / "parts"
    folder.mkdir(parents=True)
    for name in ("run", "run_form", "run_live", "run_result_table", "runs", "live_runs"):
        (folder / f"{name}.py").write_text("")
    assert _piles(tmp_path / "pkg") == {}  # `runs` and `live_runs` are other prefixes: four `run` modules
    (folder / "run_history.py").write_text("")
    assert _piles(tmp_path / "pkg") == {
        "pkg/parts: run_*": ["run", "run_form", "run_history", "run_live", "run_result_table"]
    }
