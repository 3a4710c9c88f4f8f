"""What a package that adds a model family imports besides :mod:`mtcore.api`: the extension
point of the shared Transformer ``mtcore_transformer`` (a built-in model plugin, so its surface
lives here, in the plugin layer, not in the core, which knows nothing of fairseq).

A family is one :class:`ModelExtension` (its fairseq arguments and hooks: see
:mod:`mtcore_plugins.common.fairseq.model_extension`) and an ``mtcore.models`` plugin whose
``register()`` calls :func:`register_architecture` for each named configuration. The train
step registers the plugins named in its ``models`` in fairseq's process; a model's artifact
records them, so ``translate``, ``mtcore translate`` and an exported system register them again
when they load it. ``examples/mtcore-example-model`` is such a package, in one file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mtcore_plugins.common.fairseq.model_extension import (
    ArgSpec,
    ModelExtension,
    register_extension,
)

__all__ = ["ArgSpec", "ModelExtension", "register_architecture", "register_extension"]


def register_architecture(
    name: str, settings: Mapping[str, Any], extensions: Sequence[ModelExtension] = ()
) -> None:
    """Registers the fairseq architecture ``name`` of ``mtcore_transformer``: ``settings``
    (fairseq arguments, an extension's included) fill what the command line leaves unset, then
    fairseq's Transformer defaults the rest. ``extensions`` are registered first, and the model
    itself. Idempotent, as ``register()`` must be; imports fairseq."""
    from fairseq.models import ARCH_MODEL_REGISTRY, register_model_architecture

    from mtcore_plugins.models.model import register_mtcore_model
    from mtcore_plugins.models.zoo import MTCORE, architecture

    for extension in extensions:
        register_extension(extension)
    register_mtcore_model()
    if name not in ARCH_MODEL_REGISTRY:
        register_model_architecture(MTCORE, name)(architecture(MTCORE, dict(settings)))
