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
