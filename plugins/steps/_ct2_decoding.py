"""Beam search, sampling and force decoding of one converted model
(:mod:`~mtcore_plugins.common.ct2.convert`) with CTranslate2, behind the interface of fairseq's
:class:`~mtcore_plugins.common.decoding.translator.Translator`: the same SentencePiece pieces and
truncation, one output per input in input order, an empty output for an empty source, n-best lists
scored by mean log-probability per token (EOS included).

fairseq's search is mirrored where CTranslate2 has the setting: ``min_decoding_length=1``
(fairseq's ``min_len``: no empty hypothesis) and the per-sentence output cap ``a * source_tokens
+ b`` (:func:`~mtcore_plugins.common.decoding.translator.limit_rows`). CTranslate2 caps a whole
batch at one length and stops there without EOS, where fairseq forces EOS and scores it: under beam
search a sentence whose output reaches its own cap is decoded again under it (a greedy output is cut
there), and its capped hypotheses are force-decoded with EOS before they are ranked. Sampling draws
from CTranslate2's own generator, seeded per shard and batch: seeded and resumable, but not
fairseq's samples.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mtcore.api import DataError
from mtcore_plugins.common.ct2.convert import limits
from mtcore_plugins.common.decoding.translator import Hyp
from mtcore_plugins.common.text.spm import load_spm


class Ct2Translator:
    """``translate`` / ``translate_nbest`` as
    :class:`~mtcore_plugins.common.decoding.translator.Translator`'s, on a converted model. ``ctx``
    is a step context or :class:`~mtcore_plugins.common.decoding.translator.DecodeJob` (its ``spm``
    and ``model`` inputs are read, its ``stats`` count empty and truncated inputs)."""

    def __init__(
        self, config: Any, ctx: Any, model_dir: Path, threads: int = 0, tokens: Any = None
    ) -> None:
        import ctranslate2

        self.config, self.ctx = config, ctx
        self.direction = str(ctx.inputs["model"].meta.get("direction", "l2r"))
        # the SentencePiece model of a fairseq model's data, or a pretrained model's tokenizer
        # (pretrained.PretrainedTokens: EOS written by the tokenizer, a target language prefix)
        self.tokens = tokens if tokens is not None else SpmTokens(load_spm(ctx.inputs["spm"].path))
        self.prefix: list[str] = list(getattr(self.tokens, "prefix", []))
        self.eos = 0 if getattr(self.tokens, "eos_included", False) else 1
        self.max_source, self.max_target = limits(model_dir)
        self.device = pick_ct2_device(getattr(config, "device", "auto"))
        self.model = ctranslate2.Translator(
            str(model_dir),
            device=self.device,
            compute_type=getattr(config, "compute_type", "default"),
            inter_threads=1,
            intra_threads=threads or os.cpu_count() or 1,
        )
        self.seed = 0  # the shard's sampling seed, set by the caller before each shard
        self.exact = True  # n-best scores force-decoded again (translate_nbest)
        self._batches_done = 0

    def translate(self, lines: list[str]) -> list[str]:
        """Translations of ``lines`` in their order (empty for an empty source)."""
        return [found[0][0] for found in self.translate_nbest(lines, 1, scores=False)]

    def translate_nbest(self, lines: list[str], n: int, scores: bool = True) -> list[list[Hyp]]:
        """Up to ``n`` hypotheses per line, best first, each with its mean log-probability per
        token; an empty source gets one empty hypothesis scored 0. With ``scores``, the
        hypotheses are force-decoded again: CTranslate2's search scores renormalise the first
        step without EOS (``min_decoding_length``), fairseq's do not."""
        self.exact = scores
        outputs: list[list[Hyp]] = [[("", 0.0)] for _ in lines]
        self._batches_done = 0
        for batch, sources in self.batches(lines):
            for index, hyps in zip(batch, self._search(sources, n), strict=True):
                outputs[index] = hyps or [("", 0.0)]
        return outputs

    def batches(self, lines: list[str]) -> Iterator[tuple[list[int], list[list[str]]]]:
        """(indices, source pieces) batches of the non-empty lines, by length, as fairseq's
        translator batches them (``batch_size`` sentences, ``max_tokens`` padded tokens)."""
        pieces = [self._truncate(p) for p in self.tokens.encode(lines)]
        order = sorted(
            (i for i in range(len(lines)) if pieces[i]), key=lambda i: (len(pieces[i]), i)
        )
        self.ctx.stats.add("translate.empty", len(lines) - len(order))
        batch: list[int] = []
        longest, limit = 0, self.config.max_tokens
        for index in order:
            longest = max(longest, len(pieces[index]) + 1)
            over = limit is not None and batch and longest * (len(batch) + 1) > limit
            if batch and (len(batch) >= self.config.batch_size or over):
                yield batch, [pieces[i] for i in batch]
                batch, longest = [], len(pieces[index]) + 1
            batch.append(index)
        if batch:
            yield batch, [pieces[i] for i in batch]

    def _truncate(self, pieces: list[str]) -> list[str]:
        """A source longer than the model's positions (EOS included) keeps its first pieces."""
        if self.max_source is not None and len(pieces) + self.eos > self.max_source:
            self.ctx.stats.add("translate.truncated")
            if not self.eos:  # the tokenizer's EOS stays last
                return [*pieces[: self.max_source - 1], pieces[-1]]
            return pieces[: self.max_source - 1]
        return pieces

    def cap(self, pieces: list[str]) -> int:
        """Tokens a hypothesis of this source may have before EOS (fairseq's a*src + b, with
        the source's EOS counted, within the decoder's positions; EOS forced after them)."""
        config = self.config
        limit = math.floor((len(pieces) + self.eos) * config.max_len_a + config.max_len_b)
        if self.max_target is not None:  # fairseq: max_len = positions - 1, cap max_len - 1
            limit = min(limit, self.max_target - 2)
        return max(limit, 1)

    def _search(self, sources: list[list[str]], n: int) -> list[list[Hyp]]:
        caps = [self.cap(s) for s in sources]
        top = max(caps)
        found = self._decode(sources, top, n)
        # An output that reached its cap: fairseq forces EOS there for every live beam and
        # ranks them with EOS scored. Under beam search, sentences whose cap is below the
        # batch's are decoded again under their own cap (those sharing one together), with
        # the whole beam; a greedy output is the same up to its cap, so it is cut there
        # instead. Capped hypotheses are then force-decoded with EOS (run-on outputs of weak
        # models), in one call for the batch.
        greedy = self.config.beam == 1 and not getattr(self.config, "sampling", False)
        again: dict[int, list[int]] = {}
        for k, hyps in enumerate(found):
            if caps[k] < top and any(len(tokens) >= caps[k] for tokens, _ in hyps):
                if greedy:
                    found[k] = [(tokens[: caps[k]], total) for tokens, total in hyps]
                else:
                    again.setdefault(caps[k], []).append(k)
        for cap, rows in again.items():
            for k, hyps in zip(rows, self._decode([sources[k] for k in rows], cap, n), strict=True):
                found[k] = hyps
        rescored = self._rescore(sources, found, caps)
        out = []
        for k, hyps in enumerate(found):
            if k in rescored:  # ranked as fairseq ranks finished hypotheses
                hyps.sort(key=lambda h: -h[1] / (len(h[0]) + 1) ** self.config.lenpen)
            keep = hyps[: max(1, n)]
            out.append([(self._text(tokens), total / (len(tokens) + 1)) for tokens, total in keep])
        return out

    def _rescore(
        self, sources: list[list[str]], found: list[list[tuple[list[str], float]]], caps: list[int]
    ) -> set[int]:
        """Hypotheses of their sentence's cap (all, with ``exact``) get the summed
        log-probability of their force-decoding with EOS (CTranslate2 stops at the cap without
        one), in place; returns the sentences that had any."""
        pending = [
            (k, i)
            for k, hyps in enumerate(found)
            for i, (tokens, _) in enumerate(hyps)
            if self.exact or len(tokens) >= caps[k]
        ]
        if pending:
            scored = self.model.score_batch(
                [sources[k] for k, _ in pending],
                [[*self.prefix, *found[k][i][0]] for k, i in pending],
                max_input_length=0,
            )
            skip = len(self.prefix)  # the language token is given, not predicted
            for (k, i), result in zip(pending, scored, strict=True):
                found[k][i] = (found[k][i][0], float(sum(result.log_probs[skip:])))
        return {k for k, _ in pending}

    def _decode(
        self, sources: list[list[str]], cap: int, n: int
    ) -> list[list[tuple[list[str], float]]]:
        """(target tokens, summed log-probability with EOS) hypotheses of each source, best
        first: the whole beam under beam search (fairseq ranks every finished one), ``n``
        samples under sampling. One of ``cap`` tokens may lack its EOS score (``_rescore``)."""
        config = self.config
        sampling = bool(getattr(config, "sampling", False))
        options: dict[str, Any] = {
            "max_batch_size": 0,
            "max_input_length": 0,  # truncated already, as fairseq's translator truncates
            "max_decoding_length": cap + len(self.prefix),  # stops there without EOS
            "min_decoding_length": 1 + len(self.prefix),  # fairseq's min_len: no empty output
            "return_scores": True,
            "length_penalty": config.lenpen,
            "no_repeat_ngram_size": getattr(config, "no_repeat_ngram_size", 0),
        }
        if sampling:
            self._batches_done += 1
            options.update(
                beam_size=1,
                num_hypotheses=max(1, n),
                sampling_topk=0 if config.sampling_topk == -1 else config.sampling_topk,
                sampling_topp=1.0 if config.sampling_topp == -1.0 else config.sampling_topp,
                sampling_temperature=config.temperature,
            )
            import ctranslate2

            ctranslate2.set_random_seed(batch_seed(self.seed, self._batches_done))
        else:
            options.update(beam_size=config.beam, num_hypotheses=config.beam)
        if self.prefix:  # a multilingual model's target language token
            options["target_prefix"] = [self.prefix] * len(sources)
        results = self.model.translate_batch(sources, **options)
        skip = len(self.prefix)
        out = []
        for result in results:
            hyps = [
                (tokens[skip:], score * (len(tokens) - skip + 1) ** config.lenpen)
                for tokens, score in zip(result.hypotheses, result.scores, strict=True)
            ]
            if sampling:  # fairseq returns its samples best first
                hyps.sort(key=lambda h: -h[1] / (len(h[0]) + 1) ** config.lenpen)
            out.append(hyps)
        return out

    def _text(self, tokens: list[str]) -> str:
        if self.direction == "r2l":  # the model wrote the sentence last piece first
            tokens = tokens[::-1]
        return str(self.tokens.decode(list(tokens)))


