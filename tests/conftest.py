"""Shared fixtures: real data from ../shared/data, a registry, a recipe writer."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mtcore.contracts.registry import Registry, load_registry
from mtcore.contracts.resources import SLOTS_ENV, cores
from mtcore.exec.process import thread_defaults

thread_defaults()  # as the CLI does: OpenMP waits passively in the processes tests start

# mtdata's index (about 80 MB of SQLite, 30 s to build) is built once for the whole suite, not
# once per test cache (tests set $MTCORE_CACHE to their own folders).
os.environ.setdefault(
    "MTCORE_INDEX_DIR", str(Path(__file__).resolve().parents[1] / "work" / "index")
)

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    # Each pytest-xdist worker runs recipes of its own: each gets its share of the cores, as the
    # sequential runner had (2 workers on 2 cores: one step at a time a run), not all of them.
    os.environ.setdefault(SLOTS_ENV, f"cpu={max(1, cores() // _WORKERS)}")


@pytest.fixture
def uncapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``MTCORE_SLOTS`` share: for tests of steps side by side on a scheduler."""
    monkeypatch.delenv(SLOTS_ENV, raising=False)


SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ENJA = SHARED / "en-ja" / "odashi+small_parallel_enja"


def real_slice(
    dest: Path, split: str, n: int, langs: tuple[str, ...] = ("en", "ja")
) -> dict[str, Path]:
    """The first ``n`` lines of small_parallel_enja's ``split`` copied into ``dest``."""
    if not ENJA.exists():
        if os.environ.get("CI"):  # CI always has ../shared: a missing path is a bug, not a skip
            pytest.fail(f"real data not found at {ENJA}")
        pytest.skip(f"real data not found at {ENJA}")
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for lang in langs:
        with open(ENJA / f"{split}.{lang}", encoding="utf-8") as src:
            lines = [next(src) for _ in range(n)]
        out[lang] = dest / f"{split}.{lang}"
        out[lang].write_text("".join(lines), encoding="utf-8")
    return out


def local_data(files: dict[str, Path] | dict[str, str]) -> dict[str, Any]:
    """A recipe's ``data`` section reading ``files`` (lang -> path) as the corpus ``bitext``."""
    return {"bitext": {"source": "local", "files": {k: str(v) for k, v in files.items()}}}


def clean_split_recipe(
    name: str, files: dict[str, Path] | dict[str, str], filters: list[dict[str, Any]], held_out: int
) -> dict[str, Any]:
    """data ``bitext`` -> ``clean`` with ``filters`` -> ``split`` holding out ``held_out`` pairs
    for valid and for test; one worker. Tests add or change steps on the returned document."""
    return {
        "name": name,
        "directions": ["en-ja"],
        "executor": {"workers": 1},
        "data": local_data(files),
        "steps": {
            "clean": {"kind": "clean", "inputs": {"corpus": "bitext"}, "filters": filters},
            "split": {
                "kind": "split",
                "inputs": {"corpus": "clean"},
                "valid_size": held_out,
                "test_size": held_out,
            },
        },
    }


@pytest.fixture(scope="session")
def registry() -> Registry:
    return load_registry()


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


def tiny_bert(where: Path, units: list[str], hidden: int, positions: int) -> tuple[Any, Any]:
    """(tokenizer, model): a seeded, untrained one-layer BERT masked LM whose vocabulary is
    ``units`` (words, or characters), its ``vocab.txt`` written into ``where``."""
    transformers = pytest.importorskip("transformers")
    import torch

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    where.mkdir(parents=True, exist_ok=True)
    (where / "vocab.txt").write_text("\n".join(special + units) + "\n", encoding="utf-8")
    config = transformers.BertConfig(
        vocab_size=len(special) + len(units),
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=positions,
    )
    torch.manual_seed(0)
    tokenizer = transformers.BertTokenizer(str(where / "vocab.txt"))
    return tokenizer, transformers.BertForMaskedLM(config)


SPREAD = {
    "test_recipes.py",
    "test_kill_sweep.py",
    "test_e2e.py",
    "test_rehearsal.py",
    "test_model_plugins.py",
    "test_cluster_smoke.py",
}
"""Test files whose tests are independent (whole-recipe runs, or trainings whose module fixtures
take a second or two to build): under ``--dist loadgroup`` (Makefile) their tests spread over
the workers; every other file is one group, so its module fixtures (trained models) are built
once."""

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
    "test_smoke_profile_runs_end_to_end[nt5]": 168,
    "test_smoke_profile_runs_end_to_end[hwtsc]": 162,
    "test_rehearsal_paper_graph_runs_end_to_end[hwtsc]": 430,
    "test_rehearsal_paper_graph_runs_end_to_end[yishu]": 173,
    "test_default_profile_runs_end_to_end[nt5]": 208,
    "test_smoke_profile_runs_end_to_end[xiaomi]": 105,
    "test_smoke_profile_runs_end_to_end[yishu]": 86,
    "test_the_smoke_profile_on_slurm_gives_the_local_outputs": 300,
    "test_the_smoke_profile_on_two_ray_nodes_gives_the_local_outputs": 240,
}
"""Seconds the longest tests took in CI (2 workers; the kill sweeps reusing the fast tier's smoke
runs). Only their order uses them: the longest start first (``--no-loadscope-reorder``), so the
two workers end together instead of one running a long test alone at the end."""


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    items.sort(key=lambda item: -LONGEST.get(item.name, 0))  # stable: the rest keep their order
