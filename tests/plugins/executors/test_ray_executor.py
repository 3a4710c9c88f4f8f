"""The ray executor: the same bytes, counts and hashes as the local executor; a worker killed
mid-step loses only its shard (retried, or redone by a rerun); models load once per worker;
settings validated with locations; a clear install hint when Ray is missing.

Most tests run on one 2-CPU Ray cluster started for this module with ``ray start --head``
(the way a multi-node cluster is started), and connect to it by address. Filters under test
that need a probe come from a small plugin package this module installs beside mtcore (a
module and its ``.dist-info`` with an entry point), as a third party would.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mtcore.contracts.errors import RecipeError, StepError
from mtcore.contracts.registry import Registry, load_registry
from mtcore.contracts.step import Artifact, StepContext, write_artifact_meta
from mtcore.exec.shards import worker_memos
from mtcore.recipe.load import build_recipe
from mtcore.run.runner import Runner
from tests.support.data import clean_split_recipe, real_slice

HAS_RAY = importlib.util.find_spec("ray") is not None
NO_RAY = "ray is not installed (pip install 'mtcore[ray]')"
needs_ray = pytest.mark.skipif(not HAS_RAY, reason=NO_RAY)

PAIRS = 3000
SHARD = 300  # 10 shards: enough to reach both workers several times
MARKER_ROW = 1650  # in shard 5: some shards finish before the kill, some after

PROBE_MODULE = '''
"""Test plugin: counts its loads per process, logs each shard it scores (pid and first
source line) and, once, kills its own process on a marker pair (PROBE_* variables)."""

from __future__ import annotations

import os
import signal

from pydantic import Field

from mtcore.api import Filter, PluginConfig

LOADS = 0


class ProbeConfig(PluginConfig):
    max_chars: int = Field(60, ge=1, le=10_000, description="longest source side kept")


class ProbeFilter(Filter):
    name = "ray_probe"
    Config = ProbeConfig

    def setup(self, langs, resources=None):
        super().setup(langs, resources)
        global LOADS
        LOADS += 1  # where a model filter loads its model

    def score(self, batch):
        log = os.environ.get("PROBE_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()}\\t{batch[0][0]}\\n")
        flag = os.environ.get("PROBE_KILL_FLAG")
        if flag and any(pair[0] == os.environ["PROBE_KILL_MARKER"] for pair in batch):
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return [len(pair[0]) for pair in batch]

    def accept(self, score):
        return score <= self.config.max_chars


def loads():
    return LOADS
'''


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The probe plugin installed in a folder on the driver's ``sys.path``; workers get it
    through ``PYTHONPATH`` in the executor's ``runtime_env``."""
    root = tmp_path_factory.mktemp("probe")
    (root / "ray_probe_filters.py").write_text(textwrap.dedent(PROBE_MODULE), encoding="utf-8")
    info = root / "mtcore_ray_probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mtcore-ray-probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[mtcore.filters]\nray_probe = ray_probe_filters:ProbeFilter\n"
    )
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


@pytest.fixture(scope="module")
def decoding_setup(micro_setup: dict[str, Path]) -> dict[str, Path]:
    """The decoding tests' corpora, SentencePiece model and micro en-ja model."""
    return dict(micro_setup)


