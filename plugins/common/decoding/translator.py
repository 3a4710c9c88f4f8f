"""Loaded fairseq translation models, shared by the translate step and the model scorers: one
checkpoint or an ensemble sharing one dictionary, with weights, in either reading direction.

:class:`Translator` runs fairseq's beam search or sampling. Its output does not depend on the
batch a sentence lands in: fairseq caps the output length of a whole batch at ``a * longest
source + b``, so a short sentence batched with a long one could run past its own cap; here
each sentence is held to the cap it would have alone (:func:`limit_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtcore.api import Artifact, DataError, Stats
from mtcore_plugins.common.fairseq.checkpoints import first_difference
from mtcore_plugins.common.fairseq.setup import (
    add_safe_globals,
    importing_fairseq,
    register_models,
)
from mtcore_plugins.common.text.spm import load_spm

# NT5 §4.4 (footnote 7) ensembles up to eight models; Xiaomi §3.3 and HW-TSC §5.3 four.
MODEL_ROLES = ("model", *(f"model{i}" for i in range(2, 17)))

Hyp = tuple[str, float]
"""A hypothesis: its text and its mean log-probability per target token (EOS included)."""


@dataclass
class DecodeJob:
    """What a worker process needs to load the models (picklable, unlike a StepContext): the
    step's id for messages, its model and ``spm`` inputs, and counters for this shard."""

    step_id: str
    inputs: dict[str, Artifact]
    stats: Stats = field(default_factory=Stats)
    registry: Any = None


@dataclass
class Ensemble:
    """Loaded models (weights applied), their dictionaries and SentencePiece model."""

    models: list[Any]
    src_dict: Any
    tgt_dict: Any
    spm: Any
    direction: str
    max_source: int | None
    max_target: int | None
    device: str = "cpu"


def check_members(
    src: str, tgt: str, weights: dict[str, float], step_id: str, members: dict[str, Artifact],
    tagged: bool = False,
) -> str:  # fmt: skip
    """Every model translates src->tgt in one direction with the first model's dictionaries;
    every weighted role is connected. Returns the direction (l2r or r2l). A model continued
    from a pretrained M2M-100/NLLB one reads language tokens, which only ``translate`` gives
    (``tagged``)."""
    for role in weights:
        if role not in members:
            raise DataError(
                f"{step_id}: weights names input {role!r}, which is not connected "
                f"(connected: {', '.join(members)})"
            )
    first = members["model"]
    for role, member in members.items():
        meta, where = member.meta, f"{step_id}: input {role} ({member.path})"
        check_model(where, meta, src, tgt)
        if "language_tokens" in meta and not tagged:
            raise DataError(
                f"{where} was continued from the pretrained model "
                f"{(meta.get('pretrained') or {}).get('id')} and reads its language tokens, "
                "which only the translate step writes (this step reads the recipe's "
                "SentencePiece pieces)"
            )
        if meta.get("direction", "l2r") != first.meta.get("direction", "l2r"):
            raise DataError(
                f"{where} is {meta.get('direction', 'l2r')}, input model is "
                f"{first.meta.get('direction', 'l2r')}: an ensemble decodes in one direction"
            )
        for lang in (src, tgt):
            name = f"dict.{lang}.txt"
            difference = first_difference(first.path / name, member.path / name)
            if difference:
                raise DataError(
                    f"{where}: its dictionary differs from input model's ({difference}); an "
                    "ensemble needs one dictionary (binarize every model's data with one "
                    "SentencePiece model and dictionary)"
                )
    return str(first.meta.get("direction", "l2r"))


def check_model(where: str, meta: dict[str, Any], src: str, tgt: str) -> None:
    """The artifact ``meta`` describes is a trained fairseq model for src->tgt."""
    if meta.get("type") != "fairseq-model":
        raise DataError(f"{where} is not a fairseq model (artifact type {meta.get('type')!r})")
    if (meta.get("src"), meta.get("tgt")) != (src, tgt):
        raise DataError(
            f"{where} translates {meta.get('src')}->{meta.get('tgt')}, "
            f"not {src}->{tgt} (check src/tgt)"
        )


