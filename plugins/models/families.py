"""The built-in ``mtcore.models`` families of the shared ``mtcore_transformer``, each declared
once (:class:`~mtcore_plugins.models.extension.ModelFamily`): its name, its extension (the
module beside this one, imported only when registered) and its named presets
``mtcore_<paper>_<config>``, each with a ``..._tiny`` twin (tiny widths, 1-2 layers) for CPU
tests. The plain-Transformer presets are :mod:`~mtcore_plugins.models.presets`'; the R-Drop
criterion is :class:`RDropCriterionPlugin`. Importing this module does not import fairseq."""

from __future__ import annotations

from mtcore.api import Model, PluginConfig
from mtcore_plugins.models.extension import ModelFamily, user_dir
from mtcore_plugins.models.zoo import BIG, NT5_EXT, NT5_TABLE4, PRE_LN, dims

B2T = "mtcore_plugins.models.b2t:B2TExtension"
RPE = "mtcore_plugins.models.rpe:RelativePositionExtension"


class B2TModels(ModelFamily):
    """B2T connections (Takase et al., 2022): NT5 Table 4 with B2T + encoder RPE, and tiny ones."""

    name = "b2t"
    extensions = (B2T, RPE)  # NT5's presets use both
    presets = {
        # NT5 §4.1 / Table 4: the six ensemble configurations with B2T and encoder RPE.
        **{
            f"{name}_b2t_rpe": dims(
                1024, enc_ffn, 16, enc, dec, decoder_ffn_embed_dim=dec_ffn, **NT5_EXT
            )
            for name, (enc, enc_ffn, dec, dec_ffn) in NT5_TABLE4.items()
        },
        "mtcore_nt5_b2t_rpe_tiny": dims(64, 512, 4, 2, 2, **NT5_EXT),
        "mtcore_nt5_b2t_tiny": dims(64, 512, 4, 2, 2, b2t=True),
    }


class RelativePositionModels(ModelFamily):
    """Relative position representations (Shaw et al., 2018), k = 16 (NT5 §4.1)."""

    name = "rpe"
    extensions = (RPE,)
    presets = {"mtcore_nt5_rpe_tiny": dims(64, 512, 4, 2, 2, rpe_max_distance=16)}


class AdapterModels(ModelFamily):
    """Language-specific adapters (Bapna & Firat, 2019; Yishu §2.2.1)."""

    name = "adapters"
    extensions = ("mtcore_plugins.models.adapters:AdapterExtension",)
    presets = {
        # Yishu §2.2.1: adapters with a 4096-wide bottleneck, one set per direction, on the
        # 12-6 model of §2.2.
        "mtcore_yishu_12_6_adapters": dims(512, 4096, 8, 12, 6, adapter_dim=4096),
        "mtcore_yishu_12_6_adapters_tiny": dims(64, 512, 4, 2, 1, adapter_dim=512),
    }


class DlclModels(ModelFamily):
    """Dynamic linear combination of layers (Wang et al., 2019; Xiaomi §3.1), in its pre-norm
    form."""

    name = "dlcl"
    extensions = ("mtcore_plugins.models.dlcl:DlclExtension",)
    presets = {
        "mtcore_xiaomi_dlcl_big": dims(**BIG, enc=6, dec=6, dlcl=True, **PRE_LN),
        # "based on the Transformer-Deep-12-12 above"
        "mtcore_xiaomi_dlcl_deep": dims(**BIG, enc=12, dec=12, dlcl=True, **PRE_LN),
        "mtcore_xiaomi_dlcl_big_tiny": dims(64, 256, 4, 1, 1, dlcl=True, **PRE_LN),
        "mtcore_xiaomi_dlcl_deep_tiny": dims(64, 256, 4, 2, 2, dlcl=True, **PRE_LN),
    }


class EvolvedModels(ModelFamily):
    """The Evolved Transformer (So et al., 2019; Xiaomi §3.1)."""

    name = "evolved"
    extensions = ("mtcore_plugins.models.evolved:EvolvedExtension",)
    presets = {
        # Xiaomi §3.1 footnote 6: T2T's evolved_transformer_base, i.e. transformer_base sizes
        # with 3 encoder and 4 decoder cells (an ET cell is about two Transformer layers deep).
        "mtcore_xiaomi_evolved": dims(512, 2048, 8, 3, 4, cell="evolved", **PRE_LN),
        "mtcore_xiaomi_evolved_tiny": dims(64, 256, 4, 1, 2, cell="evolved", **PRE_LN),
    }


class RDropCriterionPlugin(Model):
    """The R-Drop criterion ``mtcore_rdrop`` (Wu et al., 2021; HW-TSC §3.2): train with
    ``--criterion mtcore_rdrop --alpha 5`` (train step: ``criterion: mtcore_rdrop``,
    ``criterion_args: {alpha: 5}``)."""

    name = "rdrop"

    class Config(PluginConfig):
        """No settings: alpha is the criterion argument ``--alpha``."""

    def register(self) -> None:
        from mtcore_plugins.models.rdrop import register_rdrop

        register_rdrop()

    def user_dir(self) -> str:
        return user_dir()

    @staticmethod
    def architectures() -> list[str]:
        return []
