"""Word-alignment probability of each pair, from eflomal (Östling & Tiedemann 2016).

Xiaomi §2.2.2 aligns its rule-filtered corpus with fast_align and discards "sentence pairs
with the alignment probability of being each other translation less than 0.1"; Yishu §2.1.1
keeps "the top 80% of sentence pairs based on the alignment score". fast_align is not
installable here; eflomal is the aligner OpusFilter's ``WordAlignFilter`` uses.

One model per corpus. Before any shard is scored, the engine hands the filter a sample of the
corpus (:meth:`AlignmentFilter.fit_size` pairs, default 100,000, evenly spaced over the whole
corpus, of which those the earlier filters of the chain keep); eflomal aligns the sample once,
in both directions, and the links become IBM-1 lexical tables (``_lexicon``): how often each
word was linked to each other word. Every shard is then scored from these fixed tables, as
eflomal's model-1 scorer reads its own counts, per direction
``s = -(1/|t|) * sum_j log max_i p(t_j | s_i)`` (the mean negative log probability of each
target token's best link), and the pair's **alignment probability** is the geometric mean over
both directions,

    p = exp(-(s_forward + s_reverse) / 2)   in (0, 1],

higher is better, compared with ``min_probability`` (0.1, Xiaomi) or ranked (Yishu's top 80 %).
A pair with an empty side, or a side longer than eflomal's 1,023-token limit, gets 0, and so
does every pair when the sample held no alignable pair (the manifest's ``fit.<label>.pairs``).

Why tables and not eflomal per shard: eflomal fits its model on the text it aligns, so a pair's
score depended on the pairs in its shard (``shard_size``), and Xiaomi's absolute 0.1 meant
something else at every shard size. Aligning each shard with priors from the sample (what
OpusFilter's ``WordAlignFilter`` offers) still adds the shard's own counts and a Gibbs run per
shard; scoring from fixed tables reads nothing but the pair and the tables. Measured on 20,000
small_parallel_enja training pairs, every tenth with its target shifted by one line, scored at
2,000- and at 20,000-pair shards:

- eflomal per shard (before): genuine pairs' median 0.039 / 0.088, 13 % / 44 % of them >= 0.1;
  one pair's score moved by up to 0.39 between the two shard sizes (median 53 %);
- eflomal per shard with priors from the whole corpus' alignment: 70 % / 66 % >= 0.1, but
  scores still moved by up to 0.12 (median 10 %), and a shard took longer to align;
- tables (this filter): median 0.088 and 44 % >= 0.1 at both sizes, every score equal bit for
  bit (also through the score step on 1 and 2 workers), and within 4e-6 of eflomal's own
  model-1 scores of the corpus as one batch. Shifted pairs: all below 0.1 (with priors 99.6 %).
  Scoring took 1.3 s a 20,000-pair shard (eflomal per shard: 9-27 s); the fit 10 s.

A larger sample sharpens the tables: fitted on 50,000 pairs, the same genuine pairs' median is
0.11 (54 % >= 0.1); on a 5,000-pair sample of the 20,000, 0.046 (19 %). Xiaomi's threshold
assumes a model of millions of pairs: raise ``sample`` (eflomal's time and the tables' memory
grow with it), or rank instead. Pairs in the sample have their own links left out of the
counts (eflomal's scorer does the same with the current link), so sampled and unsampled pairs
are scored nearly alike (5,000 of 20,000 sampled: medians 0.052 and 0.044).

Called outside the engine (no :meth:`use_fit`), ``score`` fits the tables on the batch itself:
scores then depend on the batch (``batch_dependent``), as before.

Determinism: eflomal's Gibbs sampler seeds itself from ``/dev/urandom`` and has no seed option,
so the filter runs a copy of eflomal's binary in which that path is replaced by the name of a
seed file in the run's temporary directory (a same-length string constant), with OpenMP on
one thread (several threads hand the samplers their random streams in a racy order). The same
sample and ``seed`` then give the same tables, and the same tables the same scores.
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

from pydantic import Field

from mtcore.api import Filter, Pair, PluginConfig, PluginError, worker_memo
from mtcore.api.engine import CorpusFit
from mtcore_plugins.filters._lexicon import Lexicon

MAX_TOKENS = 0x3FF  # eflomal writes longer sentences as empty (MAX_SENT_LEN 0x400)
URANDOM = b"/dev/urandom\0"
SEED_FILE = b"eflomal.seed\0"  # same length: the patched binary opens it in its working dir


class AlignmentConfig(PluginConfig):
    min_probability: float = Field(
        0.1,
        ge=0,
        le=1,
        description="lowest alignment probability kept (Xiaomi §2.2.2 discards below 0.1)",
    )
    sample: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="pairs of the corpus the lexical tables are learnt from, evenly spaced "
        "over it (the whole corpus when it is smaller)",
    )
    model: Literal[1, 2, 3] = Field(
        3, description="eflomal alignment model: 1 IBM-1, 2 HMM, 3 HMM + fertility (default)"
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
    from mtcore_plugins.common.text.tokens import tokens

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
    """eflomal's binary with ``/dev/urandom`` replaced by ``eflomal.seed`` (once per worker)."""

    def build() -> bytes:
        import eflomal

        path = Path(eflomal.__file__).parent / "bin" / "eflomal"
        raw = path.read_bytes()
        if raw.count(URANDOM) != 1:
            raise PluginError(
                f"filter 'alignment': cannot seed {path}: expected one {URANDOM!r} in it, found "
                f"{raw.count(URANDOM)} (the filter is written for eflomal 2.0.0)"
            )
        return raw.replace(URANDOM, SEED_FILE)

    binary: bytes = worker_memo(("seeded eflomal",), build)
    return binary


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


