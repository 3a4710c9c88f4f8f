"""Force decoding: log P(target | source) of given pairs under a loaded ensemble, the
translation-model rerank features (NT5 §5.1 "computed the score by force-decoding a candidate
from their input"; Xiaomi §3.4 likelihood scores).

An n-best list repeats each source n times; each distinct source is encoded once per batch
and its encoder output is shared by all of its targets (fairseq's ``--score-reference`` encodes
every pair). An ensemble's token probability is the weighted mixture of its members', as in
ensemble decoding. A right-to-left model reads the target pieces last first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mtcore_plugins.common.decoding.translator import Ensemble


class ForceDecoder:
    """``score(sources, targets)`` -> (summed natural-log probability, target tokens with
    EOS) per pair. Batches hold at most ``max_tokens`` padded target tokens and, where
    ``max_sentences`` is set, at most that many pairs. The one fairseq force decoder: the
    rerank scorers and the denoise filter both score through it."""

    def __init__(
        self, ensemble: Ensemble, max_tokens: int = 4096, max_sentences: int | None = None
    ) -> None:
        self.ensemble = ensemble
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences

    def score(
        self, sources: Sequence[str], targets: Sequence[str], overlong: float | None = None
    ) -> tuple[Any, Any]:
        """A side longer than the models' positions is scored on the part the models can read;
        with ``overlong`` set, such a pair is not scored but gets that value (the denoise
        filter's NaN: a truncated target would be scored on part of the sentence)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
        e = self.ensemble
        unique = list(dict.fromkeys(sources))
        row_of = {text: row for row, text in enumerate(unique)}
        source_of = [row_of[text] for text in sources]
        src_pieces, tgt_pieces = self._pieces(unique), self._pieces(targets)
        src_ids = [self._ids(p, e.src_dict, e.max_source, False) for p in src_pieces]
        reverse = e.direction == "r2l"
        tgt_ids = [self._ids(p, e.tgt_dict, e.max_target, reverse) for p in tgt_pieces]
        if overlong is None:
            return self.score_ids(src_ids, tgt_ids, source_of)
        rows = [
            i
            for i, row in enumerate(source_of)
            if fits(src_pieces[row], e.max_source) and fits(tgt_pieces[i], e.max_target)
        ]
        sums = np.full(len(targets), overlong, dtype=np.float64)
        counts = np.array([len(t) for t in tgt_ids], dtype=np.int64)
        if rows:
            scored, _ = self.score_ids(
                src_ids, [tgt_ids[i] for i in rows], [source_of[i] for i in rows]
            )
            sums[rows] = scored
        return sums, counts

    def score_ids(
        self, src_ids: list[Any], tgt_ids: list[Any], source_of: list[int] | None = None
    ) -> tuple[Any, Any]:
        """The same from token ids (EOS last; targets in the models' reading order): target
        ``i`` reads source ``source_of[i]`` (by default source ``i``)."""
        import torch

        if source_of is None:
            source_of = list(range(len(tgt_ids)))
        of_source: list[list[int]] = [[] for _ in src_ids]
        for index, row in enumerate(source_of):
            of_source[row].append(index)
        sums = np.zeros(len(tgt_ids))
        counts = np.array([len(t) for t in tgt_ids], dtype=np.int64)
        with torch.inference_mode():
            for rows in self._batches(src_ids, tgt_ids, of_source):
                pairs = [i for row in rows for i in of_source[row]]
                expand = [k for k, row in enumerate(rows) for _ in of_source[row]]
                batch = [src_ids[r] for r in rows]
                sums[pairs] = self._batch(batch, [tgt_ids[i] for i in pairs], expand)
        return sums, counts

    def _pieces(self, texts: Sequence[str]) -> list[list[str]]:
        return list(self.ensemble.spm.encode(list(texts), out_type=str))

    @staticmethod
    def _ids(pieces: list[str], dictionary: Any, limit: int | None, reverse: bool) -> Any:
        if reverse:
            pieces = pieces[::-1]
        ids = dictionary.encode_line(" ".join(pieces), add_if_not_exist=False, append_eos=True)
        ids = ids.long()
        if limit is not None and len(ids) > limit:  # scored on the part the model can read
            ids = ids[:limit].clone()
            ids[-1] = dictionary.eos()
        return ids

    def _batches(
        self, src_ids: list[Any], tgt_ids: list[Any], of_source: list[list[int]]
    ) -> Iterator[list[int]]:
        """Distinct sources, shortest first, grouped while their targets fit ``max_tokens``
        (and ``max_sentences``)."""
        order = sorted(
            (r for r in range(len(src_ids)) if of_source[r]), key=lambda r: (len(src_ids[r]), r)
        )
        batch: list[int] = []
        pairs = longest = 0
        for row in order:
            mine = of_source[row]
            widest = max(len(tgt_ids[i]) for i in mine)
            grown = max(longest, widest) * (pairs + len(mine))
            full = self.max_sentences is not None and pairs + len(mine) > self.max_sentences
            if batch and (grown > self.max_tokens or full):
                yield batch
                batch, pairs, longest = [], 0, 0
            batch.append(row)
            pairs += len(mine)
            longest = max(longest, widest)
        if batch:
            yield batch

    def _batch(self, sources: list[Any], targets: list[Any], expand: list[int]) -> Any:
        """Summed log-probabilities of ``targets``; target k reads source ``expand[k]``."""
        import torch
        from fairseq.data import data_utils

        e = self.ensemble
        pad, eos = e.tgt_dict.pad(), e.tgt_dict.eos()
        net_input = {
            "src_tokens": data_utils.collate_tokens(
                sources, e.src_dict.pad(), e.src_dict.eos(), left_pad=True
            ),
            "src_lengths": torch.tensor([len(s) for s in sources]),
        }
        target = data_utils.collate_tokens(targets, pad, eos, left_pad=False)
        previous = data_utils.collate_tokens(
            targets, pad, eos, left_pad=False, move_eos_to_beginning=True
        )
        order = torch.tensor(expand, dtype=torch.long)
        if e.device != "cpu":
            net_input = {k: v.to(e.device) for k, v in net_input.items()}
            target, previous, order = (t.to(e.device) for t in (target, previous, order))
        picked = []
        for model in e.models:
            encoded = model.encoder.forward_torchscript(net_input)
            encoded = model.encoder.reorder_encoder_out(encoded, order)
            output = model.decoder(previous, encoder_out=encoded)
            picked.append(token_log_probs(model, output, target) + model_log_weight(model))
        mixed = picked[0] if len(picked) == 1 else torch.logsumexp(torch.stack(picked), dim=0)
        mixed = mixed.masked_fill(target.eq(pad), 0.0)
        return mixed.sum(dim=1).double().cpu().numpy()


def fits(pieces: list[str], limit: int | None) -> bool:
    """Whether the pieces and EOS fit in ``limit`` positions."""
    return limit is None or len(pieces) + 1 <= limit


def token_log_probs(model: Any, output: Any, target: Any) -> Any:
    """log p(target token) at each position, natural log, float32."""
    decoder = model.decoder
    if getattr(decoder, "adaptive_softmax", None) is None:
        logits = output[0].float()
        chosen = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        return chosen - torch_logsumexp(logits)
    normalized = getattr(model, "mtcore_normalized_probs", model.get_normalized_probs)
    lprobs = normalized(output, log_probs=True, sample={"target": target})
    return lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).float()


def torch_logsumexp(logits: Any) -> Any:
    import torch

    return torch.logsumexp(logits, dim=-1)


def model_log_weight(model: Any) -> float:
    """log of the model's normalised ensemble weight (0 for a lone model)."""
    return float(getattr(model, "mtcore_log_weight", 0.0))


def normalize(sums: Any, counts: Any, how: str) -> list[float]:
    """Feature values from summed log-probabilities: ``sum``; ``token``, the mean per token;
    ``prob``, the per-token probability exp(mean) in [0, 1] (NT5 §5.1: P_j(s, e) in [0, 1])."""
    sums = np.asarray(sums, dtype=np.float64)
    counts = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    if how == "sum":
        values = sums
    elif how == "token":
        values = sums / counts
    elif how == "prob":
        values = np.exp(sums / counts)
    else:
        raise ValueError(f"unknown normalization {how!r} (valid: sum, token, prob)")
    return [float(v) if math.isfinite(v) else -1e9 for v in values]
