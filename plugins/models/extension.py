"""What a package that adds a model family imports besides :mod:`mtcore.api`: the extension
point of the shared Transformer ``mtcore_transformer`` (a built-in model plugin, so its surface
lives here, in the plugin layer, not in the core, which knows nothing of fairseq).

A family is declared once, as a :class:`ModelFamily`: its name (the entry-point name), its
:class:`ModelExtension` (fairseq arguments and hooks: see
:mod:`mtcore_plugins.common.fairseq.model_extension`) and its named configurations. The train
step registers the plugins named in its ``models`` in fairseq's process; a model's artifact
records them, so ``translate``, ``mtcore translate`` and an exported system register them again
when they load it. ``examples/mtcore-example-model`` is such a package, in one file; each
built-in family is one class of :mod:`mtcore_plugins.models.families`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any, ClassVar

from mtcore.api import Model, PluginConfig
from mtcore_plugins.common.fairseq.model_extension import (
    ArgSpec,
    ModelExtension,
    register_extension,
)
from mtcore_plugins.models.zoo import MTCORE, architecture

__all__ = [
    "ArgSpec",
    "ModelExtension",
    "ModelFamily",
    "register_architecture",
    "register_extension",
]

USER_DIR = Path(__file__).resolve().parent / "user_dir" / "mtcore_fairseq"


def user_dir() -> str:
    """A fairseq ``--user-dir`` that registers every mtcore architecture and criterion, for plain
    ``fairseq-train`` / ``fairseq-generate`` in a fresh process."""
    return str(USER_DIR)


def register_architecture(
    name: str,
    settings: Mapping[str, Any],
    extensions: Sequence[ModelExtension] = (),
    model: str = MTCORE,
) -> None:
    """Registers the fairseq architecture ``name`` of ``model`` (``mtcore_transformer`` unless
    told): ``settings`` (fairseq arguments, an extension's included) fill what the command line
    leaves unset, then the model's defaults the rest. ``extensions`` are registered first, and
    ``mtcore_transformer`` itself. Idempotent, as ``register()`` must be; imports fairseq."""
    from fairseq.models import ARCH_MODEL_REGISTRY, register_model_architecture

    for extension in extensions:
        register_extension(extension)
    if model == MTCORE:
        from mtcore_plugins.models.model import register_mtcore_model

        register_mtcore_model()
    if name not in ARCH_MODEL_REGISTRY:
        register_model_architecture(model, name)(architecture(model, dict(settings)))


def _extension(spec: type[ModelExtension] | str) -> ModelExtension:
    if isinstance(spec, str):
        module, _, cls = spec.partition(":")
        return getattr(import_module(module), cls)()  # type: ignore[no-any-return]
    return spec()


class ModelFamily(Model[PluginConfig]):
    """A model family in one declaration: ``name``, the ``extensions`` it adds to
    ``mtcore_transformer`` (classes, or ``"module:Class"`` imported at registration, so that
    listing plugins imports no torch) and its ``presets`` (architecture name -> settings over
    ``model``'s defaults). ``register()`` registers the extensions and every preset."""

    model: ClassVar[str] = MTCORE
    extensions: ClassVar[tuple[type[ModelExtension] | str, ...]] = ()
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    def register(self) -> None:
        for spec in self.extensions:
            register_extension(_extension(spec))
        if self.model == MTCORE:
            from mtcore_plugins.models.model import register_mtcore_model

            register_mtcore_model()
        for arch, settings in self.presets.items():
            register_architecture(arch, settings, model=self.model)

    def user_dir(self) -> str:
        return user_dir()

    @classmethod
    def architectures(cls) -> list[str]:
        return sorted(cls.presets)
