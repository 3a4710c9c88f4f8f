"""Fixtures every test folder shares (a registry, a recipe writer, real En-Ja pairs) and the
tiers' scheduling: one pytest-xdist group per test file, the longest tests first. Helpers to
import are in tests/support/."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtcore.contracts.registry import Registry, load_registry
from mtcore.contracts.resources import SLOTS_ENV, cores
from mtcore.exec.process import thread_defaults
from tests.support import ROOT
from tests.support.data import real_slice

thread_defaults()  # as the CLI does: OpenMP waits passively in the processes tests start

# mtdata's index (about 80 MB of SQLite, 30 s to build) is built once for the whole suite, not
# once per test cache (tests set $MTCORE_CACHE to their own folders).
os.environ.setdefault("MTCORE_INDEX_DIR", str(ROOT / "work" / "index"))

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    # Each pytest-xdist worker runs recipes of its own: each gets its share of the cores, as the
    # sequential runner had (2 workers on 2 cores: one step at a time a run), not all of them.
    os.environ.setdefault(SLOTS_ENV, f"cpu={max(1, cores() // _WORKERS)}")


@pytest.fixture
def uncapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``MTCORE_SLOTS`` share: for tests of steps side by side on a scheduler."""
    monkeypatch.delenv(SLOTS_ENV, raising=False)


@pytest.fixture(scope="session", autouse=True)
def smoke_workdirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where the smoke runs keep their workdirs for the kill sweeps run after them in the same
    worker (tests/e2e/test_recipes.py's ``KEEP_SMOKE``), unless the environment names one."""
    os.environ.setdefault("MTCORE_TEST_SMOKE_WORKDIRS", str(tmp_path_factory.mktemp("smoke")))


@pytest.fixture(scope="session")
def registry() -> Registry:
    return load_registry()


@pytest.fixture(scope="session")
def micro_setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tests/plugins/steps/test_decoding.py's corpora, SentencePiece model, en-ja data and
    5-update micro model, built once a worker for the files that start from them (one xdist
    group: ``SHARED_GROUPS``). Read-only: a test copies the dict before adding to it."""
    from tests.plugins.steps.test_decoding import build_setup

    return build_setup(tmp_path_factory.mktemp("micro"))


@pytest.fixture
def write_recipe(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    def write(document: dict[str, Any], name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(
            yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
        return path

    return write


@pytest.fixture
def enja_files(tmp_path: Path) -> dict[str, Path]:
    """400 real En-Ja training pairs."""
    return real_slice(tmp_path / "data", "train", 400)


TESTS = Path(__file__).resolve().parent

SPREAD = {
    "e2e/test_recipes.py",
    "e2e/test_kill_sweep.py",
    "e2e/test_e2e.py",
    "e2e/test_rehearsal.py",
    "plugins/models/test_model_plugins.py",
    "e2e/test_cluster_smoke.py",
}
"""Test files (paths under tests/) whose tests are independent (whole-recipe runs, or trainings
whose module fixtures take a second or two to build): under ``--dist loadgroup`` (Makefile)
their tests spread over the workers; every other file is one group, so its module fixtures
(trained models) are built once."""

SHARED_GROUPS = {
    "tooling/test_slurm_cluster.py": "slurm",
    "plugins/schedulers/test_slurm_scheduler.py": "slurm",
    "plugins/steps/test_decoding.py": "micro",
    "plugins/steps/test_select_models.py": "micro",
    "plugins/steps/test_ctranslate2.py": "micro",
    "plugins/executors/test_ray_executor.py": "micro",
}
"""Files that share one group, so that one worker's session fixture serves them all: the
one-node Slurm cluster (``slurm_cluster``) and the micro model (``micro_setup``), each made once
instead of once a file."""

SMOKE_RUN = re.compile(
    r"^test_(smoke_profile_runs_end_to_end|kill_sweep_resumes_to_the_uninterrupted_outputs)"
    r"\[(\w+)\]$"
)
"""A recipe's smoke run and its kill sweep are one group, the smoke run first: the sweep then
compares its killed runs with that run's workdir (``$MTCORE_TEST_SMOKE_WORKDIRS``) instead of
running the smoke profile through once more."""

LONGEST = {
    "test_rehearsal_paper_graph_runs_end_to_end[xiaomi]": 513,
    "test_default_profile_runs_end_to_end[hwtsc]": 406,
    "test_default_profile_runs_end_to_end[xiaomi]": 379,
    "test_kill_sweep_resumes_to_the_uninterrupted_outputs[hwtsc]": 297,
    "test_rehearsal_paper_graph_runs_end_to_end[nt5]": 409,
    "test_default_profile_runs_end_to_end[yishu]": 415,
    "test_kill_sweep_resumes_to_the_uninterrupted_outputs[nt5]": 289,
    "test_kill_sweep_resumes_to_the_uninterrupted_outputs[xiaomi]": 225,
    "test_kill_sweep_resumes_to_the_uninterrupted_outputs[yishu]": 180,
    "test_smoke_profile_runs_end_to_end[nt5]": 196,
    "test_smoke_profile_runs_end_to_end[hwtsc]": 155,
    "test_rehearsal_paper_graph_runs_end_to_end[hwtsc]": 430,
    "test_rehearsal_paper_graph_runs_end_to_end[yishu]": 173,
    "test_default_profile_runs_end_to_end[nt5]": 208,
    "test_smoke_profile_runs_end_to_end[xiaomi]": 102,
    "test_smoke_profile_runs_end_to_end[yishu]": 92,
    "test_the_smoke_profile_on_slurm_gives_the_local_outputs": 300,
    "test_the_smoke_profile_on_two_ray_nodes_gives_the_local_outputs": 240,
}
"""Seconds the longest tests took in CI (2 workers; the kill sweeps reusing the smoke runs).
Only their order uses them: the longest groups start first (``--no-loadscope-reorder``), so
the two workers end together instead of one running a long test alone at the end."""


def group(item: pytest.Item) -> str | None:
    """The item's xdist group: its recipe's smoke group, its file's shared group, its file (a
    path under tests/, so files of the same name in two folders are two groups), or None (a
    file of independent tests, spread)."""
    found = SMOKE_RUN.match(item.name)
    if found and item.get_closest_marker("slow"):
        return f"smoke-{found[2]}"
    name = item.path.resolve().relative_to(TESTS).as_posix()
    if name in SPREAD:
        return None
    return SHARED_GROUPS.get(name, name)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {item.nodeid: group(item) for item in items}
    seconds: dict[str, int] = {}
    for item in items:
        key = groups[item.nodeid] or item.nodeid
        seconds[key] = seconds.get(key, 0) + LONGEST.get(item.name, 0)
        if groups[item.nodeid] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))

    def order(item: pytest.Item) -> tuple[int, bool]:  # a smoke run before its kill sweep
        return -seconds[groups[item.nodeid] or item.nodeid], "kill_sweep" in item.name

    items.sort(key=order)  # stable: the rest keep their order
