"""The papers' named model configurations as fairseq architectures ``mtcore_<paper>_<config>``,
each with a ``..._tiny`` twin of the same family (tiny widths, 1-2 layers) for CPU tests.

A preset is (fairseq model, family, settings); the settings fill only what the command line left
unset. Plain presets use fairseq's ``transformer`` model; the others ``mtcore_transformer``.
Pure data: importing this module does not import fairseq.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TRANSFORMER = "transformer"
MTCORE = "mtcore_transformer"

# NT5 Table 4: (encoder layers, encoder FFN, decoder layers, decoder FFN).
NT5_TABLE4: dict[str, tuple[int, int, int, int]] = {
    "mtcore_nt5_ntt_base": (9, 8192, 9, 8192),
    "mtcore_nt5_abci_base": (9, 16384, 9, 4096),
    "mtcore_nt5_abci_encbig": (12, 65536, 9, 8192),
    "mtcore_nt5_abci_encdeep": (18, 8192, 9, 8192),
    "mtcore_nt5_failab_encbig": (9, 61440, 9, 16384),
    "mtcore_nt5_failab_decbig": (9, 16384, 9, 61440),
}


@dataclass(frozen=True)
class Preset:
    model: str
    family: str  # the mtcore.models plugin that registers it
    settings: dict[str, Any] = field(default_factory=dict)


def dims(d: int, ffn: int, heads: int, enc: int, dec: int, **extra: Any) -> dict[str, Any]:
    """Symmetric encoder/decoder sizes plus ``extra`` settings."""
    return {
        "encoder_embed_dim": d,
        "encoder_ffn_embed_dim": ffn,
        "encoder_attention_heads": heads,
        "encoder_layers": enc,
        "decoder_embed_dim": d,
        "decoder_ffn_embed_dim": ffn,
        "decoder_attention_heads": heads,
        "decoder_layers": dec,
        **extra,
    }


# Transformer-Big (Vaswani et al.): d 1024, FFN 4096, 16 heads, 6+6 layers, Post-LN.
BIG = {"d": 1024, "ffn": 4096, "heads": 16}
# Tiny twins: d 64, 4 heads; FFN keeps the paper's ratio to d where it is the point (wide).
TINY = {"d": 64, "heads": 4}
PRE_LN = {"encoder_normalize_before": True, "decoder_normalize_before": True}
NT5_EXT = {"b2t": True, "rpe_max_distance": 16}  # NT5 §4.1: B2T, encoder RPE with k = 16

PRESETS: dict[str, Preset] = {
    # NT5 §4.1 / Table 4: the six ensemble configurations with B2T and encoder RPE.
    **{
        f"{name}_b2t_rpe": Preset(
            MTCORE,
            "b2t",
            dims(1024, enc_ffn, 16, enc, dec, decoder_ffn_embed_dim=dec_ffn, **NT5_EXT),
        )
        for name, (enc, enc_ffn, dec, dec_ffn) in NT5_TABLE4.items()
    },
    # The tiny twin of §3.2's initial model (Transformer-big, FFN 4096: no B2T, no RPE), the
    # same size as the tiny ensemble members so that stages compare data, not model size.
    "mtcore_nt5_initial_tiny": Preset(TRANSFORMER, "transformer_presets", dims(64, 512, 4, 2, 2)),
    "mtcore_nt5_b2t_rpe_tiny": Preset(MTCORE, "b2t", dims(64, 512, 4, 2, 2, **NT5_EXT)),
    "mtcore_nt5_b2t_tiny": Preset(MTCORE, "b2t", dims(64, 512, 4, 2, 2, b2t=True)),
    "mtcore_nt5_rpe_tiny": Preset(MTCORE, "rpe", dims(64, 512, 4, 2, 2, rpe_max_distance=16)),
    # Xiaomi §3.1: Transformer-Big and its wider, deeper, DLCL and NAS variants (Post-LN as
    # Transformer-Big, except DLCL in its pre-norm form).
    "mtcore_xiaomi_big": Preset(TRANSFORMER, "transformer_presets", dims(**BIG, enc=6, dec=6)),
    "mtcore_xiaomi_wide": Preset(  # "inner dimension of position-wise feed-forward layers 8,192"
        TRANSFORMER, "transformer_presets", dims(1024, 8192, 16, 6, 6)
    ),
    "mtcore_xiaomi_deep_12_12": Preset(
        TRANSFORMER, "transformer_presets", dims(**BIG, enc=12, dec=12)
    ),
    "mtcore_xiaomi_deep_12_6": Preset(
        TRANSFORMER, "transformer_presets", dims(**BIG, enc=12, dec=6)
    ),
    "mtcore_xiaomi_deep_6_12": Preset(
        TRANSFORMER, "transformer_presets", dims(**BIG, enc=6, dec=12)
    ),
    "mtcore_xiaomi_dlcl_big": Preset(
        MTCORE, "dlcl", dims(**BIG, enc=6, dec=6, dlcl=True, **PRE_LN)
    ),
    "mtcore_xiaomi_dlcl_deep": Preset(  # "based on the Transformer-Deep-12-12 above"
        MTCORE, "dlcl", dims(**BIG, enc=12, dec=12, dlcl=True, **PRE_LN)
    ),
    # Xiaomi §3.1 footnote 6: T2T's evolved_transformer_base, i.e. transformer_base sizes with
    # 3 encoder and 4 decoder cells (an ET cell is about two Transformer layers deep).
    "mtcore_xiaomi_evolved": Preset(
        MTCORE, "evolved", dims(512, 2048, 8, 3, 4, cell="evolved", **PRE_LN)
    ),
    "mtcore_xiaomi_big_tiny": Preset(TRANSFORMER, "transformer_presets", dims(64, 256, 4, 1, 1)),
    "mtcore_xiaomi_wide_tiny": Preset(TRANSFORMER, "transformer_presets", dims(64, 512, 4, 1, 1)),
    "mtcore_xiaomi_deep_12_12_tiny": Preset(
        TRANSFORMER, "transformer_presets", dims(64, 256, 4, 2, 2)
    ),
    "mtcore_xiaomi_deep_12_6_tiny": Preset(
        TRANSFORMER, "transformer_presets", dims(64, 256, 4, 2, 1)
    ),
    "mtcore_xiaomi_deep_6_12_tiny": Preset(
        TRANSFORMER, "transformer_presets", dims(64, 256, 4, 1, 2)
    ),
    "mtcore_xiaomi_dlcl_big_tiny": Preset(
        MTCORE, "dlcl", dims(64, 256, 4, 1, 1, dlcl=True, **PRE_LN)
    ),
    "mtcore_xiaomi_dlcl_deep_tiny": Preset(
        MTCORE, "dlcl", dims(64, 256, 4, 2, 2, dlcl=True, **PRE_LN)
    ),
    "mtcore_xiaomi_evolved_tiny": Preset(
        MTCORE, "evolved", dims(64, 256, 4, 1, 2, cell="evolved", **PRE_LN)
    ),
    # Yishu §2.2: 12 encoder and 6 decoder layers, 8 heads, d 512, FFN 4096; §2.2.1: adapters
    # with a 4096-wide bottleneck, one set per direction.
    "mtcore_yishu_12_6": Preset(TRANSFORMER, "transformer_presets", dims(512, 4096, 8, 12, 6)),
    "mtcore_yishu_12_6_adapters": Preset(
        MTCORE, "adapters", dims(512, 4096, 8, 12, 6, adapter_dim=4096)
    ),
    "mtcore_yishu_12_6_tiny": Preset(TRANSFORMER, "transformer_presets", dims(64, 512, 4, 2, 1)),
    "mtcore_yishu_12_6_adapters_tiny": Preset(
        MTCORE, "adapters", dims(64, 512, 4, 2, 1, adapter_dim=512)
    ),
    # HW-TSC §3.1: "a 25-6 deep model ... the same as Transformer-big ... pre-layer-normalization"
    "mtcore_hwtsc_deep_25_6": Preset(
        TRANSFORMER, "transformer_presets", dims(**BIG, enc=25, dec=6, **PRE_LN)
    ),
    "mtcore_hwtsc_deep_25_6_tiny": Preset(
        TRANSFORMER, "transformer_presets", dims(64, 256, 4, 2, 1, **PRE_LN)
    ),
}


def of_family(family: str) -> list[str]:
    """Architecture names a family registers, sorted."""
    return sorted(name for name, preset in PRESETS.items() if preset.family == family)


def tiny_presets() -> list[str]:
    return sorted(name for name in PRESETS if name.endswith("_tiny"))


def architecture(model: str, settings: dict[str, Any]) -> Any:
    """The fairseq architecture function of ``model`` that fills what the command line left
    unset with ``settings``, then the model's own defaults."""

    def apply(args: Any) -> None:
        for key, value in settings.items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
        if model == MTCORE:
            from mtcore_plugins.models.model import mtcore_base_architecture

            mtcore_base_architecture(args)
        else:
            from fairseq.models.transformer.transformer_legacy import base_architecture

            base_architecture(args)

    return apply


