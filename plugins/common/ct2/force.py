"""Force decoding with CTranslate2's ``score_batch``: log P(target | source) of given pairs under
one converted model, the ``forward`` / ``backward`` rerank features (NT5 §5.1, Xiaomi §3.4)
at CTranslate2's speed. Same contract as
:class:`~mtcore_plugins.common.decoding.force.ForceDecoder`: summed natural-log probability with
EOS, and the target's tokens with EOS, per pair; sides longer than the model's positions are scored
on the part the model can read, as fairseq's force decoder scores them (or get a given value: the
denoise filter's NaN). Ensembles stay with fairseq (CTranslate2 has none).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtcore.api import PluginError
from mtcore_plugins.common.ct2.convert import limits
from mtcore_plugins.common.decoding.force import fits
from mtcore_plugins.common.text.spm import load_spm


class Ct2ForceDecoder:
    """``score(sources, targets)`` -> (sums, counts) on a converted model; ``direction`` r2l
    reads the target pieces last first. Batches hold at most ``max_tokens`` target tokens."""

    def __init__(
        self, model_dir: Path, spm: Path | None, direction: str, max_tokens: int = 4096,
        threads: int = 0, tokens: Any = None,
    ) -> None:  # fmt: skip
        import ctranslate2

        self.model = ctranslate2.Translator(
            str(model_dir), device="cpu", inter_threads=1, intra_threads=threads
        )
        # a fairseq model's SentencePiece model, or a pretrained model's tokenizer
        # (pretrained.PretrainedTokens: the source with its language token and EOS, the
        # target language as a prefix that is given, not scored)
        self.spm = load_spm(spm) if spm is not None else None
        self.tokens = tokens
        self.prefix: list[str] = list(getattr(tokens, "prefix", []))
        self.direction, self.max_tokens = direction, max_tokens
        self.max_source, self.max_target = limits(model_dir)

    def score(
        self, sources: Sequence[str], targets: Sequence[str], overlong: float | None = None
    ) -> tuple[Any, Any]:
        """With ``overlong`` set, a pair with a side longer than the model's positions is not
        scored on its readable part but gets that value (the denoise filter's NaN)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
        if self.tokens is not None:
            src = self.tokens.encode(list(sources))
            tgt = self.tokens.encode_target(list(targets))
        else:
            assert self.spm is not None
            src = self.spm.encode(list(sources), out_type=str)
            tgt = self.spm.encode(list(targets), out_type=str)
        rows = [
            i
            for i, (a, b) in enumerate(zip(src, tgt, strict=True))
            if overlong is None or (fits(a, self.max_source) and fits(b, self.max_target))
        ]
        src = [_cut(p, self.max_source) for p in src]
        tgt = [_cut(p, self.max_target) for p in tgt]
        if self.direction == "r2l":
            tgt = [pieces[::-1] for pieces in tgt]
        results = (
            self.model.score_batch(
                [src[i] for i in rows],
                [[*self.prefix, *tgt[i]] for i in rows],
                max_batch_size=self.max_tokens,
                batch_type="tokens",
                max_input_length=0,
            )
            if rows
            else []
        )
        sums = np.full(len(src), np.nan if overlong is None else overlong)
        skip = len(self.prefix)  # the language token is given, not predicted
        for i, result in zip(rows, results, strict=True):
            sums[i] = float(sum(result.log_probs[skip:]))
        counts = np.array([len(t) + 1 for t in tgt], dtype=np.int64)
        return sums, counts


def _cut(pieces: list[str], limit: int | None) -> list[str]:
    """The pieces a model of ``limit`` positions reads (EOS takes the last position)."""
    return pieces if limit is None or fits(pieces, limit) else pieces[: limit - 1]


def ct2_force_decoder(
    members: dict[str, Any],
    reads: str,
    writes: str,
    spm: Path,
    config: Any,
    where: str,
    threads: int = 0,
) -> Ct2ForceDecoder | None:
    """A CTranslate2 force decoder of ``members`` (role -> checked model artifact) for the
    ``config``'s ``backend`` (ctranslate2 or auto; its ``plugins`` and ``max_tokens`` too), or
    None for fairseq (backend fairseq, or auto and the models do not convert: logged).
    ``threads`` 0: CTranslate2's default."""
    backend = config.backend
    if backend == "fairseq":
        return None
    import logging

    from mtcore_plugins.common.ct2.convert import check, converted

    model = members["model"]
    reasons = (
        [f"an ensemble of {len(members)} models (CTranslate2 scores one model)"]
        if len(members) > 1
        else check(model, list(config.plugins))
    )
    if reasons:
        if backend == "ctranslate2":
            raise PluginError(f"{where}: backend ctranslate2 cannot score: {'; '.join(reasons)}")
        logging.getLogger("mtcore.step").warning(
            "%s: backend auto scores with fairseq: %s", where, "; ".join(reasons)
        )
        return None
    path = converted(model, reads, writes, list(config.plugins))
    direction = str(model.meta.get("direction", "l2r"))
    return Ct2ForceDecoder(path, spm, direction, config.max_tokens, threads)
