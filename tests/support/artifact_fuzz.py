"""A fuzz of the ``artifact.json`` files inside an exported system (issue 70): each is edited
as an attacker who controls the whole folder would (the system's hash of it written again),
then the system is loaded and translates a few lines. Every outcome must be the clean output,
another output, or a :class:`~mtcore.contracts.errors.MtcoreError`, within a time bound, and
no text of a file outside the system may show in the output or the error.

``python -m tests.support.artifact_fuzz SYSTEM [LINES] [SEED]`` runs it on an exported system
and prints the outcomes."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUTSIDE = "/etc/passwd"
SECRET = "root:"  # what the first line of /etc/passwd starts with
HOSTILE: list[Any] = [
    OUTSIDE,
    "../../../../../../etc/passwd",
    "/dev/zero",
    "checkpoint.pt/../../../system.json",
    "",
    None,
    12,
    [],
    {},
    "x" * 100_000,
    "a\x00b",
    [OUTSIDE],
    {"a": OUTSIDE},
]
NAMES = ("file", "files", "model", "checkpoint", "models", "type", "src", "tgt")


def edits(meta: dict[str, Any], rng: random.Random, count: int) -> Iterator[bytes]:
    """Edited copies of one ``artifact.json``: every key set to ``/etc/passwd`` and to a path
    out of the folder, then ``count`` random edits (a key set to a hostile value, dropped, or a
    file-naming key added), then ``count // 3`` with bytes flipped, cut or repeated."""
    for key in meta:
        for value in (OUTSIDE, HOSTILE[1]):
            yield json.dumps({**meta, key: value}).encode()
    keys = sorted(set(meta) | set(NAMES))
    for _ in range(count):
        key, out = rng.choice(keys), dict(meta)
        if key in out and rng.random() < 0.2:
            del out[key]
        else:
            out[key] = rng.choice(HOSTILE)
        yield json.dumps(out).encode()
    good = json.dumps(meta).encode()
    for _ in range(count // 3):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] = rng.randrange(256)
            else:
                del data[at : at + rng.randint(1, 20)]
        yield bytes(data)


def rehash(system: Path, member: Path) -> None:
    """The system's own record of ``member``'s hash, written again (the attacker's move)."""
    info = json.loads((system / "system.json").read_text(encoding="utf-8"))
    name = member.relative_to(system).as_posix()
    info["artifacts"][name] = hashlib.sha256(member.read_bytes()).hexdigest()
    (system / "system.json").write_text(json.dumps(info), encoding="utf-8")


def attempt(system: Path, lines: list[str]) -> tuple[str, Any]:
    """Load ``system`` and translate ``lines``: ("output", lines) or ("error", message)."""
    from mtcore.contracts.errors import MtcoreError
    from mtcore.contracts.registry import load_registry
    from mtcore.recipe.hashing import private_conversions
    from mtcore.system.export import load_system

    try:
        with private_conversions():
            return "output", load_system(system, load_registry()).translate(lines)
    except MtcoreError as exc:
        return "error", str(exc)


def fuzz(
    system: Path,
    lines: list[str],
    seed: int = 70,
    per_type: int = 12,
    bound: float = 120.0,
    log: list[tuple[str, str, str]] | None = None,
) -> Counter[str]:
    """Every edit of :func:`edits` for one ``artifact.json`` of each artifact type in
    ``system`` (on a copy), tried with :func:`attempt`; raises ``AssertionError`` on harm."""
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="mtcore-fuzz-") as name:
        work = Path(name) / "system"
        shutil.copytree(system, work)
        clean = attempt(work, lines)
        assert clean[0] == "output", clean
        seen: dict[str, Path] = {}
        for meta_file in sorted(work.glob("artifacts/*/artifact.json")):
            kind = json.loads(meta_file.read_text(encoding="utf-8")).get("type")
            seen.setdefault(str(kind), meta_file)
        for kind, meta_file in seen.items():
            good = meta_file.read_bytes()
            for meta in edits(json.loads(good), rng, per_type):
                meta_file.write_bytes(meta)
                rehash(work, meta_file)
                start = time.perf_counter()
                outcome, value = attempt(work, lines)
                took = time.perf_counter() - start
                shown = json.dumps(value)
                assert SECRET not in shown, (kind, meta, shown[:500])
                assert took < bound, (kind, meta, took)
                seen_as = outcome if outcome == "error" or value != clean[1] else "same"
                outcomes[seen_as] += 1
                if log is not None:
                    log.append(
                        (kind, meta.decode("utf-8", "replace")[:80], f"{seen_as}: {shown[:150]}")
                    )
            meta_file.write_bytes(good)
            rehash(work, meta_file)
    return outcomes


def main() -> None:
    system = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 70
    lines = ["This is a test.", "東京で会議が開かれた。", "Hello, world!"][:count]
    start = time.perf_counter()
    log: list[tuple[str, str, str]] = []
    outcomes = fuzz(system, lines, seed, log=log)
    for row in log:
        print(*row, sep="\t")
    print(dict(outcomes), f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