# The model extensions of the built-in families (``module:class``, imported when registered).
EXTENSIONS = {
    "b2t": "mtcore_plugins.models.b2t:B2TExtension",
    "rpe": "mtcore_plugins.models.rpe:RelativePositionExtension",
    "adapters": "mtcore_plugins.models.adapters:AdapterExtension",
    "dlcl": "mtcore_plugins.models.dlcl:DlclExtension",
    "evolved": "mtcore_plugins.models.evolved:EvolvedExtension",
}


def register_extensions(names: list[str]) -> None:
    """Registers the named built-in extensions into ``mtcore_transformer``."""
    from importlib import import_module

    from mtcore_plugins.common.fairseq.model_extension import register_extension

    for name in names:
        module, _, cls = EXTENSIONS[name].partition(":")
        register_extension(getattr(import_module(module), cls)())


def needed_extensions(names: list[str]) -> list[str]:
    """The built-in extensions whose arguments the named presets set."""
    from importlib import import_module

    settings = {key for name in names for key in PRESETS[name].settings}
    needed = []
    for extension, target in EXTENSIONS.items():
        module, _, cls = target.partition(":")
        if settings & set(getattr(import_module(module), cls).args):
            needed.append(extension)
    return needed


def register_presets(names: list[str]) -> None:
    """Registers the named presets (and the model and extensions they need); known names are
    skipped."""
    from fairseq.models import ARCH_MODEL_REGISTRY, register_model_architecture

    from mtcore_plugins.models.model import register_mtcore_model

    register_extensions(needed_extensions(names))
    register_mtcore_model()
    for name in names:
        preset = PRESETS[name]
        if name not in ARCH_MODEL_REGISTRY:
            register_model_architecture(preset.model, name)(
                architecture(preset.model, preset.settings)
            )
