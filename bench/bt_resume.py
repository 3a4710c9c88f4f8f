"""Back-translation of 100,000 monolingual sentences, killed with SIGKILL in the middle and run
again: the rerun translates only the shards the killed run had not saved, and the tagged
synthetic corpus has exactly one pair per monolingual line, in order.

The recipe (written to the work directory) trains a ja->en ``mtcore_transformer_micro`` model
for a few updates on small_parallel_enja (spm, binarize, train), translates the Japanese side
of its 50,000 training pairs twice over (100,000 lines) with greedy search in shards of
``--chunk`` lines, and pairs every translation with its line as tagged BT (``synthetic``,
``<BT>``). ``mtcore run`` runs as a subprocess; once ``--kill-after`` shards are saved its
process group gets SIGKILL, and it is run again. Printed: shards saved before the kill, shards
the rerun translated, the check of the output, and the translate step's sentences/s.

    .venv/bin/python bench/bt_resume.py [--lines 100000] [--chunk 5000] [--kill-after 6]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/en-ja/odashi+small_parallel_enja"


def recipe(work: Path, lines: int, chunk: int) -> Path:
    source = DATA / "train.ja"
    mono = work / "mono.ja"
    text = source.read_text(encoding="utf-8").splitlines()
    with open(mono, "w", encoding="utf-8") as out:
        for i in range(lines):
            out.write(text[i % len(text)] + "\n")
    doc = {
        "name": "bt_resume",
        "directions": ["ja-en"],
        "executor": {"workers": 1},
        "data": {
            "bitext": {
                "source": "local",
                "files": {"en": str(DATA / "train.en"), "ja": str(DATA / "train.ja")},
            },
            "valid": {
                "source": "local",
                "files": {"en": str(DATA / "dev.en"), "ja": str(DATA / "dev.ja")},
            },
            "mono": {"source": "local", "files": {"ja": str(mono)}},
        },  # fmt: skip
        "steps": {
            "spm": {
                "kind": "spm",
                "inputs": {"corpus": "bitext"},
                "vocab_size": 2000,
                "num_threads": 2,
                "input_sentence_size": 20000,
            },
            "bin": {
                "kind": "binarize",
                "inputs": {"train": "bitext", "valid": "valid", "spm": "spm"},
                "src": "ja",
                "tgt": "en",
            },
            "train": {
                "kind": "train",
                "inputs": {"data": "bin"},
                "arch": "mtcore_transformer_micro",
                "max_update": 20,
                "max_tokens": 2048,
                "lr": 0.003,
                "warmup_updates": 5,
                "save_interval_updates": 20,
                "keep_last": 1,
                "average_last": 1,
                "threads": 2,
            },
            "bt_hyp": {
                "kind": "translate",
                "inputs": {"model": "train", "corpus": "mono", "spm": "spm"},
                "src": "ja",
                "tgt": "en",
                "beam": 1,
                "max_len_a": 1.0,
                "max_len_b": 5,
                "batch_size": 250,
                "chunk_lines": chunk,
                "threads": 2,
            },
            "bt": {
                "kind": "synthetic",
                "inputs": {"corpus": "mono", "hyp": "bt_hyp"},
                "mode": "back",
                "tag": "<BT>",
            },
        },  # fmt: skip
    }
    path = work / "bt_resume.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def mtcore(path: Path, work: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "mtcore.cli", "run", str(path), "-w", str(work), "-q"]
    return subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL)


def saved_shards(work: Path) -> int:
    found = list((work / "steps" / ".partial").glob("bt_hyp-*/.scratch/shards/*.pkl"))
    return len(found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=5000)
    parser.add_argument("--kill-after", type=int, default=6, help="saved shards before the kill")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bt_resume_"))
    work.mkdir(parents=True, exist_ok=True)
    path = recipe(work, args.lines, args.chunk)
    shards = -(-args.lines // args.chunk)

    first = mtcore(path, work / "w")
    while first.poll() is None and saved_shards(work / "w") < args.kill_after:
        time.sleep(0.2)
    if first.poll() is not None:
        raise SystemExit(f"the first run ended (rc {first.returncode}) before it could be killed")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    saved = saved_shards(work / "w")  # counted after the kill: what the rerun finds
    print(f"killed the first run with {saved} of {shards} shards saved")

    second = mtcore(path, work / "w")
    if second.wait() != 0:
        raise SystemExit(f"the rerun failed (rc {second.returncode})")
    manifest = json.loads(next((work / "w/steps").glob("bt_hyp-*/manifest.json")).read_text())
    metrics, counts = manifest["metrics"], manifest["counts"]
    translated, total = metrics["shards_translated"], counts["translate.lines"]
    print(f"rerun translated {translated} shards ({shards - saved} were missing); "
          f"translate.lines = {total}")  # fmt: skip
    out = next((work / "w/steps").glob("bt-*/corpus"))
    mono = (work / "mono.ja").read_text(encoding="utf-8").splitlines()
    en = (out / "corpus.en").read_text(encoding="utf-8").splitlines()
    ja = (out / "corpus.ja").read_text(encoding="utf-8").splitlines()
    in_order = ja == mono and len(en) == len(mono)
    tagged = sum(line.startswith("<BT> ") for line in en)
    empty = sum(not line for line in en)
    print(f"synthetic pairs: {len(ja)} for {len(mono)} lines, targets in order: {in_order}; "
          f"{tagged} sources tagged, {empty} empty translations (untagged)")  # fmt: skip
    print(
        f"throughput of the resumed run: {metrics['sentences_per_second']:.1f} sentences/s "
        f"over {metrics['shards_translated'] * args.chunk} lines (greedy, micro model, CPU)"
    )
    ok = metrics["shards_translated"] == shards - saved and in_order and tagged + empty == len(en)
    print("OK" if ok else "FAILED")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
