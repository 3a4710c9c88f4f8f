"""The set-up script's products: KenLM binaries that work, and idempotence."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT

BIN = Path(sys.executable).parent


@pytest.mark.skipif(not (BIN / "lmplz").exists(), reason="KenLM not built in this environment")
def test_lmplz_and_build_binary_work_on_real_text(tmp_path, enja_files):
    arpa = tmp_path / "en.arpa"
    with open(enja_files["en"], "rb") as text, open(arpa, "wb") as out:
        subprocess.run(
            [str(BIN / "lmplz"), "-o", "3", "--discount_fallback", "-S", "10%"],
            stdin=text,
            stdout=out,
            stderr=subprocess.DEVNULL,
            check=True,
        )
    header = arpa.read_text(encoding="utf-8").split("\n\n")[0]
    assert "ngram 1=" in header and "ngram 3=" in header
    subprocess.run(
        [str(BIN / "build_binary"), str(arpa), str(tmp_path / "en.bin")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    assert (tmp_path / "en.bin").stat().st_size > 0


@pytest.mark.skipif(
    not (ROOT / ".venv" / ".mtcore-setup").exists(), reason="not installed by setup.sh"
)
def test_setup_is_idempotent():
    started = time.time()
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, check=True
    )
    assert result.stdout == "" and result.stderr == ""  # nothing installed, nothing said
    assert time.time() - started < 60  # an install would take minutes; a loaded machine seconds


def test_the_package_list_holds_every_package_of_the_tree():
    """pyproject's explicit package list names every folder with an ``__init__.py`` under
    mtcore/ and plugins/: a non-editable install (a wheel, a GPU machine's ``pip install .``)
    ships only what it names. Missing ``mtcore_plugins.common`` broke every model plugin there
    while the editable install here hid it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (("mtcore", "mtcore"), ("plugins", "mtcore_plugins")):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *parts)))
    assert found - listed == set(), "packages missing from pyproject.toml"
    assert listed - found == set(), "pyproject.toml lists packages that do not exist"
