"""Word-alignment probability of each pair, from eflomal (Östling & Tiedemann 2016).

Xiaomi §2.2.2 aligns its rule-filtered corpus with fast_align and discards "sentence pairs
with the alignment probability of being each other translation less than 0.1"; Yishu §2.1.1
keeps "the top 80% of sentence pairs based on the alignment score". fast_align is not
installable here; eflomal is the aligner OpusFilter's ``WordAlignFilter`` uses, and we read its
scores the same way: the batch is aligned in both directions and eflomal writes, per sentence
and direction, ``s = -(1/|t|) * sum_j log max_i p(t_j | s_i)`` (its ``-F``/``-R`` files: the
mean negative log probability of each target token's best link; lower is better, as in
OpusFilter). With eflomal's scoring model 1 (``score_model``) the factor is IBM-1's lexical
translation probability, so ``exp(-s)`` is the geometric mean of per-token link probabilities.
The pair's **alignment probability** is the geometric mean over both directions,

    p = exp(-(s_forward + s_reverse) / 2)   in (0, 1],

higher is better, compared with ``min_probability`` (0.1, Xiaomi) or ranked (Yishu's top 80 %).
Scoring with model 2 or 3 adds jump (and fertility) factors: still higher is better, but no
longer a probability bounded by 1.
A pair with an empty side, or a side longer than eflomal's 1,023-token limit, cannot be aligned
and gets 0.

The alignment model is learnt on the batch itself (no priors), so a pair's probability depends
on the pairs scored with it (the engine's shards: 20,000 pairs by default). Measured on real
small_parallel_enja pairs, 2,000 per batch: real pairs average 0.05, pairs with shifted targets
0.012; 20,000 per batch with a tenth shifted: real pairs' median 0.086, 95 % of shifted pairs
below 0.022, but 57 % of real pairs below Xiaomi's 0.1 (their model learnt from 19M pairs; on a
small or very varied corpus, rank instead or lower ``min_probability``).

Determinism: eflomal's Gibbs sampler seeds itself from ``/dev/urandom`` and has no seed option,
so the filter runs a copy of eflomal's binary in which that path is replaced by the name of a
seed file in the batch's temporary directory (a same-length string constant), with OpenMP on
one thread (several threads hand the samplers their random streams in a racy order; the engine
already runs one worker per core). The same batch and ``seed`` then give the same scores.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from mtcore.errors import PluginError
from mtcore.plugin import Filter, Pair, PluginConfig

MAX_TOKENS = 0x3FF  # eflomal writes longer sentences as empty (MAX_SENT_LEN 0x400)
URANDOM = b"/dev/urandom\0"
SEED_FILE = b"eflomal.seed\0"  # same length: the patched binary opens it in its working dir
_BINARY: dict[str, bytes] = {}


class AlignmentConfig(PluginConfig):
    min_probability: float = Field(
        0.1,
        ge=0,
        le=1,
        description="lowest alignment probability kept (Xiaomi §2.2.2 discards below 0.1)",
    )
    model: Literal[1, 2, 3] = Field(
        3, description="eflomal alignment model: 1 IBM-1, 2 HMM, 3 HMM + fertility (default)"
    )
    score_model: Literal[1, 2, 3] = Field(
        1,
        description="eflomal model for the sentence scores; 1 makes each factor a lexical "
        "translation probability, so the score is a probability",
    )
    samplers: int = Field(3, ge=1, le=64, description="independent Gibbs samplers (eflomal: 3)")
    rel_iterations: float = Field(
        1.0, gt=0, le=100, description="iterations relative to eflomal's default for the size"
    )
    null_prior: float = Field(
        0.2, gt=0, lt=1, description="prior probability of a NULL link (eflomal: 0.2)"
    )
    seed: int = Field(1, ge=1, le=2**63 - 1, description="seed of eflomal's sampler")


def tokenized(texts: Sequence[str], lang: str) -> list[list[str]]:
    """Lowercased segmenter tokens, as eflomal's own ``prepare_files`` lowercases."""
    from mtcore_plugins.filters._tokens import tokens

    return [[t.lower() for t in tokens(text, lang)] for text in texts]


def write_eflomal_text(path: Path, sentences: Sequence[Sequence[str]]) -> None:
    """eflomal's input format: ``<sentences> <vocabulary>`` then ``<length> <ids...>``."""
    index: dict[str, int] = {}
    lines = []
    for words in sentences:
        ids = [index.setdefault(word, len(index)) for word in words]
        lines.append(" ".join(map(str, [len(ids), *ids])))
    path.write_text(f"{len(sentences)} {len(index)}\n" + "\n".join(lines) + "\n")


