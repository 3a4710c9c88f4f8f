"""Encodes train/valid corpora with SentencePiece and binarizes them with fairseq-preprocess.

``src_sampling`` is subword regularization on the source side of the training data (Kudo
2018; Provilkov et al. 2019's BPE-dropout; Yishu §2.1.3: "exclusively applied to the source
side"): each training source is segmented by a segmentation sampled from the model (a unigram
model samples from its lattice, smoothed by ``alpha``; a BPE model drops each merge with
probability ``alpha``), ``copies`` times with the target repeated. fairseq trains on binarized
data, so the samples are drawn once here, not anew each epoch as the papers do; ``copies``
above 1 gives the model several segmentations of each sentence. The validation data, the
targets and every decoding input keep the single best segmentation.

``cycled`` is training data seen in part, a different part each epoch: Tran et al. (2021)'s
sharding, which Yishu §3.1 follows, "downsized ... the synthetic backtranslation for each
training cycle". It is cut into ``cycle_parts`` parts (line i into part i mod n) and the output
holds one fairseq data directory per part, ``cycle/<k>``: the whole ``train`` split plus part k
(``train1``), the validation data and the one dictionary, built from ``train`` and all of
``cycled``. A train step reading such data gives fairseq the directories as shards
(``dir0:dir1:...``), and epoch e trains on part (e - 1) mod n. The shards' copies of the
shared files are hard links where the filesystem allows them.

``aux`` (with a pretrained model as ``spm``) adds further training inputs in other languages,
each with its own language tokens, to ``train``: multilingual fine-tuning of one direction
(HW-TSC §5.3: "regarding En -> Liv, we use additional data from Et -> Liv and Lv -> Liv, while
for Liv -> En, we use data from Liv -> Et and Liv -> Lv"). The pairs go into ``train``'s files
in the columns of ``src`` and ``tgt``; their tokens tell the model which language each is.
``tags`` are tokens that stay one piece where they stand as words of a source line (tagged
back-translation's ``<BT>``, Caswell et al. 2019, and the noise's ``<blank>``, which a
pretrained model's SentencePiece would cut into ``▁<``, ``BT``, ``>``); ``oov: rare`` gives
them a rare entry's row, as it does Livonian's unknown pieces.

``min_piece_count`` above 1 drops the encoded training pairs (train and aux, after sampling)
that hold a piece rarer than that on its side (:mod:`~mtcore_plugins.steps._rare_pieces`,
Xiaomi §4.1), before the dictionary is built; counted as ``binarize.rare_piece_pairs_dropped``.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

from mtcore.api import (
    Artifact,
    Corpus,
    DataError,
    Step,
    StepContext,
    StepError,
    write_artifact_meta,
)
from mtcore.api.engine import batched, run_logged
from mtcore_plugins.common.hub.pretrained import ARTIFACT_TYPE as PRETRAINED, load_tokenizer
from mtcore_plugins.common.text.spm import load_spm
from mtcore_plugins.steps._binarize_config import ROLES, AuxPairs, BinarizeConfig
from mtcore_plugins.steps._binarize_pieces import sampled, tagged
from mtcore_plugins.steps._pretrained_init import (
    LanguageTokens,
    borrow_rare_rows,
    copy_tokenizer,
    language_tokens,
    write_dictionary,
)
from mtcore_plugins.steps._rare_pieces import drop_rare_pairs

SPLITS = ("train", "valid")
CHUNK = 10_000
MMAP_MAGIC = b"MMIDIDX\x00\x00"


class BinarizeStep(Step[BinarizeConfig]):
    """``train``/``valid`` corpora -> fairseq binary data with one joined dictionary. Every input
    line becomes exactly one example (an empty line becomes an empty, EOS-only example).

    The optional ``dictionary`` input (another binarize step's data, or a trained model) reuses
    its dictionary instead of building one: fine-tuning data (NT5 §4.3, HW-TSC's trusted set)
    must index tokens exactly as the model being fine-tuned does.

    ``spm`` may be a pretrained M2M-100 or NLLB model (``models:``) that a train step will
    continue: its SentencePiece model segments the text, each source starts with the source
    language's token and each target with the target's (fairseq's multilingual task as text),
    and the dictionary is the model's own, fixed (:mod:`~mtcore_plugins.steps._pretrained_init`)."""

    name = "binarize"
    inputs: ClassVar[dict[str, bool]] = {
        **ROLES,
        "*": False,  # the aux inputs, each named in aux
    }
    outputs: ClassVar[tuple[str, ...]] = ("data",)

    def run(self, ctx: StepContext) -> None:
        spm = ctx.inputs["spm"]
        parts = self.config.cycle_parts
        if ("cycled" in ctx.inputs) != (parts > 1):
            raise DataError(
                f"{ctx.step_id}: a cycled input needs cycle_parts of 2 or more, and cycle_parts "
                f"{parts} needs a cycled input"
            )
        self._check_aux(ctx, spm)
        encoded = ctx.scratch("encoded")
        given = ctx.inputs.get("dictionary")
        extra: dict[str, Any] = {}
        if spm.meta.get("type") == PRETRAINED:
            processor: Any = self._pretrained(ctx, spm, given is not None)
            fixed: Path | None = encoded / "dict.txt"
            extra["pretrained"] = {
                "id": spm.meta.get("id"),
                "dict_size": write_dictionary(spm, fixed),
            }
            extra["language_tokens"] = {"src": processor.source, "tgt": processor.prefix[0]}
        else:
            c = self.config
            if c.src_token or c.tgt_token or c.oov != "unk" or c.tags:
                raise DataError(
                    f"{ctx.step_id}: src_token, tgt_token, oov and tags are for a pretrained "
                    f"model as spm; input spm ({spm.path}) is a {spm.meta.get('type')!r} artifact"
                )
            processor = load_spm(spm.path)
            fixed = None if given is None else self._dictionary(given.path)
        lines = {split: self._encode(ctx, split, processor, encoded) for split in SPLITS}
        for role, aux in self.config.aux.items():
            if role not in ctx.inputs:  # an ablated aux input
                ctx.stats.add(f"binarize.aux_absent.{role}")
                continue
            tokens = self._pretrained(ctx, spm, False, aux)
            count = self._encode(ctx, role, tokens, encoded, "train", (aux.src, aux.tgt))
            ctx.stats.add(f"binarize.aux_lines.{role}", count)
            lines["train"] += count
        lines["train"] = self._drop_rare(ctx, encoded, extra, lines["train"])
        cycled = [] if parts == 1 else self._cut(ctx, processor, encoded, parts)
        if cycled and fixed is None:  # one dictionary over train and every part
            fixed = self._cycle_dictionary(encoded, ctx.scratch("dictionary"), parts)
        if fixed is not None and "language_tokens" in extra and self.config.oov == "rare":
            langs = (self.config.src, self.config.tgt)
            reserved = frozenset(processor.tokenizer.all_special_tokens)
            names = ["train", *(f"cycle{k}" for k in range(len(cycled)))]
            unknown, pairs = borrow_rare_rows(
                fixed, [encoded / f"{name}.{lang}" for name in names for lang in langs], reserved
            )
            ctx.stats.add("binarize.oov_pieces", unknown)
            ctx.stats.add("binarize.oov_rows_borrowed", len(pairs))
            extra["pretrained"]["oov_rows_borrowed"] = len(pairs)
        out = ctx.fresh_output("data")  # fairseq-preprocess overwrites no file of a killed try
        self._preprocess(encoded, out, fixed)
        if cycled:
            self._shards(ctx, encoded, out, cycled)
            extra["cycle_parts"] = parts
            extra["cycle_lines"] = cycled
        if "pretrained" in extra:
            copy_tokenizer(spm, out)
        for split, count in lines.items():
            for lang in (self.config.src, self.config.tgt):
                found = mmap_length(out / f"{split}.{self.config.src}-{self.config.tgt}.{lang}.idx")
                if found != count:
                    raise StepError(
                        f"{ctx.step_id}: fairseq-preprocess wrote {found} {split} examples for "
                        f"{lang} from {count} input lines; see {out / 'binarize.log'}"
                    )
            ctx.stats.add(f"binarize.{split}_lines", count)
        sampling = self.config.src_sampling
        write_artifact_meta(
            out,
            type="fairseq-data",
            src=self.config.src,
            tgt=self.config.tgt,
            lines=lines,
            dict=f"dict.{self.config.src}.txt",
            src_sampling=None if sampling is None else sampling.model_dump(),
            **extra,
        )

    def accepted_inputs(self) -> frozenset[str]:
        """Binarize's own inputs and those ``aux`` names."""
        return frozenset(ROLES) | frozenset(self.config.aux)

    def _check_aux(self, ctx: StepContext, spm: Artifact) -> None:
        """Every input beyond binarize's own is named in aux, and aux needs a pretrained
        model's language tokens."""
        extra = sorted(set(ctx.inputs) - set(ROLES) - set(self.config.aux))
        if extra:
            raise DataError(
                f"{ctx.step_id}: input {', '.join(map(repr, extra))} is not an input of binarize "
                f"({', '.join(ROLES)}) and not named in aux (aux: {{{extra[0]}: {{src: .., tgt: "
                "..}}}} adds it to train)"
            )
        if self.config.aux and spm.meta.get("type") != PRETRAINED:
            raise DataError(
                f"{ctx.step_id}: aux needs a pretrained model as spm (its language tokens tell "
                f"the languages apart); input spm ({spm.path}) is a {spm.meta.get('type')!r} "
                "artifact: for a recipe's own model, concat the corpora (with a lang_tag "
                "augmenter where the model must tell targets apart)"
            )

    def _drop_rare(self, ctx: StepContext, encoded: Path, extra: dict[str, Any], lines: int) -> int:
        """The encoded training pairs (``lines``) less those with a rare piece; the pairs kept."""
        c = self.config
        if c.min_piece_count == 1:
            return lines
        files = (encoded / f"train.{c.src}", encoded / f"train.{c.tgt}")
        kept, dropped, rare = drop_rare_pairs(files, c.min_piece_count)
        ctx.stats.add("binarize.rare_piece_pairs_dropped", dropped)
        for lang, count in zip((c.src, c.tgt), rare, strict=True):
            ctx.stats.add(f"binarize.rare_pieces.{lang}", count)
        extra["rare_pieces"] = {"min_count": c.min_piece_count, "pairs_dropped": dropped}
        return kept

    def _pretrained(
        self, ctx: StepContext, model: Artifact, dictionary: bool, aux: AuxPairs | None = None
    ) -> LanguageTokens:
        """The tokens of src and tgt (of ``aux``'s languages, given an aux input)."""
        c = self.config
        where = f"{ctx.step_id}: input spm ({model.path})"
        if dictionary:
            raise DataError(f"{where} is a pretrained model, whose dictionary is fixed: leave "
                            "the dictionary input unconnected")  # fmt: skip
        if c.src_sampling is not None:
            raise DataError(f"{where} is a pretrained model: src_sampling is for a recipe's own "
                            "SentencePiece model")  # fmt: skip
        pair: AuxPairs | BinarizeConfig = c if aux is None else aux
        tokens = language_tokens(model, pair.src, pair.tgt, pair.src_token, pair.tgt_token, where)
        tok = load_tokenizer(model.path)
        return LanguageTokens(tok, tokens["src"], [tokens["tgt"]], frozenset())

    def _encode(
        self,
        ctx: StepContext,
        split: str,
        processor: Any,
        encoded: Path,
        into: str | None = None,
        langs: tuple[str, str] | None = None,
    ) -> int:
        """Input ``split`` encoded into ``encoded/<into>.<lang>`` (appended when ``into`` is
        another split: aux pairs join train), its ``langs`` columns as src and tgt."""
        c = self.config
        corpus = Corpus.open(ctx.inputs[split].path)
        columns = [self._column(corpus, lang, split) for lang in langs or (c.src, c.tgt)]
        sampling = c.src_sampling if split in ("train", "cycled") else None
        copies = 1 if sampling is None else sampling.copies
        tags = frozenset(c.tags) if split != "valid" else frozenset()
        count = 0
        with ExitStack() as stack:
            handles = [
                stack.enter_context(
                    open(
                        encoded / f"{into or split}.{lang}",
                        "a" if into else "w",
                        encoding="utf-8",
                        newline="\n",
                    )
                )
                for lang in (c.src, c.tgt)
            ]
            for number, chunk in enumerate(batched(corpus, CHUNK)):
                src, tgt = ([pair[column] for pair in chunk] for column in columns)
                if isinstance(processor, LanguageTokens):  # a pretrained model's, tagged
                    src_tagged = [[processor.source, *p] for p in tagged(processor, src, tags)]
                    tgt_pieces = [[processor.prefix[0], *p] for p in processor.pieces(tgt)]
                else:
                    tgt_pieces = processor.encode(tgt, out_type=str)
                for copy in range(copies):  # one copy when sampling is None
                    if isinstance(processor, LanguageTokens):
                        src_pieces = src_tagged
                    elif sampling is None:
                        src_pieces = processor.encode(src, out_type=str)
                    else:
                        src_pieces = sampled(processor, src, sampling, (number, copy))
                    for encoded_side, handle in zip((src_pieces, tgt_pieces), handles, strict=True):
                        for pieces in encoded_side:
                            if not pieces:
                                ctx.stats.add(f"binarize.{split}_empty")
                            handle.write(" ".join(pieces) + "\n")
                count += len(chunk) * copies
        if sampling is not None:
            ctx.stats.add(f"binarize.{split}_sampled_copies", copies)
        return count

    def _cut(self, ctx: StepContext, processor: Any, encoded: Path, parts: int) -> list[int]:
        """The cycled input encoded and cut into ``cycle<k>.<lang>`` files; their line counts."""
        total = self._encode(ctx, "cycled", processor, encoded)
        if total < parts:  # an epoch on an empty part trains on train alone
            ctx.stats.add("binarize.cycled_empty_parts", parts - total)
        counts = [len(range(k, total, parts)) for k in range(parts)]
        for lang in (self.config.src, self.config.tgt):
            with ExitStack() as stack:
                handles = [
                    stack.enter_context(
                        open(encoded / f"cycle{k}.{lang}", "w", encoding="utf-8", newline="\n")
                    )
                    for k in range(parts)
                ]
                with open(encoded / f"cycled.{lang}", encoding="utf-8", newline="\n") as lines:
                    for number, line in enumerate(lines):
                        handles[number % parts].write(line)
            (encoded / f"cycled.{lang}").unlink()
        ctx.stats.add("binarize.cycled_lines", total)
        return counts

    def _cycle_dictionary(self, encoded: Path, work: Path, parts: int) -> Path:
        """The joined dictionary of train and every cycled part (fairseq-preprocess
        --dict-only over their concatenation)."""
        for lang in (self.config.src, self.config.tgt):
            with open(work / f"all.{lang}", "wb") as joined:
                for name in ["train", *(f"cycle{k}" for k in range(parts))]:
                    with open(encoded / f"{name}.{lang}", "rb") as part:
                        shutil.copyfileobj(part, joined)
        self._run_preprocess(["--trainpref", str(work / "all")], work, None, "--dict-only")
        return work / f"dict.{self.config.src}.txt"

    def _shards(self, ctx: StepContext, encoded: Path, out: Path, counts: list[int]) -> None:
        """``cycle/<k>``: part k binarized as ``train1`` beside links to ``out``'s train and
        valid splits and dictionaries; an empty part has no ``train1`` (fairseq cannot read an
        empty split), so its epoch trains on ``train`` alone."""
        c = self.config
        pair = f"{c.src}-{c.tgt}"
        shared = [f"dict.{lang}.txt" for lang in (c.src, c.tgt)] + [
            f"{split}.{pair}.{lang}.{ext}"
            for split in SPLITS
            for lang in (c.src, c.tgt)
            for ext in ("bin", "idx")
        ]
        for k, count in enumerate(counts):
            shard = out / "cycle" / str(k)
            shard.mkdir(parents=True)
            for name in shared:
                _link(out / name, shard / name)
            if count == 0:
                continue
            part = ctx.scratch(f"cycle{k}")
            self._run_preprocess(
                ["--trainpref", str(encoded / f"cycle{k}")], part, out / f"dict.{c.src}.txt"
            )
            for lang in (c.src, c.tgt):
                for ext in ("bin", "idx"):
                    os.replace(
                        part / f"train.{pair}.{lang}.{ext}", shard / f"train1.{pair}.{lang}.{ext}"
                    )
                found = mmap_length(shard / f"train1.{pair}.{lang}.idx")
                if found != count:
                    raise StepError(
                        f"{ctx.step_id}: fairseq-preprocess wrote {found} examples of cycled part "
                        f"{k} for {lang} from {count} lines; see {part / 'binarize.log'}"
                    )

    def _column(self, corpus: Corpus, lang: str, split: str) -> int:
        if lang not in corpus.langs:
            raise DataError(
                f"binarize: the {split} corpus has languages {list(corpus.langs)}, "
                f"not {lang!r} (check src/tgt)"
            )
        return corpus.langs.index(lang)

    def _dictionary(self, path: Path) -> Path:
        for lang in (self.config.src, self.config.tgt):
            found = path / f"dict.{lang}.txt"
            if found.exists():
                return found
        raise DataError(
            f"binarize: the dictionary input {path} has no dict.{self.config.src}.txt or "
            f"dict.{self.config.tgt}.txt (connect a binarize step's data or a trained model)"
        )

    def _preprocess(self, encoded: Path, out: Path, dictionary: Path | None) -> None:
        prefixes = ["--trainpref", str(encoded / "train"), "--validpref", str(encoded / "valid")]
        self._run_preprocess(prefixes, out, dictionary)

    def _run_preprocess(
        self, prefixes: list[str], out: Path, dictionary: Path | None, *flags: str
    ) -> None:
        c = self.config
        cmd = [
            sys.executable,
            "-m",
            "fairseq_cli.preprocess",
            "--source-lang",
            c.src,
            "--target-lang",
            c.tgt,
            *prefixes,
            *flags,
            "--destdir",
            str(out),
            "--joined-dictionary",
            "--dataset-impl",
            "mmap",
            "--workers",
            str(c.workers),
        ]
        if dictionary is not None:  # with --joined-dictionary it serves both sides
            cmd += ["--srcdict", str(dictionary)]
        run_logged(cmd, out / "binarize.log", "fairseq-preprocess", warm=True)


def _link(source: Path, link: Path) -> None:
    """A hard link, or a copy where the filesystem has none."""
    try:
        os.link(source, link)
    except OSError:
        shutil.copyfile(source, link)


def mmap_length(index: Path) -> int:
    """Number of examples in a fairseq mmap dataset, read from its ``.idx`` header (magic,
    version, dtype code, length) without importing fairseq."""
    with open(index, "rb") as handle:
        header = handle.read(len(MMAP_MAGIC) + 17)
    if not header.startswith(MMAP_MAGIC) or len(header) < len(MMAP_MAGIC) + 17:
        raise StepError(f"{index} is not a fairseq mmap index")
    (length,) = struct.unpack("<Q", header[len(MMAP_MAGIC) + 9 :])
    return int(length)
