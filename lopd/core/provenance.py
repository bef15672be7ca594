"""What a stage's code is: the project source files a module reaches through its imports.

One definition serves two checks: the resume fingerprint (a code change re-trains instead of resuming) and the test
that keeps every DVC stage's `deps` equal to the code the stage imports. The scan is static (every `import` in a
file, also inside functions), so imports done late, for speed, still count.
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from lopd.core import registry
from lopd.core.config import REPO_ROOT, repo_relative

PACKAGES = ("lopd", "baselines", "evaluation", "pipelines")
"""The project's own top-level packages; imports of anything else (torch, the standard library) are not followed."""

LOADED_BY_PATH: dict[str, tuple[str, ...]] = {
    # Files and folders a module loads by path or by a computed name, which no import statement shows.
    "evaluation/agentic/envscaler.py": ("evaluation/agentic/envscaler_worker.py",),  # run as the worker program
    # envs as text, tasks by name
    "evaluation/agentic/envscaler_mini/__init__.py": ("evaluation/agentic/envscaler_mini",),
    "evaluation/coding/taco.py": ("evaluation/coding/data",),  # the built-in training set
}


def _module_file(name: str) -> Path | None:
    """The source file of a project module or package, or None if `name` is not one."""
    if name.split(".")[0] not in PACKAGES:
        return None
    base = REPO_ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@lru_cache(maxsize=None)
def _imports(path: Path) -> tuple[Path, ...]:
    """Project files imported by one file: the modules named, their parent packages, and `from pkg import module`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    this = _package_of(path)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):  # imports under `if TYPE_CHECKING:` never run: drop them before scanning
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                anchor = this.split(".") if is_package else this.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import module`
    found: set[Path] = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            file = _module_file(".".join(parts[:i]))
            if file is not None:
                found.add(file)
    return tuple(sorted(found))


def source_files(modules: Iterable[str]) -> list[Path]:
    """Every project file the given modules reach: their import closure plus what those files load by path."""
    # importing a.b.c runs a/__init__ and a/b/__init__ too
    prefixes = {".".join(m.split(".")[:i]) for m in modules for i in range(1, len(m.split(".")) + 1)}
    todo = [f for f in map(_module_file, sorted(prefixes)) if f is not None]
    seen: set[Path] = set()
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        todo += _imports(file)
        if file == REPO_ROOT / "lopd" / "core" / "registry.py":  # the config imports each section's class by name
            todo += [f for f in map(_module_file, registry.config_modules()) if f is not None]
        for extra in LOADED_BY_PATH.get(file.relative_to(REPO_ROOT).as_posix(), ()):
            target = REPO_ROOT / extra
            seen.update(p for p in ([target] if target.is_file() else target.rglob("*"))
                        if p.is_file() and "__pycache__" not in p.parts)
    return sorted(seen)


def digest(paths: Iterable[Path]) -> str:
    """sha256 over the relative names and contents of files and of every file under folders (sorted, so stable)."""
    files: list[Path] = []
    for path in paths:
        files += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for file in sorted(set(files)):
        name = repo_relative(file)
        h.update(name.encode() + b"\0")
        with file.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()