def seeded_binary() -> bytes:
    """eflomal's binary with ``/dev/urandom`` replaced by ``eflomal.seed`` (once per process)."""
    if "eflomal" not in _BINARY:
        import eflomal

        path = Path(eflomal.__file__).parent / "bin" / "eflomal"
        raw = path.read_bytes()
        if raw.count(URANDOM) != 1:
            raise PluginError(
                f"filter 'alignment': cannot seed {path}: expected one {URANDOM!r} in it, found "
                f"{raw.count(URANDOM)} (the filter is written for eflomal 2.0.0)"
            )
        _BINARY["eflomal"] = raw.replace(URANDOM, SEED_FILE)
    return _BINARY["eflomal"]


def iterations(model: int, pairs: int, rel: float) -> list[str]:
    """eflomal's own schedule (``eflomal.cython.align``) as command-line options."""
    iters = max(2, round(rel * 5000 / math.sqrt(pairs)))
    quarter = max(1, iters // 4)
    counts = {
        1: (iters, 0, 0),
        2: (max(2, quarter), iters, 0),
        3: (max(2, quarter), quarter, iters),
    }
    return [
        option for m, n in enumerate(counts[model][:model], start=1) for option in (f"-{m}", str(n))
    ]


class AlignmentFilter(Filter):
    """Score: the pair's alignment probability in [0, 1]; accept at ``min_probability``."""

    name = "alignment"
    Config = AlignmentConfig
    higher_is_better = True
    batch_dependent = True  # eflomal fits its model on the batch it aligns

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        if len(langs) != 2:
            raise PluginError(
                f"filter 'alignment' aligns two sides; the corpus has {len(langs)}: {list(langs)}"
            )

    def score(self, batch: Sequence[Pair]) -> list[float]:
        if not batch:
            return []
        source = tokenized([pair[0] for pair in batch], self.langs[0])
        target = tokenized([pair[1] for pair in batch], self.langs[1])
        rows = [
            i
            for i, (s, t) in enumerate(zip(source, target, strict=True))
            if 0 < len(s) <= MAX_TOKENS and 0 < len(t) <= MAX_TOKENS
        ]
        probability = np.zeros(len(batch))
        if rows:
            forward, reverse = self._align([source[i] for i in rows], [target[i] for i in rows])
            probability[rows] = np.exp(-(forward + reverse) / 2)
        return [float(p) for p in probability]

    def accept(self, score: float) -> bool:
        config = self.config
        assert isinstance(config, AlignmentConfig)
        return bool(score >= config.min_probability)

    def _align(
        self, source: list[list[str]], target: list[list[str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """eflomal's forward and reverse sentence scores, in a temporary directory."""
        config = self.config
        assert isinstance(config, AlignmentConfig)
        with tempfile.TemporaryDirectory(prefix="mtcore-eflomal-") as name:
            work = Path(name)
            binary = work / "eflomal"
            binary.write_bytes(seeded_binary())
            binary.chmod(0o700)
            digest = hashlib.sha256(f"mtcore-eflomal-{config.seed}".encode()).digest()
            seed = struct.unpack("<Q", digest[:8])[0] or 1  # xorshift needs a non-zero state
            (work / SEED_FILE.rstrip(b"\0").decode()).write_bytes(struct.pack("<Q", seed))
            write_eflomal_text(work / "source", source)
            write_eflomal_text(work / "target", target)
            cmd = [str(binary), "-m", str(config.model), "-M", str(config.score_model)]
            cmd += ["-s", "source", "-t", "target", "-F", "forward", "-R", "reverse", "-q"]
            cmd += ["-n", str(config.samplers), "-N", str(config.null_prior)]
            cmd += iterations(config.model, len(source), config.rel_iterations)
            self._run(cmd, work)
            return self._scores(work / "forward", len(source)), self._scores(
                work / "reverse", len(source)
            )

    @staticmethod
    def _run(cmd: list[str], work: Path) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        try:
            done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        except OSError as exc:
            raise PluginError(
                f"filter 'alignment': cannot run eflomal from {work} ({exc}); if the temporary "
                f"directory is mounted noexec, point TMPDIR at one that is not"
            ) from None
        if done.returncode != 0:
            raise PluginError(
                f"filter 'alignment': eflomal failed (exit status {done.returncode}): "
                f"{done.stderr.strip()[-2000:]}"
            )

    @staticmethod
    def _scores(path: Path, expected: int) -> np.ndarray:
        values = np.array([float(v) for v in path.read_text().split()], dtype=np.float64)
        if len(values) != expected:
            raise PluginError(
                f"filter 'alignment': eflomal wrote {len(values)} scores to {path.name} for "
                f"{expected} pairs"
            )
        return values
