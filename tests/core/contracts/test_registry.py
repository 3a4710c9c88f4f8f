"""Plugin lookup: a plugin installed while the process runs, and plugins that fail to load."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtcore.contracts.errors import PluginError
from mtcore.contracts.registry import load_registry

MODULE = """
from mtcore.api import Filter

class Late(Filter):
    name = "late_filter"

class Misnamed(Filter):
    name = "something_else"

"""


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A folder on ``sys.path`` to install distributions into, removed afterwards."""
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("late_plugins")]:
        del sys.modules[name]


def install(site: Path, dist: str, entry_points: str, modules: dict[str, str]) -> None:
    """What pip leaves behind: modules and a dist-info folder with the entry points."""
    for name, text in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")


def test_plugin_installed_after_the_first_lookup_is_found(site: Path) -> None:
    # The group has been read in this process before the new package appears.
    assert load_registry().load("filters", "length").name == "length"
    install(site, "late-plugins", "[mtcore.filters]\nlate_filter = late_plugins:Late\n",
            {"late_plugins": MODULE})  # fmt: skip
    registry = load_registry()
    assert registry.version("filters", "late_filter") == "late-plugins==0.1"
    assert registry.load("filters", "late_filter").__module__ == "late_plugins"


STEVEDORE_RUN = """
import json, sys
from pathlib import Path
from stevedore import driver, exception
from mtcore.contracts.registry import load_registry

site = Path(sys.argv[1])
found = {"first": driver.DriverManager("mtcore.filters", "length").driver.name}
info = site / "late_plugins-0.1.dist-info"  # pip installs a package into a folder on the path
info.mkdir()
(info / "METADATA").write_text("Metadata-Version: 2.1\\nName: late-plugins\\nVersion: 0.1\\n")
(info / "entry_points.txt").write_text("[mtcore.filters]\\nlate_filter = late_plugins:Late\\n")
(site / "late_plugins.py").write_text(sys.argv[2])
try:
    found["stevedore"] = driver.DriverManager("mtcore.filters", "late_filter").driver.name
except exception.NoMatches as exc:
    found["stevedore"] = f"NoMatches: {exc}"
found["mtcore"] = load_registry().load("filters", "late_filter").name
print(json.dumps(found))
"""


def test_stevedore_misses_a_plugin_installed_after_its_first_lookup(tmp_path: Path) -> None:
    """Issue 49 point 6: why the registry reads entry points itself instead of through
    stevedore's managers. stevedore caches a group's entry points for the life of the process
    (``ExtensionManager.ENTRY_POINT_CACHE``, and ``_cache.Cache`` keyed by ``sys.path``), so a
    plugin pip-installed into a folder already on the path after the first lookup (a notebook
    session, a long-lived driver) stays unknown to its ``DriverManager``; mtcore's registry
    finds it. Should stevedore ever see it, this fails and the registry can move to it."""
    import json
    import os
    import subprocess

    pytest.importorskip("stevedore")
    site = tmp_path / "site"
    site.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # stevedore's on-disk cache, kept here
    }
    done = subprocess.run(
        [sys.executable, "-c", STEVEDORE_RUN, str(site), textwrap.dedent(MODULE)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["first"] == "length"
    assert found["stevedore"].startswith("NoMatches"), found
    assert found["mtcore"] == "late_filter"


def test_plugins_that_fail_to_load_are_named(site: Path) -> None:
    entry_points = (
        "[mtcore.filters]\n"
        "late_broken = late_plugins_broken:Broken\n"
        "late_missing = late_plugins:Absent\n"
        "something = late_plugins:Misnamed\n"
    )
    install(site, "late-plugins", entry_points, {
        "late_plugins": MODULE, "late_plugins_broken": "import no_such_module_here\n",
    })  # fmt: skip
    registry = load_registry()
    with pytest.raises(PluginError, match=r"filter 'late_broken' .*late-plugins.*no_such_module"):
        registry.load("filters", "late_broken")
    with pytest.raises(PluginError, match=r"filter 'late_missing' .*AttributeError"):
        registry.load("filters", "late_missing")
    with pytest.raises(PluginError, match=r"class says name = 'something_else'"):
        registry.load("filters", "something")


STEPS = """
from mtcore.api import Step

class OtherFetch(Step):
    name = "late_fetch"
    fetches = True

    def run(self, ctx):
        pass

class Scorer(Step):
    name = "late_scorer"

    def run(self, ctx):
        pass

    def stage(self, step_id):
        return ("final", "enja") if step_id == "score_final" else None
"""


def test_the_core_finds_a_role_by_class_metadata_not_by_name(site: Path) -> None:
    """A data entry becomes a step of the one kind that declares ``fetches``: a second
    package declaring it too is an error naming both, not a silent pick; a step kind of any
    name says which stage it scores (Step.stage), which the report and translate read."""
    assert load_registry().declaring("steps", "fetches").name == "fetch"
    install(site, "late-plugins", "[mtcore.steps]\nlate_fetch = late_plugins:OtherFetch\n"
            "late_scorer = late_plugins:Scorer\n", {"late_plugins": STEPS})  # fmt: skip
    registry = load_registry()
    with pytest.raises(PluginError) as caught:
        registry.declaring("steps", "fetches")
    message = str(caught.value)
    assert "more than one step declares fetches = True" in message
    assert "fetch (mtcore)" in message and "late_fetch (late-plugins)" in message
    scorer = registry.load("steps", "late_scorer")
    assert scorer().stage("score_final") == ("final", "enja")
    assert scorer().stage("score") is None
    assert registry.load("steps", "evaluate")().stage("eval_ft_jaen") == ("ft", "jaen")
    assert registry.load("steps", "evaluate")().stage("evaluate_ft") is None


def test_an_unknown_name_among_hundreds_lists_the_nearest_not_all() -> None:
    """A recipe of 601 steps: an unknown reference names the nearest few, not every step."""
    from mtcore.contracts.registry import LISTED, suggest

    steps = [f"train_{i}_enzh" for i in range(500)] + ["mono_uk", "mono_en"]
    text = suggest("xq_mono", steps, "Known")
    assert text.startswith(f"Known, the {LISTED} nearest of 502: ")
    listed = text.split(": ", 1)[1].rstrip(".").split(", ")
    assert len(listed) == LISTED and "mono_uk" in listed and "mono_en" in listed
    assert suggest("x", ["a", "b"], "Known") == "Known: a, b."
