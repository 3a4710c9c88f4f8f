"""House-style gates: ruff (lint and format) over the tree, mypy over the core, the import
contracts of pyproject.toml (import-linter), the layouts of the core and of the plugins."""

from __future__ import annotations

import importlib
import os
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


def lint_imports(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None):
    """``lint-imports`` (the one installed next to this interpreter, run by it: a copied
    virtualenv's script may name another interpreter) with ``args``, without its cache."""
    script = BIN / "lint-imports"
    if not script.exists():
        pytest.skip(f"{script} not installed")
    command = [sys.executable, str(script), *args, "--no-cache"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


CONTRACTS = [
    "The core's folders are layers (lowest last)",
    "The core imports no built-in plugin",
    "plugin kinds over common",
    "common's folders",
]


def test_import_contracts_hold():
    """Issue 19 point 3, issue 68 items 1 and 3: the import-linter contracts of pyproject.toml
    hold. The core's folders are layers, each importing only those below it (lazy and
    type-checking imports counted), and the core imports no built-in plugin;
    "plugin kinds over common": every kind may import ``mtcore_plugins.common``, which imports
    no kind, and no kind imports another kind's modules; "common's folders": each folder of
    common imports only the folders below it, the ones sharing a layer none of each other."""
    done = lint_imports("--config", "pyproject.toml")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for name in CONTRACTS:
        assert f"{name} KEPT" in output, output
    assert f"{len(CONTRACTS)} kept, 0 broken" in output, output


LAYERED = {
    "high/__init__.py": "",
    "high/a.py": "from layered.low import b\n",
    "high/c.py": "",
    "low/__init__.py": "",
    "low/b.py": "",
}


@pytest.mark.parametrize(
    ("extra", "broken"),
    [
        ({}, None),
        ({"low/up.py": "import layered.high.c\n"}, "layered.low.up -> layered.high.c"),
        (
            {"high/d.py": "def f():\n    from layered.side import e\n"},
            "layered.high.d -> layered.side.e",
        ),
    ],
    ids=["kept", "upward-import", "sibling-import"],
)
def test_import_contracts_can_fail(tmp_path, extra, broken):
    """The contracts above can fail: on a package of its own (``high | side`` over ``low``),
    lint-imports keeps the contract, then breaks it for an import from the lower layer up and
    for a lazy import between two independent siblings, naming the import."""
    package = tmp_path / "layered"
    files = {**LAYERED, "side/__init__.py": "", "side/e.py": "", **extra}
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    (tmp_path / "contracts.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["layered"]\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "layers of the sample"\ntype = "layers"\ncontainers = ["layered"]\n'
        'layers = ["high | side", "low"]\nexhaustive = true\n',
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = lint_imports("--config", "contracts.toml", cwd=tmp_path, env=env)
    output = done.stdout + done.stderr
    if broken is None:
        assert done.returncode == 0, output
        assert "layers of the sample KEPT" in output, output
    else:
        assert done.returncode == 1, output
        assert "layers of the sample BROKEN" in output, output
        assert broken in output, output


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """Each module of ``folder`` (the package ``package``) and every name it imports, at any
    depth of the file: lazy and type-checking imports count, since a cycle hidden in a function
    is still one. ``from a import b`` counts ``a`` and ``a.b`` (``b`` may be a module)."""
    import ast

    graph: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        module = ".".join((package, *parts)).removesuffix(".__init__")
        found = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    found: list[str] = []

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            found.append(" -> ".join([*trail[trail.index(node) :], node]))
            return
        state[node] = 1
        for target in sorted(graph[node]):
            if target in graph and target != node:
                visit(target, [*trail, node])
        state[node] = 2

    for module in sorted(graph):
        visit(module, [])
    return found


@pytest.mark.parametrize("package", ["mtcore_plugins", "mtcore"])
def test_modules_import_no_cycle(package):
    """Issue 19 point 3, issue 49 point 5: no two modules of the plugins or of the core import
    each other, directly or through others. The public API (``mtcore.api`` and
    ``mtcore.api.engine``) is left out of the core's graph: it names every module it
    re-exports, and no core module imports it."""
    folder = ROOT / ("plugins" if package == "mtcore_plugins" else "mtcore")
    graph = import_graph(folder, package)
    assert len(graph) > 20
    if package == "mtcore":
        api = {m for m in graph if m == "mtcore.api" or m.startswith("mtcore.api.")}
        assert api == {"mtcore.api", "mtcore.api.engine"}, api
        users = sorted(m for m, found in graph.items() if found & api and m not in api)
        assert not users, f"core modules import the public API: {users}"
        for module in api:
            graph.pop(module)
    found = cycles(graph)
    assert not found, "\n".join(found)


def test_cycle_finder_finds_a_cycle():
    """The check above can fail: a two-module and a three-module cycle are both found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "x"}}
    assert cycles(graph) == ["a -> b -> a", "c -> d -> e -> c"]


def test_plugins_import_only_the_public_api():
    """Issue 49 point 1, issue 68 item 2: the built-in plugins import ``mtcore.api`` and its
    provisional ``mtcore.api.engine``, the example packages (a third party's) ``mtcore.api``
    alone, and nothing else of ``mtcore`` (any depth of the file), so the core can move
    without breaking a plugin package."""
    import ast

    allowed = {"plugins": {"mtcore.api", "mtcore.api.engine"}, "examples": {"mtcore.api"}}
    folders = [ROOT / "plugins", *sorted((ROOT / "examples").iterdir())]
    wrong, seen = [], 0
    for folder in folders:
        modules = allowed[folder.relative_to(ROOT).parts[0]]
        for path in sorted(folder.rglob("*.py")):
            if "build" in path.relative_to(folder).parts:
                continue
            seen += 1
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                    if any(alias.name == "engine" for alias in node.names):
                        names.append(f"{node.module}.engine")  # from mtcore.api import engine
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                for name in names:
                    if name.split(".")[0] == "mtcore" and name not in modules:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert seen > 100
    assert not wrong, "use " + " or ".join(sorted(modules)) + " instead:\n" + "\n".join(wrong)


def test_plugins_import_each_name_from_its_tier():
    """Issue 68 item 2: a built-in plugin imports a stable name from ``mtcore.api`` and a
    provisional one from ``mtcore.api.engine``, never through the deprecated re-export."""
    import ast

    import mtcore.api as api
    import mtcore.api.engine as engine

    tiers = {"mtcore.api": set(api.__all__), "mtcore.api.engine": set(engine.__all__)}
    wrong, seen = [], 0
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in tiers:
                seen += 1
                wrong += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {alias.name} from {node.module}"
                    for alias in node.names
                    if alias.name not in tiers[node.module]
                ]
    assert seen > 100
    assert not wrong, "\n".join(wrong)


def api_where(path: Path) -> dict[str, str]:
    """The literal ``_WHERE`` of an API module, checked against its ``TYPE_CHECKING`` block:
    the same names, each re-exported as itself from the same module."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    where, checked = None, {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "_WHERE" for t in targets):
                assert isinstance(node.value, ast.Dict), "_WHERE is a literal dict"
                where = ast.literal_eval(node.value)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                for alias in stmt.names:
                    assert alias.asname == alias.name, f"{alias.name}: re-export as itself"
                    checked[alias.name] = stmt.module
        if isinstance(node, ast.Import | ast.ImportFrom):
            assert "ast" not in [a.name for a in node.names], f"{path.name} parses no source"
    assert where is not None, f"{path.name} has no _WHERE"
    assert where == checked, {n: (where.get(n), checked.get(n)) for n in where.keys() ^ checked}
    return where


def test_public_api_names_resolve():
    """Every name of ``mtcore.api.__all__`` and ``mtcore.api.engine.__all__`` is defined where
    the module says it is, and an unknown name is an error that points at ``__all__``."""
    import mtcore.api as api
    import mtcore.api.engine as engine

    assert "Filter" in api.__all__ and "Step" in api.__all__
    assert "map_shards" in api.__all__ and "process_shard" in engine.__all__
    for module in (api, engine):
        for name in module.__all__:
            assert getattr(module, name) is getattr(
                importlib.import_module(module._WHERE[name]), name
            ), name
        with pytest.raises(AttributeError, match="__all__"):
            module.NoSuchName  # noqa: B018
        with pytest.raises(ImportError, match="NoSuchName"):
            exec(f"from {module.__name__} import NoSuchName", {})
    assert dir(api) == api.__all__ and dir(engine) == engine.__all__


def test_public_api_lists_agree():
    """Issue 68 item 2: ``mtcore.api`` (the stable names, at most 40) and ``mtcore.api.engine``
    (the provisional ones) each keep each name's module in a literal ``_WHERE`` (read at run
    time, no parsing of its own source) and re-export the same names from the same modules in
    their ``TYPE_CHECKING`` block (what type checkers read): the two lists agree, and no name
    is in both tiers."""
    import mtcore.api as api
    import mtcore.api.engine as engine

    stable = api_where(ROOT / "mtcore" / "api" / "__init__.py")
    provisional = api_where(ROOT / "mtcore" / "api" / "engine.py")
    assert stable == api._WHERE and provisional == engine._WHERE
    assert 30 <= len(stable) <= 40, len(stable)
    assert len(provisional) > 50
    assert not stable.keys() & provisional.keys(), stable.keys() & provisional.keys()
    assert api.__all__ == sorted(stable) and engine.__all__ == sorted(provisional)


def test_public_api_is_documented():
    """Issue 68 item 2: each stable name has its row in docs/plugins.md's table of the public
    API (``| `name` | what it is |``), and the table names no other."""
    import re

    import mtcore.api as api

    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    section = text.split("## The public API", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| \S.*\|$", section, flags=re.MULTILINE)
    assert sorted(rows) == api.__all__, set(rows) ^ set(api.__all__)


def test_public_api_loads_lazily():
    """Importing ``mtcore.api`` and ``mtcore.api.engine``, and a contract of the API, imports
    neither NumPy nor numba nor the core's text kernels (PEP 562 loading)."""
    code = (
        "import sys, mtcore.api, mtcore.api.engine\n"
        "from mtcore.api import Filter, PluginConfig, Step\n"
        "heavy = ['numpy', 'numba', 'mtcore.text.kernels', 'mtcore.run.jobs']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(
    ("statement", "fails"),
    [
        ("from mtcore.api import code_table", True),
        ("from mtcore.api import run_job", True),
        ("import mtcore.api as api; api.tail", True),
        ("from mtcore.api import Filter, map_shards", False),
        ("from mtcore.api.engine import code_table, run_job", False),
    ],
)
def test_engine_names_through_the_api_warn(statement, fails):
    """Issue 68 item 2: for one release ``mtcore.api`` still gives a name it moved to
    ``mtcore.api.engine``, with a ``DeprecationWarning`` that names the new module (an error
    under ``-W error::DeprecationWarning``); a stable name, or the engine's own, warns not."""
    command = [sys.executable, "-W", "error::DeprecationWarning", "-c", statement]
    done = subprocess.run(command, capture_output=True, text=True)
    if fails:
        assert done.returncode == 1, done.stderr
        assert "DeprecationWarning" in done.stderr and "mtcore.api.engine" in done.stderr
    else:
        assert done.returncode == 0, done.stderr


def test_import_contracts_catch_a_wrong_import(tmp_path):
    """The contracts can fail: on a copy of the core with an upward import planted in a
    function of ``contracts`` and an import of a built-in plugin in ``data``, both break and
    the report names the planted lines."""
    import os
    import shutil

    shutil.copytree(ROOT / "mtcore", tmp_path / "mtcore", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    plants = {
        "contracts/errors.py": "from mtcore.report import page",
        "data/read.py": "import mtcore_plugins.steps",
    }
    for name, line in plants.items():
        with open(tmp_path / "mtcore" / name, "a", encoding="utf-8") as handle:
            handle.write(f"\n\ndef _planted() -> None:\n    {line}  # noqa: F401\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = lint_imports("--config", "pyproject.toml", cwd=tmp_path, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    for name in CONTRACTS[:2]:  # the plugins' contracts break too: common imports mtcore.data
        assert f"{name} BROKEN" in out, out
    assert "mtcore.contracts.errors -> mtcore.report.page" in out, out
    assert "mtcore.data.read -> mtcore_plugins.steps" in out, out


def test_core_is_laid_out_by_concern():
    """Issue 49 point 5: ``mtcore/`` holds folders by concern (the public API is ``api/``)
    and, flat, only the package's ``__init__``; each folder says what it holds in its ``__init__``
    docstring."""
    import ast

    core = ROOT / "mtcore"
    flat = sorted(p.name for p in core.glob("*.py"))
    assert flat == ["__init__.py"], flat
    folders = sorted(p for p in core.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert {p.name for p in folders} >= {"contracts", "recipe", "run", "exec", "data", "report"}
    for folder in folders:
        init = folder / "__init__.py"
        assert init.exists(), folder
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), init


def test_common_is_laid_out_by_concern():
    """Issue 68 item 1: ``plugins/common`` holds folders by concern and, flat, only its
    ``__init__``, whose docstring names every folder; each folder says what it holds in its
    ``__init__`` docstring (their order is the "common's folders" contract)."""
    import ast

    common = ROOT / "plugins" / "common"
    assert sorted(p.name for p in common.glob("*.py")) == ["__init__.py"]
    folders = sorted(p for p in common.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert len(folders) > 5
    summary = ast.get_docstring(ast.parse((common / "__init__.py").read_text(encoding="utf-8")))
    for folder in folders:
        init = folder / "__init__.py"
        assert init.exists(), folder
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), init
        assert f"``{folder.name}``" in (summary or ""), f"{folder.name} not in common's docstring"


def test_no_step_imports_another_step():
    """Issue 49 point 3, issue 68 item 1: a step's module holds that step; what several steps
    share (the score table, the training log, the decoding settings, n-best files) lives in a
    private ``plugins/steps/_*.py`` module, what other kinds use too in
    ``mtcore_plugins.common``'s folder for its concern, and the processor chain engine in the
    core (``mtcore.api.engine.process_shard``, ``rewrite_corpus``), so no step (nor private helper)
    imports a step's module."""
    import ast

    def step_module(name: str) -> bool:
        """A step's module, or the package: ``mtcore_plugins.steps._x`` is a private helper."""
        parts = name.split(".")
        helper = len(parts) > 2 and parts[2].startswith("_")
        return parts[:2] == ["mtcore_plugins", "steps"] and not helper

    steps = ROOT / "plugins" / "steps"
    wrong, defining, private = [], 0, 0
    for path in sorted(steps.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module == "mtcore_plugins.steps":
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            wrong += [
                f"{path.name}:{node.lineno} imports {name}" for name in names if step_module(name)
            ]
        if path.name.startswith("_"):
            private += 1
            continue
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        if not any(
            isinstance(base, ast.Subscript) and ast.unparse(base.value) == "Step"
            for cls in classes
            for base in cls.bases
        ):
            wrong.append(
                f"{path.name} defines no step: what steps share goes to a private "
                "plugins/steps/_*.py module, what other kinds use too to the folder of "
                "mtcore_plugins.common for its concern (plugins/common/__init__.py lists them)"
            )
        defining += 1
    assert defining > 20 and private > 10
    assert not wrong, "\n".join(wrong)


def too_long(path: Path, text: str, file_lines: int = 500, function_lines: int = 80) -> list[str]:
    """Where ``text`` (the file ``path``) is over ``file_lines`` lines, and each function of it
    over ``function_lines``."""
    import ast

    found = []
    if text.count("\n") > file_lines:
        found.append(f"{path}: {text.count(chr(10))} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > function_lines:
                found.append(f"{path}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_file_over_500_lines_nor_function_over_80():
    """Issue 68: a file of the core or of the plugins is at most 500 lines and a function at
    most 80, so each reads in one sitting; the check finds a long function and a long file."""
    found = []
    for top in ("mtcore", "plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found += too_long(path.relative_to(ROOT), path.read_text(encoding="utf-8"))
    assert not found, "\n".join(found)
    body = "".join(f"    x = {i}\n" for i in range(80))
    assert too_long(Path("f.py"), f"def f():\n{body}") == ["f.py:1 f: 81 lines"]
    assert too_long(Path("f.py"), "x = 1\n" * 501) == ["f.py: 501 lines"]