@pytest.fixture(scope="module")
def probe_registry(probe_dir: Path) -> Registry:
    registry = load_registry()
    assert registry.has("filters", "ray_probe")
    return registry


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 2-CPU Ray cluster in its own processes (``ray start --head --block``); its address.
    Stopped by signalling the blocking ``ray start``, which stops what it started."""
    if not HAS_RAY:
        pytest.skip(NO_RAY)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp("cluster") / "ray-start.log"
    command = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start failed:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def enja_3000(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """2,500 real pairs, then the first 500 again: duplicates across shards for dedup."""
    files = real_slice(tmp_path_factory.mktemp("data"), "train", PAIRS - 500)
    for path in files.values():
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.write_text("".join(lines + lines[:500]), encoding="utf-8")
    return files


# --- helpers --------------------------------------------------------------------------------


def run(doc: dict[str, Any], registry: Registry, workdir: Path) -> Any:
    recipe = build_recipe(doc, registry)
    return Runner(recipe, registry, workdir, show_progress=False).run()


def outputs(workdir: Path) -> dict[str, bytes]:
    """Every file of the completed step directories but manifests (they hold timings)."""
    steps = workdir / "steps"
    return {
        p.relative_to(steps).as_posix(): p.read_bytes()
        for p in sorted(steps.rglob("*"))
        if p.is_file() and ".partial" not in p.parts and p.name != "manifest.json"
    }


def summary(result: Any) -> list[tuple[str, str, dict[str, Any]]]:
    return [(r.planned.id, r.planned.hash, r.manifest["counts"]) for r in result.results]


def probe_doc(files: dict[str, Path], executor: dict[str, Any]) -> dict[str, Any]:
    """Clean with the probe (stateless, in the workers) and dedup (stateful, in the driver)."""
    doc = clean_split_recipe(
        "ray_probe", files, [{"name": "ray_probe", "max_chars": 60}, {"name": "dedup"}], 50
    )
    doc["steps"]["clean"]["shard_size"] = SHARD
    doc["executor"] = executor
    return doc


def probe_env(
    probe_dir: Path, tmp: Path, log: str, kill_on: dict[str, Path] | None = None
) -> dict[str, Any]:
    """The workers' runtime_env: the probe on their path, a shard log and, with ``kill_on``
    (the corpus files), a kill once on the marker pair of that corpus."""
    env = {"PYTHONPATH": str(probe_dir), "PROBE_LOG": str(tmp / log)}
    if kill_on is not None:
        lines = kill_on["en"].read_text(encoding="utf-8").split("\n")
        assert lines.count(lines[MARKER_ROW]) == 1  # the kill happens in that shard only
        env["PROBE_KILL_FLAG"] = str(tmp / "killed")
        env["PROBE_KILL_MARKER"] = lines[MARKER_ROW]
    return {"env_vars": env}


def shard_numbers(workdir: Path) -> tuple[list[int], list[str]]:
    """Saved shard results of the clean step's unfinished run, and any other file there."""
    stores = list((workdir / "steps" / ".partial").glob("clean-*/.scratch/shards"))
    assert len(stores) == 1
    files = sorted(p.name for p in stores[0].iterdir())
    saved = [int(n[: -len(".pkl")]) for n in files if n.endswith(".pkl")]
    return saved, [n for n in files if not n.endswith(".pkl")]


# --- tests ----------------------------------------------------------------------------------


@needs_ray
def test_near_dedup_signatures_on_ray_match_local(tmp_path, registry, enja_3000, cluster):
    """The near_dedup step's signatures computed by Ray workers on the two-node cluster give
    the local run's bytes; the 500 repeated pairs (and any near-duplicates) go."""
    files = {lang: str(path) for lang, path in enja_3000.items()}
    doc = {
        "name": "near",
        "directions": ["en-ja"],
        "data": {"pool": {"source": "local", "files": files}},
        "steps": {
            "near": {"kind": "near_dedup", "inputs": {"corpus": "pool"}, "shard_size": SHARD}
        },
    }
    local = run(doc, registry, tmp_path / "local")
    doc["executor"] = {"name": "ray", "address": cluster, "workers": 2}
    remote = run(doc, registry, tmp_path / "ray")
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")
    counts = remote.manifest("near")["counts"]
    assert counts == local.manifest("near")["counts"]
    assert counts["pairs_in"] == PAIRS and counts["near_duplicates"] >= 500


@needs_ray
def test_ray_matches_local_bytes_counts_and_hashes(tmp_path, registry, enja_3000, cluster):
    filters = [
        {"name": "length", "max_length": 80},
        {"name": "dedup"},
        {"name": "length_ratio", "max_ratio": 3},
    ]
    doc = clean_split_recipe("scale", enja_3000, filters, held_out=50)
    doc["steps"]["clean"]["shard_size"] = SHARD
    local = run(doc, registry, tmp_path / "local")
    doc["executor"] = {"name": "ray", "address": cluster, "workers": 2}
    remote = run(doc, registry, tmp_path / "ray")
    assert summary(remote) == summary(local)
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")
    counts = remote.manifest("clean")["counts"]
    assert counts["pairs_in"] == PAIRS
    assert counts["dropped.dedup"] > 0  # the stateful filter saw duplicates across shards
    assert 0 < counts["pairs_out"] < PAIRS


@needs_ray
def test_models_load_once_per_worker(tmp_path, probe_dir, probe_registry, enja_3000, cluster):
    from mtcore_plugins.executors.ray import RayExecutor
    from mtcore_plugins.steps.clean import CleanStep

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang, path in enja_3000.items():
        (corpus / f"corpus.{lang}").write_bytes(path.read_bytes())
    write_artifact_meta(corpus, type="parallel", langs=["en", "ja"], name="corpus")
    env = probe_env(probe_dir, tmp_path, "shards.log")
    executor = RayExecutor.from_dict({"address": cluster, "workers": 2, "runtime_env": env})
    step = CleanStep.from_dict({"filters": [{"name": "ray_probe"}], "shard_size": SHARD})
    try:
        for run_number in range(2):  # two steps on the same workers
            ctx = StepContext(
                step_id="clean",
                kind="clean",
                step_hash=f"run{run_number}",
                work=tmp_path / f"w{run_number}",
                inputs={"corpus": Artifact.open(corpus)},
                executor=executor,
                registry=probe_registry,
                show_progress=False,
            )
            step.run(ctx)  # type: ignore[arg-type]
        pids = executor.run_on_workers(os.getpid)
        loads = executor.run_on_workers(_probe_loads)
    finally:
        executor.close()
    scored = [line.split("\t")[0] for line in (tmp_path / "shards.log").read_text().splitlines()]
    assert len(scored) == 2 * PAIRS // SHARD
    assert set(scored) == {str(pid) for pid in pids}  # both workers ran shards
    assert os.getpid() not in pids
    assert loads == [1, 1]  # 20 shards, two models loaded


