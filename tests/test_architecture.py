"""The arrows point one way: pipelines -> methods (baselines, lopd.latent) and evaluation -> lopd.core. The library
(`lopd/`) imports nothing of evaluation/, baselines/ or pipelines/, and no two of its modules import each other,
however indirectly (every import counts: in functions and under TYPE_CHECKING too)."""

import ast
from pathlib import Path

from lopd.core.config import REPO_ROOT

UPPER = ("evaluation", "baselines", "pipelines")


def imports(path: Path) -> set[str]:
    """Every module name an import statement in the file names (`from a import b` names a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def library_graph() -> dict[str, set[str]]:
    """lopd's modules and the lopd modules each imports."""
    modules = {".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (REPO_ROOT / "lopd").rglob("*.py")}
    return {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_library_has_no_import_cycle():
    graph = library_graph()
    assert len(graph) > 30 and cycles(graph) == []


def test_the_library_imports_nothing_above_it():
    upward = {(path.relative_to(REPO_ROOT).as_posix(), name) for path in (REPO_ROOT / "lopd").rglob("*.py")
              for name in imports(path) if name.split(".")[0] in UPPER}
    assert upward == set()
