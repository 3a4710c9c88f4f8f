"""The set-up script's products: KenLM binaries that work, and idempotence."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
    assert time.time() - started < 5