class SpmTokens:
    """A SentencePiece model as :class:`Ct2Translator`'s tokens (no EOS, no prefix: the
    converted fairseq model adds EOS itself)."""

    def __init__(self, spm: Any) -> None:
        self.spm = spm

    def encode(self, lines: list[str]) -> list[list[str]]:
        return [list(p) for p in self.spm.encode(lines, out_type=str)]

    def decode(self, tokens: list[str]) -> str:
        return str(self.spm.decode_pieces(tokens))


def obstacles(config: Any, members: dict[str, Any], registry: Any = None) -> list[str]:
    """Why the translate step's models and search cannot run on CTranslate2 (empty: they
    can). Checked in the step's process before any shard, from the checkpoints' arguments."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return ["the ctranslate2 package is not installed (requirements/base.txt)"]
    if len(members) > 1:  # CTranslate2 has no ensembles (OpenNMT/CTranslate2 #273)
        return [f"an ensemble of {len(members)} models (CTranslate2 decodes one model)"]
    reasons = []
    if not getattr(config, "sampling", False) and getattr(config, "temperature", 1.0) != 1.0:
        reasons.append("temperature under beam search (CTranslate2 applies it to sampling only)")
    from mtcore_plugins.common.ct2.convert import check

    return reasons + check(members["model"], list(config.models), registry)


def pick_ct2_device(device: str) -> str:
    """cpu or cuda for a ``device`` setting of auto, cpu or cuda, as CTranslate2 sees GPUs."""
    import ctranslate2

    gpus = ctranslate2.get_cuda_device_count()
    if device == "cuda" and not gpus:
        raise DataError("device: cuda, but CTranslate2 sees no GPU (get_cuda_device_count() is 0)")
    if device == "auto":
        return "cuda" if gpus else "cpu"
    return device


def batch_seed(seed: int, batch: int) -> int:
    """A nonzero CTranslate2 seed (0 means "random") per (shard seed, batch)."""
    return 1 + (seed * 1_000_003 + batch) % (2**31 - 2)
