"""The fairseq model ``mtcore_transformer``: fairseq's Transformer (same parameter names, so a
plain ``transformer`` checkpoint fine-tunes into it) with an extension point
(:mod:`~mtcore_plugins.common.fairseq.model_extension`). It knows no architecture family: B2T
(``b2t.py``), relative positions (``rpe.py``), adapters (``adapters.py``), DLCL (``dlcl.py``)
and Evolved cells (``evolved.py``) are extensions that their ``mtcore.models`` plugins
register, and a third party's plugin adds one the same way. With no extension active the model
is fairseq's ``transformer``.

Everything here imports fairseq: import this module only from a plugin's ``register()``.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY, register_model
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from fairseq.models.transformer.transformer_legacy import TransformerModel, base_architecture
from torch import Tensor

from mtcore_plugins.common.fairseq.model_extension import (
    ModelExtension,
    active_extensions,
    first,
    registered,
)
from mtcore_plugins.models.layers import MtcoreDecoderLayer, MtcoreEncoderLayer
from mtcore_plugins.models.stacks import decoder_features, encoder_forward

# fairseq's attention passes a bool key_padding_mask with a float attn_mask; torch 2.x warns on
# every such call site of every process (training, decoding workers) though the result is right.
warnings.filterwarnings(
    "ignore",
    message="Support for mismatched key_padding_mask and attn_mask is deprecated",
    category=UserWarning,
)

MODEL_NAME = "mtcore_transformer"


def add_extension_args(parser: argparse.ArgumentParser) -> None:
    """The arguments of every registered extension, in hook order."""
    for extension in registered():
        for name, (kwargs, _) in extension.args.items():
            parser.add_argument("--" + name.replace("_", "-"), **kwargs)


def mtcore_base_architecture(args: Any) -> None:
    """Defaults for every registered extension's arguments, then fairseq's transformer
    defaults."""
    for extension in registered():
        for name, (_, default) in extension.args.items():
            if getattr(args, name, None) is None:
                setattr(args, name, default)
    base_architecture(args)


class MtcoreEncoder(TransformerEncoderBase):
    """Encoder with the extensions' hooks; the layer loop lives in ``stacks.encoder_forward``."""

    def __init__(
        self, cfg: Any, extensions: list[ModelExtension], dictionary: Any, embed_tokens: Any
    ) -> None:
        self.extensions = extensions  # read by build_encoder_layer during init
        super().__init__(cfg, dictionary, embed_tokens)
        for extension in extensions:
            extension.attach("encoder", self, cfg)

    def build_encoder_layer(self, cfg: Any) -> Any:
        layer = first(self.extensions, "layer", "encoder", cfg, False)
        return layer if layer is not None else MtcoreEncoderLayer(cfg, self.extensions)

    def forward_scriptable(  # type: ignore[override]
        self,
        src_tokens: Tensor,
        src_lengths: Tensor | None = None,
        return_all_hiddens: bool = False,
        token_embeddings: Tensor | None = None,
    ) -> dict[str, list[Tensor]]:
        return encoder_forward(self, src_tokens, return_all_hiddens, token_embeddings)


class MtcoreDecoder(TransformerDecoderBase):
    """Decoder with the extensions' hooks; the layer loop lives in ``stacks.decoder_features``."""

    def __init__(
        self,
        cfg: Any,
        extensions: list[ModelExtension],
        dictionary: Any,
        embed_tokens: Any,
        no_encoder_attn: bool = False,
    ) -> None:
        self.extensions = extensions
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        for extension in extensions:
            extension.attach("decoder", self, cfg)

    def build_decoder_layer(self, cfg: Any, no_encoder_attn: bool = False) -> Any:
        layer = first(self.extensions, "layer", "decoder", cfg, no_encoder_attn)
        if layer is not None:
            return layer
        return MtcoreDecoderLayer(cfg, no_encoder_attn, self.extensions)

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


class MtcoreTransformerModel(TransformerModel):
    """``mtcore_transformer``: fairseq's Transformer plus the registered extensions."""

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        super().add_args(parser)
        add_extension_args(parser)

    @classmethod
    def build_model(cls, args: Any, task: Any) -> MtcoreTransformerModel:
        mtcore_base_architecture(args)
        extensions = active_extensions(args)
        layerdrop = getattr(args, "encoder_layerdrop", 0) or getattr(args, "decoder_layerdrop", 0)
        every_layer = [e.name for e in extensions if e.needs_every_layer]
        if layerdrop and every_layer:
            raise ValueError(
                f"LayerDrop skips layers: it cannot be combined with {', '.join(every_layer)}"
            )
        for extension in extensions:
            extension.prepare(args, task)
        model = super().build_model(args, task)
        model.extensions = extensions
        for extension in extensions:
            extension.built(model, args)
        return model  # type: ignore[no-any-return]

    @classmethod
    def build_encoder(cls, args: Any, src_dict: Any, embed_tokens: Any) -> MtcoreEncoder:
        return MtcoreEncoder(args, active_extensions(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args: Any, tgt_dict: Any, embed_tokens: Any) -> MtcoreDecoder:
        no_encoder_attn = getattr(args, "no_cross_attention", False)
        return MtcoreDecoder(args, active_extensions(args), tgt_dict, embed_tokens, no_encoder_attn)

    def load_state_dict(  # type: ignore[override]
        self, state_dict: dict[str, Tensor], strict: bool = True, model_cfg: Any = None, **kw: Any
    ) -> Any:
        for extension in getattr(self, "extensions", []):
            state_dict = extension.fill_state(self, state_dict)
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, **kw)


def register_mtcore_model() -> None:
    """Registers ``mtcore_transformer`` (and its default architecture) once."""
    if MODEL_NAME in MODEL_REGISTRY:
        return
    register_model(MODEL_NAME)(MtcoreTransformerModel)
    if MODEL_NAME not in ARCH_MODEL_REGISTRY:
        from fairseq.models import register_model_architecture

        register_model_architecture(MODEL_NAME, MODEL_NAME)(mtcore_base_architecture)
