"""The fairseq model ``mtcore_transformer``: fairseq's Transformer (same parameter names, so a
plain ``transformer`` checkpoint fine-tunes into it) with switchable extensions that combine:

- ``--b2t``: B2T connections (Takase et al., 2022) in every encoder and decoder layer;
- ``--rpe-max-distance K``: relative positions (Shaw et al., 2018) in encoder self-attention
  instead of absolute positions; ``--rpe-decoder`` does the same in the decoder;
- ``--adapter-dim B --adapter-directions en-ja,ja-en``: language-specific adapters after every
  layer, the set chosen by the task's language pair (or ``--adapter-direction``);
  ``--adapters-only`` freezes everything else (Yishu §2.2.1's adapter training);
- ``--dlcl``: dynamic linear combination of layers (Wang et al., 2019);
- ``--cell evolved``: Evolved Transformer cells (So et al., 2019) instead of Transformer layers.

Everything here imports fairseq: import this module only from a plugin's ``register()``.
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass
from typing import Any

from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY, register_model
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from fairseq.models.transformer.transformer_legacy import TransformerModel, base_architecture
from torch import Tensor

from mtcore_plugins.models.adapters import AdapterBank
from mtcore_plugins.models.dlcl import LayerHistory
from mtcore_plugins.models.evolved import BRANCH_HEADS, EvolvedDecoderCell, EvolvedEncoderCell
from mtcore_plugins.models.layers import MtcoreDecoderLayer, MtcoreEncoderLayer, rescale_init
from mtcore_plugins.models.stacks import decoder_features, encoder_forward

# fairseq's attention passes a bool key_padding_mask with a float attn_mask; torch 2.x warns on
# every such call site of every process (training, decoding workers) though the result is right.
warnings.filterwarnings(
    "ignore",
    message="Support for mismatched key_padding_mask and attn_mask is deprecated",
    category=UserWarning,
)

MODEL_NAME = "mtcore_transformer"

# name -> (argparse kwargs, default); defaults leave every extension off.
EXTENSION_ARGS: dict[str, tuple[dict[str, Any], Any]] = {
    "b2t": ({"action": "store_true", "help": "B2T connection in every layer (Post-LN)"}, False),
    "b2t_rescale_init": (
        {"action": "store_true", "help": "scale non-LayerNorm weights by layers^-0.5 (B2T code)"},
        False,
    ),
    "rpe_max_distance": (
        {"type": int, "metavar": "K", "help": "relative positions clipped at K; 0 = absolute"},
        0,
    ),
    "rpe_decoder": (
        {"action": "store_true", "help": "relative positions in decoder self-attention too"},
        False,
    ),
    "rpe_no_values": (
        {"action": "store_true", "help": "relative embeddings for keys only, not for values"},
        False,
    ),
    "adapter_dim": ({"type": int, "metavar": "B", "help": "adapter bottleneck; 0 = none"}, 0),
    "adapter_directions": (
        {"type": str, "metavar": "SRC-TGT,...", "help": "one adapter set per direction"},
        "",
    ),
    "adapter_direction": (
        {"type": str, "metavar": "SRC-TGT", "help": "adapter set to use (default: task pair)"},
        "",
    ),
    "adapters_only": (
        {"action": "store_true", "help": "train the adapters only; freeze the base model"},
        False,
    ),
    "dlcl": ({"action": "store_true", "help": "dynamic linear combination of layers"}, False),
    "cell": ({"choices": ["transformer", "evolved"], "help": "layer type"}, "transformer"),
    "evolved_branch_heads": (
        {"type": int, "metavar": "N", "help": "heads of the Evolved decoder's branch attention"},
        BRANCH_HEADS,
    ),
}


@dataclass(frozen=True)
class Extensions:
    """The extension settings of one model, read from fairseq's flat arguments."""

    b2t: bool = False
    b2t_rescale_init: bool = False
    rpe_max_distance: int = 0
    rpe_decoder: bool = False
    rpe_no_values: bool = False
    adapter_dim: int = 0
    adapter_directions: tuple[str, ...] = ()
    adapter_direction: str = ""
    adapters_only: bool = False
    dlcl: bool = False
    cell: str = "transformer"
    evolved_branch_heads: int = BRANCH_HEADS

    @classmethod
    def from_args(cls, args: Any) -> Extensions:
        values = {
            name: getattr(args, name, default) for name, (_, default) in EXTENSION_ARGS.items()
        }
        directions = values["adapter_directions"] or ""
        values["adapter_directions"] = tuple(d for d in directions.split(",") if d.strip())
        values["adapter_direction"] = (
            getattr(args, "adapter_active", "") or values["adapter_direction"]
        )
        return cls(**values)

    def check(self) -> None:
        if self.cell == "evolved" and (self.b2t or self.rpe_max_distance or self.dlcl):
            raise ValueError("--cell evolved combines with adapters only (not B2T, RPE, DLCL)")
        if self.adapters_only and not self.adapter_dim:
            raise ValueError("--adapters-only needs --adapter-dim > 0")
        if self.rpe_decoder and self.rpe_max_distance <= 0:
            raise ValueError("--rpe-decoder needs --rpe-max-distance > 0")