def load_ensemble(
    src: str,
    tgt: str,
    members: dict[str, Artifact],
    spm: Path | None,
    plugins: Sequence[str],
    weights: dict[str, float],
    step_id: str,
    registry: Any = None,
    device: str = "auto",
) -> Ensemble:
    """The checked, loaded, weighted ensemble of ``members`` (role -> model artifact), on the
    GPU when ``device`` is cuda, or auto and torch sees one (a Ray worker placed with
    ``gpus_per_worker``), else on the CPU. ``spm`` None: models continued from a pretrained
    model, whose text the caller segments with their tokenizer."""
    with importing_fairseq():
        from fairseq import checkpoint_utils, utils

    direction = check_members(src, tgt, weights, step_id, members, spm is None)
    # Unregistered architectures make fairseq fail later with a misleading IndexError.
    names = [*plugins, *(n for m in members.values() for n in m.names("models"))]
    register_models(list(dict.fromkeys(names)), registry)
    add_safe_globals()
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(m.file("checkpoint", "checkpoint.pt")) for m in members.values()],
        arg_overrides={"data": str(members["model"].path), "source_lang": src, "target_lang": tgt},
    )
    where = pick_device(device)
    for model in models:
        model.eval()
        if where != "cpu":
            model.to(where)
    weigh_models(models, [weights.get(role, 1.0) for role in members])
    limits = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])
    return Ensemble(
        models,
        task.source_dictionary,
        task.target_dictionary,
        None if spm is None else load_spm(spm),
        direction,
        limits[0] if limits else None,
        limits[1] if limits else None,
        where,
    )


def pick_device(device: str) -> str:
    """cpu or cuda for a ``device`` setting of auto, cpu or cuda."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise DataError("device: cuda, but torch sees no GPU (torch.cuda.is_available() is False)")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def weigh_models(models: list[Any], weights: list[float]) -> None:
    """fairseq's ensemble averages next-token probabilities uniformly: log(sum_i p_i / n). A
    model whose log-probabilities are shifted by log(n * w_i) (weights normalised to sum to 1)
    turns that into log(sum_i w_i p_i), the weighted mixture."""
    total = sum(weights)
    for model, weight in zip(models, weights, strict=True):
        offset = math.log(len(models) * weight / total)
        normalized = model.get_normalized_probs
        # Force decoding mixes the members' token probabilities itself (force.py).
        model.mtcore_log_weight = math.log(weight / total)
        model.mtcore_normalized_probs = normalized
        if offset == 0.0:
            continue

        def shifted(
            net_output: Any,
            log_probs: bool,
            sample: Any = None,
            *,
            _probs: Any = normalized,
            _offset: float = offset,
        ) -> Any:
            probs = _probs(net_output, log_probs, sample)
            return probs + _offset if log_probs else probs * math.exp(_offset)

        model.get_normalized_probs = shifted


def limit_rows(generator: Any, max_len_a: float, max_len_b: int) -> None:
    """Holds every row of a batch to its own sentence's output cap ``a * source_tokens + b``
    (EOS included in the count, as fairseq counts a lone sentence), forcing EOS where fairseq
    would force it for that sentence decoded alone. fairseq itself caps the batch at its
    longest source. The source lengths travel with the encoder output, which fairseq reorders
    as beams are pruned and sentences finish."""
    ensemble = generator.model
    forward = ensemble.forward_decoder
    eos, cap = generator.eos, generator.max_len - 1

    def forward_decoder(
        tokens: Any, encoder_outs: Any, incremental_states: Any, temperature: float = 1.0
    ) -> Any:
        lprobs, attn = forward(tokens, encoder_outs, incremental_states, temperature)
        lengths = source_lengths(encoder_outs)
        if lengths is not None:
            step = tokens.size(1) - 1
            limit = (lengths.double() * max_len_a + max_len_b).floor().clamp(max=cap)
            over = limit <= step
            if bool(over.any()):
                kept = lprobs[over, eos].clone()
                lprobs[over] = -math.inf
                lprobs[over, eos] = kept
        return lprobs, attn

    ensemble.forward_decoder = forward_decoder


def block_repeats_by_step(generator: Any) -> None:
    """Makes ``no_repeat_ngram_size`` work without fairseq's CUDA extension: fairseq 0.12's
    Python path compares the last n-1 columns of the whole token buffer (padding past the
    current step) with the hypothesis' n-grams, so it never blocks anything; it is given the
    tokens up to the current step instead, what the CUDA kernel reads."""
    blocker = generator.repeat_ngram_blocker
    if blocker is None or blocker.use_extension:
        return
    python_path = blocker._no_repeat_ngram

    def by_step(tokens: Any, lprobs: Any, bsz: int, beam_size: int, step: int) -> Any:
        return python_path(tokens[:, : step + 1], lprobs, bsz, beam_size, step)

    blocker._no_repeat_ngram = by_step


def source_lengths(encoder_outs: Any) -> Any:
    """Source tokens (EOS included) of each row of the first model's encoder output."""
    if not encoder_outs:
        return None
    out = encoder_outs[0]
    if out.get("src_lengths"):
        return out["src_lengths"][0].view(-1)
    if out.get("encoder_padding_mask"):
        mask = out["encoder_padding_mask"][0]
        return (~mask).sum(dim=1)
    return None


