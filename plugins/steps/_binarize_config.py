"""Settings of the ``binarize`` step."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mtcore.api import HASHED_WHEN_SET, PluginConfig
from mtcore_plugins.common.text.tags import TOKEN_PATTERN

# the step's own inputs: whether each is required
ROLES = {"train": True, "valid": True, "spm": True, "dictionary": False, "cycled": False}


class SubwordSampling(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Provilkov et al. 2019 §4: dropout 0.1 for BPE; Kudo 2018 §5: alpha 0.1-0.5, l = inf.
    alpha: float = Field(
        0.1,
        gt=0.0,
        le=1.0,
        description="unigram: smoothing of the sampling distribution; BPE: merge-dropout rate",
    )
    nbest_size: int = Field(
        -1, ge=-1, le=1000, description="unigram: sample from the n best (-1: the whole lattice)"
    )
    copies: int = Field(1, ge=1, le=100, description="sampled segmentations of each training pair")
    seed: int = Field(1, ge=0, le=2**31 - 1, description="seed of SentencePiece's sampler")


class AuxPairs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    src: str = Field(
        min_length=1, max_length=32, description="language of the input read as source"
    )
    tgt: str = Field(
        min_length=1, max_length=32, description="language of the input read as target"
    )
    src_token: str | None = Field(
        None, min_length=1, max_length=32, description="its source token (default: src's)"
    )
    tgt_token: str | None = Field(
        None, min_length=1, max_length=32, description="its target token (default: tgt's)"
    )


class BinarizeConfig(PluginConfig):
    src: str = Field(min_length=1, max_length=32, description="source language of the corpora")
    tgt: str = Field(min_length=1, max_length=32, description="target language of the corpora")
    workers: int = Field(1, ge=1, le=128, description="fairseq-preprocess worker processes")
    src_sampling: SubwordSampling | None = Field(
        None,
        description="subword regularization of the training sources: {alpha, nbest_size, "
        "copies, seed}; unset: the single best segmentation",
    )
    src_token: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        description="with a pretrained model as spm: its language token for the source "
        "(default: the one of src; HW-TSC §3.3 tags Livonian as Estonian, __et__)",
    )
    tgt_token: str | None = Field(
        None, min_length=1, max_length=32, description="the same for the target"
    )
    oov: Literal["unk", "rare"] = Field(
        "unk",
        description="with a pretrained model as spm: pieces of the training data its "
        "dictionary lacks become <unk> (unk) or take over the rows of its rarest entries "
        "(rare; HW-TSC §3.3's OOV process for Livonian)",
    )
    aux: dict[str, AuxPairs] = Field(
        {},
        json_schema_extra=HASHED_WHEN_SET,
        description="with a pretrained model as spm: further training inputs by input role, "
        "each {src, tgt, src_token, tgt_token}, added to train with their own language tokens "
        "(HW-TSC §5.3's Et->Liv and Lv->Liv pairs beside En->Liv)",
    )
    tags: list[str] = Field(
        [],
        json_schema_extra=HASHED_WHEN_SET,
        max_length=16,
        description="with a pretrained model as spm and oov: rare: tokens kept one piece where "
        "they stand as words of a training source (a tagged back-translation's <BT>, the noise's "
        "<blank>)",
    )
    min_piece_count: int = Field(
        1,
        ge=1,
        le=1_000_000,
        json_schema_extra=HASHED_WHEN_SET,
        description="drop the training pairs holding a piece that occurs fewer times on its "
        "side of the encoded training data (Xiaomi §4.1's rare-subword filter: 6); 1 keeps all",
    )
    cycle_parts: int = Field(
        1,
        ge=1,
        le=1000,
        description="parts the cycled input is cut into, one a training epoch beside all of "
        "train (Tran et al. 2021's sharding, Yishu §3.1); 1: no cycled input",
    )

    @model_validator(mode="after")
    def _roles(self) -> BinarizeConfig:
        taken = sorted(set(self.aux) & set(ROLES))
        if taken:
            raise ValueError(f"aux: {', '.join(taken)} is an input of binarize itself; name "
                             "the further inputs otherwise (aux_et, ...)")  # fmt: skip
        for tag in self.tags:
            if not re.fullmatch(TOKEN_PATTERN, tag):
                raise ValueError(f"tags: {tag!r} is not one whitespace-free word")
        if self.tags and self.oov != "rare":
            raise ValueError("tags need oov: rare (under oov: unk every tag would be <unk>)")
        return self
