"""Transformer presets registered into fairseq's architecture registry under ``mtcore_*`` names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtcore.api import Model, PluginConfig
from mtcore_plugins.models.zoo import NT5_TABLE4, of_family

# arch name -> settings applied over fairseq's transformer base_architecture (only where the
# command line did not set them: fairseq passes unset model arguments as absent).
PRESETS: dict[str, dict[str, Any]] = {
    # Small enough to learn something in a few CPU minutes; for tests and smoke runs.
    "mtcore_transformer_tiny": {
        "encoder_embed_dim": 256,
        "encoder_ffn_embed_dim": 1024,
        "encoder_attention_heads": 4,
        "encoder_layers": 3,
        "decoder_embed_dim": 256,
        "decoder_ffn_embed_dim": 1024,
        "decoder_attention_heads": 4,
        "decoder_layers": 3,
        "max_source_positions": 512,
        "max_target_positions": 512,
    },
    # The CPU-sized default profiles: the tiny dimensions with two layers a side, about 25 %
    # more tokens/s than tiny on 2 CPU cores.
    "mtcore_transformer_small": {
        "encoder_embed_dim": 256,
        "encoder_ffn_embed_dim": 1024,
        "encoder_attention_heads": 4,
        "encoder_layers": 2,
        "decoder_embed_dim": 256,
        "decoder_ffn_embed_dim": 1024,
        "decoder_attention_heads": 4,
        "decoder_layers": 2,
        "max_source_positions": 512,
        "max_target_positions": 512,
    },
    # For tests: dozens of updates a second on one CPU core.
    "mtcore_transformer_micro": {
        "encoder_embed_dim": 64,
        "encoder_ffn_embed_dim": 128,
        "encoder_attention_heads": 2,
        "encoder_layers": 1,
        "decoder_embed_dim": 64,
        "decoder_ffn_embed_dim": 128,
        "decoder_attention_heads": 2,
        "decoder_layers": 1,
        "max_source_positions": 256,
        "max_target_positions": 256,
    },
    # fairseq's transformer_base (Vaswani et al.: d 512, FFN 2048, 8 heads, 6+6 layers) with
    # pre-LN layers (Xiong et al. 2020), which train stably at a high learning rate with short
    # warmup: a base-width model that translates after a few hundred CPU updates (the decoding
    # benchmarks' realistic shape).
    "mtcore_transformer_base_pre_ln": {
        "encoder_normalize_before": True,
        "decoder_normalize_before": True,
    },
    # NT5 Table 2, initial translation model: "Transformer (big) with FFN size of 4,096"
    # (Vaswani et al.'s big: d_model 1024, 16 heads, 6+6 layers), dropout 0.3.
    "mtcore_transformer_big_ffn4096": {
        "encoder_embed_dim": 1024,
        "encoder_ffn_embed_dim": 4096,
        "encoder_attention_heads": 16,
        "encoder_layers": 6,
        "decoder_embed_dim": 1024,
        "decoder_ffn_embed_dim": 4096,
        "decoder_attention_heads": 16,
        "decoder_layers": 6,
        "dropout": 0.3,
        "attention_dropout": 0.1,
    },
    # NT5 Table 4: the six configurations of the final heterogeneous ensemble (post-LN here;
    # B2T and RPE come with their own plugins). All d_model 1024 and 16 heads; train them with
    # --share-decoder-input-output-embed and separate source embeddings, which with a 64k
    # vocabulary (§3.2) gives Table 4's #Params (547M, 622M, 2.0B, 736M, 1.7B, 1.7B).
    **{
        name: {
            "encoder_embed_dim": 1024,
            "encoder_ffn_embed_dim": enc_ffn,
            "encoder_attention_heads": 16,
            "encoder_layers": enc_layers,
            "decoder_embed_dim": 1024,
            "decoder_ffn_embed_dim": dec_ffn,
            "decoder_attention_heads": 16,
            "decoder_layers": dec_layers,
        }
        for name, (enc_layers, enc_ffn, dec_layers, dec_ffn) in NT5_TABLE4.items()
    },
}


def _architecture(settings: dict[str, Any]) -> Callable[[Any], None]:
    def apply(args: Any) -> None:
        from fairseq.models.transformer.transformer_legacy import base_architecture

        for key, value in settings.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
        base_architecture(args)

    return apply


USER_DIR = Path(__file__).resolve().parent / "user_dir" / "mtcore_fairseq"


def user_dir() -> str:
    """A fairseq ``--user-dir`` that registers every mtcore architecture and criterion, for plain
    ``fairseq-train`` / ``fairseq-generate`` in a fresh process."""
    return str(USER_DIR)


class TransformerPresets(Model):
    """Registers the ``mtcore_transformer_*`` architectures (fairseq model ``transformer``) and
    the papers' plain-Transformer presets (Xiaomi, Yishu, HW-TSC). Being the default ``models``
    of the train and translate steps, it also registers every other mtcore architecture and the
    R-Drop criterion, so any ``mtcore_*`` arch works without listing its plugin. Idempotent:
    fairseq refuses a second registration of a name, so known names are skipped."""

    name = "transformer_presets"

    class Config(PluginConfig):
        """No settings: the presets are fixed."""

    def register(self) -> None:
        register_everything()

    @staticmethod
    def register_own() -> None:
        """Only the ``mtcore_transformer_*`` and NT5 Table 4 presets of this module."""
        from fairseq.models import ARCH_MODEL_REGISTRY, register_model_architecture

        for arch, settings in PRESETS.items():
            if arch not in ARCH_MODEL_REGISTRY:
                register_model_architecture("transformer", arch)(_architecture(settings))

    def user_dir(self) -> str:
        return user_dir()

    @staticmethod
    def architectures() -> list[str]:
        return sorted([*PRESETS, *of_family("transformer_presets")])


def register_everything() -> None:
    """Every mtcore architecture and the R-Drop criterion (what ``--user-dir`` loads)."""
    from mtcore_plugins.models.rdrop import register_rdrop
    from mtcore_plugins.models.zoo import (
        EXTENSIONS,
        PRESETS as ZOO,
        register_extensions,
        register_presets,
    )

    register_extensions(list(EXTENSIONS))
    TransformerPresets.register_own()
    register_presets(sorted(ZOO))
    register_rdrop()