class Translator:
    """Loaded checkpoints (one, or an ensemble) with their dictionaries, SentencePiece model
    and search (beam search, or sampling with ``config.sampling``). ``ctx`` is the step's
    context or a :class:`DecodeJob`: its model and ``spm`` inputs are read, its ``stats``
    count empty and truncated inputs.

    ``tags``: the members were continued from a pretrained M2M-100/NLLB model (one tokenizer
    and language tokens, :class:`~mtcore_plugins.steps._pretrained_init.LanguageTokens`): each
    source is the tokenizer's pieces after the source token, and the target token is every
    hypothesis's forced first token (fairseq's ``prefix_tokens``), as M2M-100's own decoding
    (``--decoder-langtok``) does. CTranslate2 decodes such a model alone; an ensemble of them
    decodes here."""

    def __init__(self, config: Any, ctx: Any, tags: Any = None) -> None:
        with importing_fairseq():
            from fairseq import search
            from fairseq.sequence_generator import SequenceGenerator

        members = {role: ctx.inputs[role] for role in MODEL_ROLES if role in ctx.inputs}
        self.tags = tags
        loaded = load_ensemble(
            config.src,
            config.tgt,
            members,
            None if tags is not None else ctx.inputs["spm"].path,
            config.models,
            config.weights,
            ctx.step_id,
            getattr(ctx, "registry", None),
            getattr(config, "device", "auto"),
        )
        self.config, self.ctx, self.models = config, ctx, loaded.models
        self.direction, self.spm = loaded.direction, loaded.spm
        self.src_dict, self.tgt_dict = loaded.src_dict, loaded.tgt_dict
        self.max_source = loaded.max_source
        self.device = loaded.device
        sampling = getattr(config, "sampling", False)
        # the forced target token is not counted in the output cap (CTranslate2's prefix is not)
        extra = 0 if tags is None else len(tags.prefix)
        strategy = None
        if sampling:
            strategy = search.Sampling(self.tgt_dict, config.sampling_topk, config.sampling_topp)
        self.generator = SequenceGenerator(
            self.models,
            self.tgt_dict,
            beam_size=self.beam_size,
            len_penalty=config.lenpen,
            max_len_a=config.max_len_a,
            max_len_b=config.max_len_b + extra,
            temperature=getattr(config, "temperature", 1.0),
            search_strategy=strategy,
            no_repeat_ngram_size=getattr(config, "no_repeat_ngram_size", 0),
        )
        limit_rows(self.generator, config.max_len_a, config.max_len_b + extra)
        block_repeats_by_step(self.generator)

    @property
    def beam_size(self) -> int:
        """Beam width; under sampling, the number of samples drawn per sentence."""
        if getattr(self.config, "sampling", False):
            return max(1, getattr(self.config, "nbest", 0))
        return int(self.config.beam)

    def translate(self, lines: list[str]) -> list[str]:
        """Translations of ``lines`` in their order (empty for an empty source)."""
        outputs = [""] * len(lines)
        for batch, sources in self.batches(lines):
            for index, text in zip(batch, self._generate(sources), strict=True):
                outputs[index] = text
        return outputs

    def translate_nbest(self, lines: list[str], n: int) -> list[list[Hyp]]:
        """Up to ``n`` hypotheses per line, best first, each with its mean log-probability per
        token; an empty source gets one empty hypothesis scored 0."""
        outputs: list[list[Hyp]] = [[("", 0.0)] for _ in lines]
        for batch, sources in self.batches(lines):
            for index, hyps in zip(batch, self._search(sources), strict=True):
                found = [(self._decode(h["tokens"]), mean_score(h)) for h in hyps[:n]]
                outputs[index] = found or [("", 0.0)]
        return outputs

    def batches(self, lines: list[str]) -> Iterator[tuple[list[int], list[Any]]]:
        """(indices, source token tensors) batches of the non-empty lines, by length."""
        if self.tags is not None:
            encoded = self.tags.encode(lines)
        else:
            encoded = self.spm.encode(lines, out_type=str)
        tokens = [self._encode(pieces) for pieces in encoded]
        order = sorted(
            (i for i in range(len(lines)) if len(tokens[i]) > 1), key=lambda i: (len(tokens[i]), i)
        )
        self.ctx.stats.add("translate.empty", len(lines) - len(order))
        for batch in self._batches(order, tokens):
            yield batch, [tokens[i] for i in batch]

    def _encode(self, pieces: list[str]) -> Any:
        ids = self.src_dict.encode_line(
            " ".join(pieces), add_if_not_exist=False, append_eos=True
        ).long()
        if self.max_source is not None and len(ids) > self.max_source:
            self.ctx.stats.add("translate.truncated")
            ids = ids[: self.max_source].clone()
            ids[-1] = self.src_dict.eos()
        return ids

    def _batches(self, order: list[int], tokens: list[Any]) -> Iterator[list[int]]:
        batch: list[int] = []
        longest = 0
        limit = self.config.max_tokens
        for index in order:
            longest = max(longest, len(tokens[index]))
            over_tokens = limit is not None and batch and longest * (len(batch) + 1) > limit
            if batch and (len(batch) >= self.config.batch_size or over_tokens):
                yield batch
                batch, longest = [], len(tokens[index])
            batch.append(index)
        if batch:
            yield batch

    def _search(self, sources: list[Any]) -> list[list[dict[str, Any]]]:
        """fairseq's hypotheses of each source, best first."""
        import torch
        from fairseq.data import data_utils

        src_tokens = data_utils.collate_tokens(
            sources, self.src_dict.pad(), self.src_dict.eos(), left_pad=True
        )
        sample = {
            "net_input": {
                "src_tokens": src_tokens,
                "src_lengths": torch.tensor([len(s) for s in sources]),
            }
        }
        prefix = None
        if self.tags is not None:  # the target language token first, as the data's targets
            token = self.tgt_dict.index(self.tags.prefix[0])
            prefix = torch.full((len(sources), 1), token, dtype=torch.long)
        if self.device != "cpu":
            sample = {"net_input": {k: v.to(self.device) for k, v in sample["net_input"].items()}}
            prefix = None if prefix is None else prefix.to(self.device)
        with torch.inference_mode():
            return list(self.generator.generate(self.models, sample, prefix_tokens=prefix))

    def _generate(self, sources: list[Any]) -> list[str]:
        return [self._decode(h[0]["tokens"]) if h else "" for h in self._search(sources)]

    def _decode(self, tokens: Any) -> str:
        pieces = self.tgt_dict.string(tokens.int().cpu()).split()
        if self.tags is not None:  # drops the language token
            return str(self.tags.decode(pieces))
        if self.direction == "r2l":  # the model wrote the sentence last piece first
            pieces.reverse()
        return str(self.spm.decode_pieces(pieces))


def mean_score(hypo: dict[str, Any]) -> float:
    """Mean log-probability per output token, EOS included (fairseq's score at lenpen 1)."""
    scores = hypo["positional_scores"]
    return float(scores.mean()) if len(scores) else 0.0