def add_extension_args(parser: argparse.ArgumentParser) -> None:
    for name, (kwargs, _) in EXTENSION_ARGS.items():
        parser.add_argument("--" + name.replace("_", "-"), **kwargs)


def mtcore_base_architecture(args: Any) -> None:
    """Defaults for every extension argument, then fairseq's transformer defaults."""
    for name, (_, default) in EXTENSION_ARGS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)
    base_architecture(args)


class MtcoreEncoder(TransformerEncoderBase):
    """Encoder with the extensions; the layer loop lives in ``stacks.encoder_forward``."""

    def __init__(self, cfg: Any, ext: Extensions, dictionary: Any, embed_tokens: Any) -> None:
        self.ext = ext
        super().__init__(cfg, dictionary, embed_tokens)
        dim = embed_tokens.embedding_dim
        if ext.rpe_max_distance > 0:
            self.embed_positions = None  # NT5 §4.1: RPE replaces absolute positions
        self.history = (
            LayerHistory(dim, len(self.layers), cfg.encoder.normalize_before) if ext.dlcl else None
        )
        self.adapters = _adapters(ext, dim, len(self.layers))
        if ext.b2t and ext.b2t_rescale_init:
            rescale_init(self.layers, len(self.layers))

    def build_encoder_layer(self, cfg: Any) -> Any:
        ext = self.ext
        if ext.cell == "evolved":
            return EvolvedEncoderCell(cfg)
        return MtcoreEncoderLayer(cfg, ext.b2t, ext.rpe_max_distance, not ext.rpe_no_values)

    def forward_scriptable(  # type: ignore[override]
        self,
        src_tokens: Tensor,
        src_lengths: Tensor | None = None,
        return_all_hiddens: bool = False,
        token_embeddings: Tensor | None = None,
    ) -> dict[str, list[Tensor]]:
        return encoder_forward(self, src_tokens, return_all_hiddens, token_embeddings)


