"""House-style gates: ruff (lint and format) over the tree, mypy over the core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        [str(BIN / "ruff"), "check", "."],
        [str(BIN / "ruff"), "format", "--check", "."],
        [str(BIN / "mypy"), "mtcore"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-core"],
)
def test_tool_passes(command):
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} not installed")
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def plugin_imports() -> list[tuple[str, str, str]]:
    """(file, its kind, the kind it imports) for every import of ``mtcore_plugins.<kind>`` in
    ``plugins/``, at any depth of the file (lazy imports count); ``common`` is the shared
    layer, files at the top of ``plugins/`` are kind ``""``."""
    import ast

    found = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        rel = path.relative_to(ROOT / "plugins")
        kind = rel.parts[0] if len(rel.parts) > 1 else ""
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "mtcore_plugins" and len(parts) > 1:
                    found.append((rel.as_posix(), kind, parts[1]))
    return found


def test_plugin_layers_point_one_way():
    """Issue 19 point 3: no plugin kind imports another kind's modules, and the shared layer
    (``plugins/common``) imports no plugin kind: every kind may use it, and the graph has no
    cycle through it."""
    found = plugin_imports()
    assert any(kind == "filters" and target == "common" for _, kind, target in found)
    wrong = sorted(
        {
            f"{file} imports mtcore_plugins.{target}"
            for file, kind, target in found
            if (target != "common" and target != kind) or (kind == "common" and target != "common")
        }
    )
    assert not wrong, "\n".join(wrong)


def test_plugin_modules_import_no_cycle():
    """Issue 19 point 3: no two plugin modules import each other, directly or through others
    (lazy and type-checking imports count: a cycle hidden in a function is still one)."""
    import ast

    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        parts = path.relative_to(ROOT / "plugins").with_suffix("").parts
        module = ".".join(("mtcore_plugins", *parts)).removesuffix(".__init__")
        found = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            cycles.append(" -> ".join([*trail[trail.index(node) :], node]))
            return
        state[node] = 1
        for target in sorted(graph[node]):
            if target in graph:
                visit(target, [*trail, node])
        state[node] = 2

    for module in sorted(graph):
        visit(module, [])
    assert not cycles, "\n".join(cycles)
