"""The extension point of the shared Transformer ``mtcore_transformer``.

The model itself is fairseq's Transformer, with the same parameter names. Each architecture
family (B2T, relative positions, adapters, DLCL, Evolved cells, or a third party's) is a
:class:`ModelExtension` that its ``mtcore.models`` plugin registers with
:func:`register_extension` in ``register()``, before fairseq parses arguments or loads a
checkpoint. The model asks the active extensions, in ``order``:

- ``args``: the fairseq arguments it adds (name -> (argparse keywords, default)); ``active``
  reads them to say whether the extension is on for a model;
- ``check``: refuses combinations it cannot take part in;
- ``prepare`` (args, task) before building, ``built`` (the model) after it, ``fill_state``
  when a checkpoint loads;
- layer factories: ``layer`` builds a whole layer (the Evolved cell), ``self_attention`` a
  layer's self-attention (relative positions), ``layer_forward`` replaces a fairseq layer's
  forward pass (B2T);
- stack hooks: ``attach`` adds modules to an encoder or decoder stack after it is built,
  ``start`` sees the embedding output, ``next_input`` gives the next layer's input, and
  ``after_layer`` transforms each layer's output (adapters, DLCL);
- ``ctranslate2``: why CTranslate2 cannot run a model that uses it, or None where the converter
  maps it (relative positions). An extension that does not say is not converted.

A factory that returns None leaves the choice to the next extension, and then to fairseq. A
third party adds a family without touching mtcore: subclass, register in the plugin's
``register()`` together with :func:`~mtcore_plugins.models.model.register_mtcore_model`, and
name the plugin in the train step's ``models`` (a model's artifact records them, so decoding
registers them again). The contract and the registry live in the shared layer, so that the
CTranslate2 converter reads them too; everything here is import-light: no fairseq, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

ArgSpec = tuple[dict[str, Any], Any]  # (argparse keywords, default)


class ModelExtension:
    """Base: every hook does nothing; ``name`` is the family's."""

    name: ClassVar[str] = ""
    order: ClassVar[int] = 100  # hooks run (and arguments are added) by ascending order
    args: ClassVar[dict[str, ArgSpec]] = {}
    needs_every_layer: ClassVar[bool] = False  # LayerDrop would skip what this keeps per layer
    ctranslate2: ClassVar[str | None] = "a model extension CTranslate2 does not know"

    def active(self, args: Any) -> bool:
        return False

    def check(self, args: Any, active: Sequence[str]) -> None:
        """Raise ValueError for settings this extension cannot take (``active``: the names of
        every active extension)."""

    def prepare(self, args: Any, task: Any) -> None:
        """Before the model is built: settings that depend on the task."""

    def built(self, model: Any, args: Any) -> None:
        """After the model is built."""

    def fill_state(self, model: Any, state: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's state dict before it loads (e.g. parameters the checkpoint lacks)."""
        return state

    def layer(self, side: str, cfg: Any, no_encoder_attn: bool) -> Any:
        """A whole layer of the ``encoder`` or ``decoder`` stack, or None."""
        return None

    def self_attention(self, side: str, cfg: Any, embed_dim: int) -> Any:
        """A fairseq layer's self-attention module, or None."""
        return None

    def layer_forward(self, side: str) -> Callable[..., Any] | None:
        """A replacement of fairseq's layer forward, ``fn(layer, *args, **kwargs)``, or None."""
        return None

    def attach(self, side: str, stack: Any, cfg: Any) -> None:
        """Add modules to a built stack (they become part of its state dict)."""

    def start(self, stack: Any, states: list[Any], x: Any) -> None:
        """The stack's embedding output, before the first layer."""

    def next_input(self, stack: Any, states: list[Any], x: Any) -> Any:
        """The input of the next layer (or of the final LayerNorm), or None to keep ``x``."""
        return None

    def after_layer(self, stack: Any, index: int, states: list[Any], x: Any) -> Any:
        """The output of layer ``index``, transformed (or as it is)."""
        return x


EXTENSIONS: dict[str, ModelExtension] = {}


def register_extension(extension: ModelExtension) -> None:
    """Adds ``extension`` to the shared Transformer; registering a name again is a no-op, an
    argument another extension owns is an error."""
    if extension.name in EXTENSIONS:
        return
    if not extension.name:
        raise ValueError(f"{type(extension).__name__} has no name")
    for other in EXTENSIONS.values():
        shared = sorted(set(other.args) & set(extension.args))
        if shared:
            raise ValueError(
                f"model extension {extension.name!r} adds arguments {shared}, which "
                f"{other.name!r} already adds"
            )
    EXTENSIONS[extension.name] = extension


def registered() -> list[ModelExtension]:
    """Every registered extension, in hook order."""
    return sorted(EXTENSIONS.values(), key=lambda e: (e.order, e.name))


def active_extensions(args: Any) -> list[ModelExtension]:
    """The registered extensions a model built from ``args`` uses, checked, in hook order."""
    active = [e for e in registered() if e.active(args)]
    names = [e.name for e in active]
    for extension in active:
        extension.check(args, names)
    return active


def first(extensions: Sequence[ModelExtension], hook: str, *args: Any) -> Any:
    """The first non-None answer of ``hook`` among ``extensions``."""
    for extension in extensions:
        value = getattr(extension, hook)(*args)
        if value is not None:
            return value
    return None