def _probe_loads() -> int:
    import ray_probe_filters  # type: ignore[import-not-found]

    return int(ray_probe_filters.loads())


@needs_ray
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["fairseq", "ctranslate2"])
def test_translation_on_ray_matches_one_process(
    tmp_path, decoding_setup, cluster, backend, monkeypatch
):
    """Back-translation shards on two Ray workers: the same 1-best and n-best as one local
    process, every shard translated once, the model (for CTranslate2 the converted one, issue
    25 point 5) loaded once per worker."""
    from mtcore_plugins.executors.ray import RayExecutor
    from tests.plugins.steps.test_decoding import CAPPED, texts, translate

    if backend == "ctranslate2":
        pytest.importorskip("ctranslate2")
        monkeypatch.setenv("MTCORE_CACHE", str(tmp_path / "cache"))  # converted in the driver
    settings = {"beam": 3, "nbest": 2, "chunk_lines": 12, "backend": backend, **CAPPED}
    _, alone, entries = translate(decoding_setup, tmp_path / "one", **settings)
    executor = RayExecutor.from_dict({"address": cluster, "workers": 2})
    try:
        ctx, remote, remote_entries = translate(
            decoding_setup, tmp_path / "ray", executor=executor, **settings
        )
        again, _, _ = translate(decoding_setup, tmp_path / "again", executor=executor, **settings)
        held = executor.run_on_workers(_translators_held)
    finally:
        executor.close()
    assert remote == alone and texts(remote_entries) == texts(entries)
    assert ctx.metrics["shards_translated"] == again.metrics["shards_translated"] == 5
    assert held == [1, 1]  # one translator per worker process, reused by the second step
    assert not worker_memos("translator")  # the driver loaded none
    assert ctx.metrics.get("backend", "fairseq") == backend


def _translators_held() -> int:
    from mtcore.exec.shards import worker_memos

    return len(worker_memos("translator"))


@needs_ray
def test_killed_worker_is_retried_and_output_unchanged(
    tmp_path, probe_dir, probe_registry, enja_3000, cluster
):
    local = run(probe_doc(enja_3000, {"workers": 1}), probe_registry, tmp_path / "local")
    env = probe_env(probe_dir, tmp_path, "shards.log", enja_3000)
    executor = {"name": "ray", "address": cluster, "workers": 2, "runtime_env": env}
    remote = run(probe_doc(enja_3000, executor), probe_registry, tmp_path / "ray")
    assert (tmp_path / "killed").exists()  # a worker process did die mid-step
    assert summary(remote) == summary(local)
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")


@needs_ray
def test_killed_worker_without_retries_fails_then_rerun_redoes_missing_shards(
    tmp_path, probe_dir, probe_registry, enja_3000, cluster
):
    local = run(probe_doc(enja_3000, {"workers": 1}), probe_registry, tmp_path / "local")
    executor: dict[str, Any] = {"name": "ray", "address": cluster, "workers": 2, "max_retries": 0}
    executor["runtime_env"] = probe_env(probe_dir, tmp_path, "first.log", enja_3000)
    with pytest.raises(StepError, match="run the step again to redo only the missing ones"):
        run(probe_doc(enja_3000, executor), probe_registry, tmp_path / "ray")
    assert (tmp_path / "killed").exists()
    saved, others = shard_numbers(tmp_path / "ray")
    assert others == []  # no half-written shard result
    # Shards are saved in order; 0 and 1 are saved before the marker shard is submitted
    # (4 in flight), and nothing from the marker shard on.
    assert saved == list(range(len(saved))) and 2 <= len(saved) <= MARKER_ROW // SHARD
    assert not list((tmp_path / "ray" / "steps").glob("clean-*"))  # no output in place

    executor["runtime_env"] = probe_env(probe_dir, tmp_path, "rerun.log", enja_3000)
    again = run(probe_doc(enja_3000, executor), probe_registry, tmp_path / "ray")
    assert [r.status for r in again.results] == ["cached", "ran", "ran"]
    assert again.manifest("clean")["resumed"] is True
    rerun_shards = (tmp_path / "rerun.log").read_text().splitlines()
    assert len(rerun_shards) == PAIRS // SHARD - len(saved)  # only the missing shards
    assert summary(again) == summary(local)
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")


