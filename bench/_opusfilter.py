"""OpusFilter 3.3.1 in its own venv (``bench/.venv-opusfilter``), made on first use, for the
benches that compare mtcore with it. Imported by scripts run as ``python bench/<name>.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PEER_VENV = ROOT / "bench" / ".venv-opusfilter"
VERSION = "3.3.1"
EXTRA_MODULES = {"eflomal": "eflomal", "jieba": "jieba", "mecab": "MeCab"}
"""OpusFilter's optional extras and the module each one installs."""
PINS = ("py3langid<0.3.0",)
"""OpusFilter 3.3.1's ``LangidFilter`` calls ``LanguageIdentifier.from_pickled_model``, which
py3langid 0.3 removed (its own ``fasttext`` extra pins the same)."""
LANGID_PROBE = "from py3langid.langid import LanguageIdentifier as L; L.from_pickled_model"


def opusfilter_bin(extras: tuple[str, ...] = ()) -> Path:
    """The ``opusfilter`` command of the peer venv, with ``extras`` (``eflomal``, ``jieba``,
    ``mecab``) installed: the venv is created and the package installed when missing."""
    python = PEER_VENV / "bin" / "python"
    command = PEER_VENV / "bin" / "opusfilter"
    probes = [LANGID_PROBE] + [f"import {EXTRA_MODULES[e]}" for e in extras]
    if command.exists() and all(_runs(python, code) for code in probes):
        return command
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    spec = f"opusfilter[{','.join(extras)}]" if extras else "opusfilter"
    print(f"installing {spec}=={VERSION} into {PEER_VENV}", flush=True)
    subprocess.run(
        [str(PEER_VENV / "bin" / "pip"), "install", "-q", f"{spec}=={VERSION}", *PINS],
        check=True,
    )
    return command


def _runs(python: Path, code: str) -> bool:
    if not python.exists():
        return False
    return subprocess.run([str(python), "-c", code], capture_output=True).returncode == 0


def run_opusfilter(
    steps: list[dict[str, object]], work: Path, extras: tuple[str, ...] = (), quiet: bool = True
) -> None:
    """Runs an OpusFilter configuration of ``steps`` with ``work`` as its output directory."""
    command = opusfilter_bin(extras)
    config = {"common": {"output_directory": str(work)}, "steps": steps}
    path = work / "opusfilter.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    done = subprocess.run([str(command), str(path)], capture_output=quiet, text=True)
    if done.returncode:
        tail = (done.stderr or "")[-2000:]
        raise SystemExit(f"opusfilter failed ({done.returncode}) on {path}:\n{tail}")
