"""The ``mtcore.models`` plugins, one per technique family. Each ``register()`` adds the family's
extension to the shared ``mtcore_transformer`` model
(:mod:`~mtcore_plugins.common.fairseq.model_extension`) and puts the model and the family's named
presets (or the R-Drop criterion) into fairseq's registries; it is idempotent and imports fairseq
only when called."""

from __future__ import annotations

from mtcore.api import Model, PluginConfig
from mtcore_plugins.models.presets import user_dir


class PresetFamily(Model):
    """Base: registers ``mtcore_transformer`` and the presets whose family is ``name``."""

    class Config(PluginConfig):
        """No settings: the architectures are fixed; their options are fairseq arguments."""

    def register(self) -> None:
        from mtcore_plugins.models.model import register_mtcore_model
        from mtcore_plugins.models.zoo import register_extensions, register_presets

        register_extensions([self.name])
        register_mtcore_model()
        register_presets(self.architectures())

    def user_dir(self) -> str:
        return user_dir()

    @classmethod
    def architectures(cls) -> list[str]:
        from mtcore_plugins.models.zoo import of_family

        return of_family(cls.name)


class B2TModels(PresetFamily):
    """B2T connections (Takase et al., 2022): NT5 Table 4 with B2T + encoder RPE, and tiny ones."""

    name = "b2t"


class RelativePositionModels(PresetFamily):
    """Relative position representations (Shaw et al., 2018), k = 16 (NT5 §4.1)."""

    name = "rpe"


class AdapterModels(PresetFamily):
    """Language-specific adapters (Bapna & Firat, 2019; Yishu §2.2.1)."""

    name = "adapters"


class DlclModels(PresetFamily):
    """Dynamic linear combination of layers (Wang et al., 2019; Xiaomi §3.1)."""

    name = "dlcl"


class EvolvedModels(PresetFamily):
    """The Evolved Transformer (So et al., 2019; Xiaomi §3.1)."""

    name = "evolved"


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