@needs_ray
def test_own_local_cluster_is_started_and_stopped():
    import ray

    from mtcore_plugins.executors.ray import RayExecutor

    assert not ray.is_initialized()
    executor = RayExecutor.from_dict({"num_cpus": 2, "workers": 2})
    assert list(executor.map(abs, [])) == []
    assert not ray.is_initialized()  # no task, no cluster
    try:
        assert list(executor.map(abs, [-3, 1, -2, 5, -8, 13, -21])) == [3, 1, 2, 5, 8, 13, 21]
        with pytest.raises(ValueError, match="invalid literal") as caught:
            list(executor.map(int, ["1", "x", "3"]))
        assert not isinstance(caught.value, ray.exceptions.RayError)  # as the local pool does
        pids = executor.run_on_workers(os.getpid)
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert ray.cluster_resources()["CPU"] == 2
    finally:
        executor.close()
    assert not ray.is_initialized()


def test_executor_settings_are_validated_with_locations(registry, enja_files):
    doc = clean_split_recipe("scale", enja_files, [{"name": "length"}], held_out=10)
    cases = [
        # a misspelt setting of the ray plugin is located under executor
        ({"name": "ray", "adress": "auto"}, "executor.adress: unknown setting"),
        # num_cpus sizes a local cluster only
        ({"name": "ray", "address": "auto", "num_cpus": 4}, "num_cpus sizes a local cluster"),
        # more workers than a local cluster's CPUs can never be placed
        ({"name": "ray", "num_cpus": 2, "workers": 3}, "do not fit in a local cluster"),
        # the local executor takes no ray settings
        ({"name": "local", "address": "auto"}, "executor.address: unknown setting"),
        # an unknown executor is named, with a suggestion
        ({"name": "rya"}, "executor.name: Unknown executor 'rya'. Did you mean 'ray'?"),
    ]
    for executor, message in cases:
        doc["executor"] = executor
        with pytest.raises(RecipeError) as caught:
            build_recipe(doc, registry)
        assert message in str(caught.value), executor


@needs_ray
def test_set_names_the_executor_and_hashes_do_not_change(registry, enja_files):
    doc = clean_split_recipe("scale", enja_files, [{"name": "length"}], held_out=10)
    local = build_recipe(doc, registry)
    remote = build_recipe(doc, registry, sets=["executor=ray"])
    assert remote.head.executor.name == "ray"
    other = build_recipe(doc, registry, sets=["executor.name=ray", "executor.address=auto"])
    assert other.head.executor.settings() == {"workers": 1, "address": "auto"}
    from mtcore.recipe.plan import make_plan

    hashes = [[p.hash for p in make_plan(r, registry)] for r in (local, remote, other)]
    assert hashes[0] == hashes[1] == hashes[2]


BLOCK_RAY = """
import importlib.abc, sys

class BlockRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, BlockRay())
"""


def test_recipe_without_ray_installed_gets_the_install_hint(tmp_path, write_recipe, enja_files):
    doc = clean_split_recipe("scale", enja_files, [{"name": "length"}], held_out=10)
    doc["executor"] = {"name": "ray", "workers": 2}
    path = write_recipe(doc)
    code = BLOCK_RAY + textwrap.dedent(
        f"""
        from mtcore.contracts.errors import PluginError
        from mtcore_plugins.executors.ray import RayExecutor
        try:
            RayExecutor()
        except PluginError as exc:
            print("direct:", exc)
        from mtcore.cli.app import main
        sys.argv = ["mtcore", "validate", {str(path)!r}]
        main()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    hint = "pip install 'mtcore[ray]'"
    assert f"direct: executor 'ray' needs Ray, which is not installed: {hint}" in done.stdout
    assert done.returncode != 0
    assert f"executor.name: executor 'ray' needs Ray, which is not installed: {hint}" in (
        done.stderr
    )


def test_plugin_module_imports_without_ray_and_lists(tmp_path):
    code = BLOCK_RAY + textwrap.dedent(
        """
        import mtcore_plugins.executors.ray as plugin
        from click.testing import CliRunner
        from mtcore.cli.app import cli
        print(plugin.RayExecutor.name, "ray" in sys.modules)
        print(CliRunner().invoke(cli, ["plugins", "executors"]).output)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ray False\n")
    assert "  ray " in done.stdout and "mtcore_plugins.executors.ray:RayExecutor" in done.stdout