class AlignmentFilter(Filter[AlignmentConfig], CorpusFit):
    """Score: the pair's alignment probability in [0, 1]; accept at ``min_probability``."""

    name = "alignment"
    higher_is_better = True
    batch_dependent = True  # only when scored without a corpus fit: it then fits on the batch
    lexicon: Lexicon | None = None

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        if len(langs) != 2:
            raise PluginError(
                f"filter 'alignment' aligns two sides; the corpus has {len(langs)}: {list(langs)}"
            )

    def fit_size(self) -> int:
        return self.config.sample

    def fit(self, sample: Sequence[Pair], folder: Path) -> None:
        self._learn(*self._sides(sample)).save(folder)

    def use_fit(self, folder: Path) -> None:
        self.lexicon = Lexicon.load(folder)

    def score(self, batch: Sequence[Pair]) -> list[float]:
        if not batch:
            return []
        source, target = self._sides(batch)
        lexicon = self.lexicon or self._learn(source, target)
        if not lexicon.vocab[0]:  # learnt from no pair: nothing vouches for any link
            return [0.0] * len(batch)
        return [
            lexicon.probability(s, t) if _alignable(s, t) else 0.0
            for s, t in zip(source, target, strict=True)
        ]

    def accept(self, score: float) -> bool:
        return bool(score >= self.config.min_probability)

    def _sides(self, pairs: Sequence[Pair]) -> tuple[list[list[str]], list[list[str]]]:
        return (
            tokenized([pair[0] for pair in pairs], self.langs[0]),
            tokenized([pair[1] for pair in pairs], self.langs[1]),
        )

    def _learn(self, source: list[list[str]], target: list[list[str]]) -> Lexicon:
        """Aligns the alignable pairs with eflomal and counts their links."""
        rows = [i for i, (s, t) in enumerate(zip(source, target, strict=True)) if _alignable(s, t)]
        source, target = [source[i] for i in rows], [target[i] for i in rows]
        forward, reverse = self._align(source, target) if rows else ([], [])
        return Lexicon.learn(source, target, forward, reverse)

    def _align(
        self, source: list[list[str]], target: list[list[str]]
    ) -> tuple[list[str], list[str]]:
        """eflomal's forward and reverse links (Moses ``i-j`` lines), in a temporary directory."""
        config = self.config
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
            cmd = [str(binary), "-m", str(config.model), "-s", "source", "-t", "target"]
            cmd += ["-f", "forward", "-r", "reverse", "-q"]
            cmd += ["-n", str(config.samplers), "-N", str(config.null_prior)]
            cmd += iterations(config.model, len(source), config.rel_iterations)
            self._run(cmd, work)
            return _lines(work / "forward", len(source)), _lines(work / "reverse", len(source))

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


def _alignable(source: Sequence[str], target: Sequence[str]) -> bool:
    return 0 < len(source) <= MAX_TOKENS and 0 < len(target) <= MAX_TOKENS


def _lines(path: Path, expected: int) -> list[str]:
    lines = path.read_text().split("\n")[:expected]
    if len(lines) != expected:
        raise PluginError(
            f"filter 'alignment': eflomal wrote {len(lines)} link lines to {path.name} for "
            f"{expected} pairs"
        )
    return lines
