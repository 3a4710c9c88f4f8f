"""Transformer presets registered into fairseq's architecture registry under ``mtcore_*`` names:
the ``mtcore_transformer_*`` sizes and the papers' plain-Transformer configurations, all of
fairseq's ``transformer`` model."""

from __future__ import annotations

from typing import Any

from mtcore_plugins.models.extension import ModelFamily, user_dir
from mtcore_plugins.models.zoo import BIG, NT5_TABLE4, PRE_LN, TRANSFORMER, Preset, dims

__all__ = [
    "PRESETS",
    "TransformerPresets",
    "all_presets",
    "builtin_models",
    "register_everything",
    "tiny_presets",
    "user_dir",
]

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
    # The plain-Transformer presets of the papers (fairseq's ``transformer`` model), each with a
    # tiny twin. NT5: the tiny twin of §3.2's initial model (Transformer-big, FFN 4096: no B2T,
    # no RPE), the same size as the tiny ensemble members so that stages compare data, not
    # model size.
    "mtcore_nt5_initial_tiny": dims(64, 512, 4, 2, 2),
    # Xiaomi §3.1: Transformer-Big and its wider and deeper variants (Post-LN).
    "mtcore_xiaomi_big": dims(**BIG, enc=6, dec=6),
    # "inner dimension of position-wise feed-forward layers 8,192"
    "mtcore_xiaomi_wide": dims(1024, 8192, 16, 6, 6),
    "mtcore_xiaomi_deep_12_12": dims(**BIG, enc=12, dec=12),
    "mtcore_xiaomi_deep_12_6": dims(**BIG, enc=12, dec=6),
    "mtcore_xiaomi_deep_6_12": dims(**BIG, enc=6, dec=12),
    "mtcore_xiaomi_big_tiny": dims(64, 256, 4, 1, 1),
    "mtcore_xiaomi_wide_tiny": dims(64, 512, 4, 1, 1),
    "mtcore_xiaomi_deep_12_12_tiny": dims(64, 256, 4, 2, 2),
    "mtcore_xiaomi_deep_12_6_tiny": dims(64, 256, 4, 2, 1),
    "mtcore_xiaomi_deep_6_12_tiny": dims(64, 256, 4, 1, 2),
    # Yishu §2.2: 12 encoder and 6 decoder layers, 8 heads, d 512, FFN 4096.
    "mtcore_yishu_12_6": dims(512, 4096, 8, 12, 6),
    "mtcore_yishu_12_6_tiny": dims(64, 512, 4, 2, 1),
    # HW-TSC §3.1: "a 25-6 deep model ... the same as Transformer-big ...
    # pre-layer-normalization"
    "mtcore_hwtsc_deep_25_6": dims(**BIG, enc=25, dec=6, **PRE_LN),
    "mtcore_hwtsc_deep_25_6_tiny": dims(64, 256, 4, 2, 1, **PRE_LN),
}


class TransformerPresets(ModelFamily):
    """Registers the ``mtcore_transformer_*`` architectures (fairseq model ``transformer``) and
    the papers' plain-Transformer presets (Xiaomi, Yishu, HW-TSC). Being the default ``models``
    of the train and translate steps, it also registers every other built-in architecture and
    the R-Drop criterion, so any ``mtcore_*`` arch works without listing its plugin.
    Idempotent: fairseq refuses a second registration of a name, so known names are skipped."""

    name = "transformer_presets"
    model = TRANSFORMER
    presets = PRESETS

    def register(self) -> None:
        register_everything()


def register_everything() -> None:
    """Every built-in family's architectures and the R-Drop criterion (what ``--user-dir``
    loads)."""
    for cls in builtin_models():
        plugin = cls()
        if isinstance(plugin, ModelFamily):
            ModelFamily.register(plugin)  # not TransformerPresets.register: that is this
        else:
            plugin.register()


def builtin_models() -> list[type[Any]]:
    """The ``mtcore.models`` plugin classes this package declares (its entry points)."""
    from importlib.metadata import entry_points

    found = entry_points(group="mtcore.models")
    return [ep.load() for ep in found if ep.value.startswith("mtcore_plugins.models.")]


def all_presets() -> dict[str, Preset]:
    """Every built-in family's presets, by architecture name."""
    out = {}
    for cls in builtin_models():
        if issubclass(cls, ModelFamily):
            for name, settings in cls.presets.items():
                out[name] = Preset(cls.model, cls.name, dict(settings))
    return out


def tiny_presets() -> list[str]:
    return sorted(name for name in all_presets() if name.endswith("_tiny"))