class MtcoreDecoder(TransformerDecoderBase):
    """Decoder with the extensions; the layer loop lives in ``stacks.decoder_features``."""

    def __init__(
        self,
        cfg: Any,
        ext: Extensions,
        dictionary: Any,
        embed_tokens: Any,
        no_encoder_attn: bool = False,
    ) -> None:
        self.ext = ext
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        if ext.rpe_decoder:
            self.embed_positions = None
        self.history = (
            LayerHistory(self.embed_dim, len(self.layers), cfg.decoder.normalize_before)
            if ext.dlcl
            else None
        )
        self.adapters = _adapters(ext, self.embed_dim, len(self.layers))
        if ext.b2t and ext.b2t_rescale_init:
            rescale_init(self.layers, len(self.layers))

    def build_decoder_layer(self, cfg: Any, no_encoder_attn: bool = False) -> Any:
        ext = self.ext
        if ext.cell == "evolved":
            return EvolvedDecoderCell(cfg, ext.evolved_branch_heads)
        distance = ext.rpe_max_distance if ext.rpe_decoder else 0
        return MtcoreDecoderLayer(cfg, no_encoder_attn, ext.b2t, distance, not ext.rpe_no_values)

    def extract_features_scriptable(  # type: ignore[override]
        self,
        prev_output_tokens: Tensor,
        encoder_out: dict[str, list[Tensor]] | None,
        incremental_state: dict[str, dict[str, Tensor | None]] | None = None,
        full_context_alignment: bool = False,
        alignment_layer: int | None = None,
        alignment_heads: int | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        return decoder_features(
            self,
            prev_output_tokens,
            encoder_out,
            incremental_state,
            full_context_alignment,
            alignment_layer,
            alignment_heads,
        )


def _adapters(ext: Extensions, dim: int, layers: int) -> AdapterBank | None:
    if ext.adapter_dim <= 0:
        return None
    directions = ext.adapter_directions or (ext.adapter_direction,)
    return AdapterBank(dim, ext.adapter_dim, layers, directions, ext.adapter_direction)


class MtcoreTransformerModel(TransformerModel):
    """``mtcore_transformer``: see the module docstring for the extension arguments."""

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        super().add_args(parser)
        add_extension_args(parser)

    @classmethod
    def build_model(cls, args: Any, task: Any) -> MtcoreTransformerModel:
        mtcore_base_architecture(args)
        if getattr(args, "adapter_dim", 0):
            args.adapter_active = active_direction(args, task)
        ext = Extensions.from_args(args)
        ext.check()
        layerdrop = getattr(args, "encoder_layerdrop", 0) or getattr(args, "decoder_layerdrop", 0)
        if layerdrop and (ext.dlcl or ext.adapter_dim):
            raise ValueError("LayerDrop skips layers: it cannot be combined with DLCL or adapters")
        model = super().build_model(args, task)
        if getattr(args, "adapters_only", False):
            freeze_all_but_adapters(model)
        return model  # type: ignore[no-any-return]

    @classmethod
    def build_encoder(cls, args: Any, src_dict: Any, embed_tokens: Any) -> MtcoreEncoder:
        return MtcoreEncoder(args, Extensions.from_args(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args: Any, tgt_dict: Any, embed_tokens: Any) -> MtcoreDecoder:
        no_encoder_attn = getattr(args, "no_cross_attention", False)
        return MtcoreDecoder(
            args, Extensions.from_args(args), tgt_dict, embed_tokens, no_encoder_attn
        )

    def set_adapter_direction(self, direction: str) -> None:
        """Switch both adapter banks to ``direction`` (``en-ja``)."""
        for side in (self.encoder, self.decoder):
            if side.adapters is None:
                raise ValueError("this model has no adapters (--adapter-dim 0)")
            side.adapters.select(direction)

    def load_state_dict(  # type: ignore[override]
        self, state_dict: dict[str, Tensor], strict: bool = True, model_cfg: Any = None, **kw: Any
    ) -> Any:
        """A checkpoint without adapters (the base model, Yishu §2.2.1: adapters are added after
        training the bilingual model) loads with the adapters as initialised."""
        own = self.state_dict()
        missing = [k for k in own if ".adapters." in k and k not in state_dict]
        if missing:
            state_dict = dict(state_dict)
            state_dict.update({k: own[k] for k in missing})
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, **kw)


def active_direction(args: Any, task: Any) -> str:
    """The task's ``src-tgt`` when the model has adapters for it, else ``--adapter-direction``."""
    cfg = getattr(task, "cfg", None)
    src = getattr(cfg, "source_lang", None) or getattr(args, "source_lang", None)
    tgt = getattr(cfg, "target_lang", None) or getattr(args, "target_lang", None)
    pair = f"{src}-{tgt}" if src and tgt else ""
    directions = [d.strip() for d in (args.adapter_directions or "").split(",") if d.strip()]
    if pair and (not directions or pair in directions):
        return pair
    if args.adapter_direction:
        return str(args.adapter_direction)
    raise ValueError(
        f"no adapter set for the task's direction {pair or '(unknown)'}: the model has "
        f"{', '.join(directions) or 'none'}; pass --adapter-direction"
    )


def freeze_all_but_adapters(model: Any) -> None:
    """Adapters-only training: fairseq's trainer optimises only parameters that require grad."""
    for name, param in model.named_parameters():
        param.requires_grad = ".adapters." in f".{name}"


def register_mtcore_model() -> None:
    """Registers ``mtcore_transformer`` (and its default architecture) once."""
    if MODEL_NAME in MODEL_REGISTRY:
        return
    register_model(MODEL_NAME)(MtcoreTransformerModel)
    if MODEL_NAME not in ARCH_MODEL_REGISTRY:
        from fairseq.models import register_model_architecture

        register_model_architecture(MODEL_NAME, MODEL_NAME)(mtcore_base_architecture)
