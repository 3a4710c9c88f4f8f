"""fairseq / mtcore checkpoints as CTranslate2 models, written against CTranslate2's model-spec
API (its stock fairseq converter knows the plain ``transformer`` arch only).

What converts: fairseq's ``transformer`` and ``mtcore_transformer`` with post-LN or pre-LN
layers (each side on its own), any depth, width and head count, shared or separate embeddings,
learned or sinusoidal positions, an embedding LayerNorm, and Shaw et al. (2018) relative
positions (NT5 §4.1, ``--rpe-max-distance``) in the encoder and/or decoder, which CTranslate2
runs as OpenNMT-py's ``max_relative_positions`` (2k+1 key and value vectors shared by the
heads; keys-only models get a zero value table). What does not, and why, is
:func:`unsupported`: it reads the checkpoint's arguments only, so a model that cannot convert
is refused before any weight is read or any line decoded.

A converted model is a cache entry under ``$MTCORE_CACHE/ctranslate2/<key>`` keyed by the
sha256 of the checkpoint and dictionaries (and this converter's and CTranslate2's versions),
written to a temporary directory and renamed into place, as step outputs are. It is saved in
float32; the compute type (int8, float16, ...) is chosen when it is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from mtcore.api import Artifact, DataError, content_hash
from mtcore.api.engine import conversions_home, hash_json
from mtcore_plugins.common.ct2.spec import ACTIVATIONS, transformer_spec
from mtcore_plugins.common.fairseq.model_extension import registered

LIMITS_FILE = "mtcore_limits.json"  # the fairseq model's (source, target) positions
CONVERTER_VERSION = 1  # bump when the mapping below changes: old cache entries are then unused

# fairseq --activation-fn -> CTranslate2 (as its own fairseq converter maps them).
MODELS = ("transformer", "mtcore_transformer")


def checkpoint_path(model: Artifact) -> Path:
    return model.file("checkpoint", "checkpoint.pt")


def checkpoint_args(path: Path) -> Any:
    """The model arguments saved in a fairseq checkpoint, read without loading its tensors
    (memory-mapped)."""
    import torch

    from mtcore_plugins.common.fairseq.setup import add_safe_globals

    add_safe_globals()
    state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    cfg = state.get("cfg")
    args = cfg["model"] if cfg is not None and cfg.get("model") is not None else state.get("args")
    if args is None:
        raise DataError(f"{path}: no model arguments in this checkpoint (not a fairseq one?)")
    return args


def model_name(arch: str, plugins: list[str], registry: Any = None) -> str:
    """The fairseq model an architecture belongs to, with mtcore's architectures registered."""
    from mtcore_plugins.common.fairseq.setup import importing_fairseq, register_models

    with importing_fairseq():
        from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    register_models(plugins, registry)
    return str(ARCH_MODEL_NAME_REGISTRY.get(arch, "unregistered"))


def check(model: Artifact, plugins: list[str], registry: Any = None) -> list[str]:
    """Why CTranslate2 cannot run ``model`` (empty: it can), from its checkpoint's arguments."""
    args = checkpoint_args(checkpoint_path(model))
    names = list(dict.fromkeys([*plugins, *model.names("models")]))
    return unsupported(args, model_name(str(getattr(args, "arch", "")), names, registry))


def unsupported(args: Any, model: str) -> list[str]:
    """Why CTranslate2 cannot run a fairseq ``model`` of these checkpoint arguments."""
    get = args.get if isinstance(args, dict) else lambda k, d=None: getattr(args, k, d)
    arch = str(get("arch", "?"))
    reasons = []
    if model not in MODELS:
        reasons.append(f"fairseq model {model!r} (convertible: {', '.join(MODELS)})")
    namespace = argparse.Namespace(**args) if isinstance(args, dict) else args
    for extension in registered():  # mtcore_transformer's: each says whether CT2 runs it
        if extension.ctranslate2 and extension.active(namespace):
            reasons.append(f"{extension.ctranslate2} (model extension {extension.name!r})")
    if get("activation_fn", "relu") not in ACTIVATIONS:
        reasons.append(f"activation {get('activation_fn')!r} (valid: {', '.join(ACTIVATIONS)})")
    if get("adaptive_softmax_cutoff", None):
        reasons.append("an adaptive softmax output layer")
    if get("cross_self_attention", False) or get("no_cross_attention", False):
        reasons.append("a decoder without plain encoder-decoder attention")
    if get("no_token_positional_embeddings", False):
        reasons.append("no position embeddings at all")
    if int(get("quant_noise_pq", 0) or 0) > 0:
        reasons.append("quant-noise (product-quantized) layers")
    if get("decoder_output_dim", None) not in (None, get("decoder_embed_dim", None)):
        reasons.append("a decoder output dimension unlike its embedding dimension")
    if get("encoder_embed_dim", None) != get("decoder_embed_dim", None):
        reasons.append("encoder and decoder of different widths")
    return [f"{reason} [arch {arch}]" for reason in reasons]


def cache_key(model: Artifact, src: str, tgt: str) -> str:
    import ctranslate2

    files = [checkpoint_path(model), model.path / f"dict.{src}.txt", model.path / f"dict.{tgt}.txt"]
    return hash_json(
        {
            "files": [content_hash(f) for f in files],
            "converter": CONVERTER_VERSION,
            "ctranslate2": ctranslate2.__version__,
        }
    )[:32]


def converted(
    model: Artifact, src: str, tgt: str, plugins: list[str], registry: Any = None
) -> Path:
    """The CTranslate2 model of ``model`` (a train step's artifact), converted once and cached
    by content. Raises :class:`DataError` naming every reason when it cannot convert."""
    reasons = check(model, plugins, registry)
    if reasons:
        raise DataError(f"{model.path}: CTranslate2 cannot run this model: {'; '.join(reasons)}")
    target = conversions_home() / cache_key(model, src, tgt)
    if (target / "model.bin").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.{os.getpid()}.tmp"
    converter = FairseqSpecConverter(model, src, tgt, plugins, registry)
    converter.convert(str(partial), force=True)
    return install(partial, target, converter.limits)


def install(partial: Path, target: Path, positions: Any) -> Path:
    """A converted model written to ``partial`` renamed into the cache at ``target``, with the
    original model's (source, target) ``positions``."""
    (partial / LIMITS_FILE).write_text(json.dumps(positions) + "\n")
    try:
        os.rename(partial, target)
    except OSError:  # another process renamed its copy first: same bytes, keep theirs
        shutil.rmtree(partial, ignore_errors=True)
        if not (target / "model.bin").exists():
            raise
    return target


def limits(model_dir: Path) -> tuple[int | None, int | None]:
    """(source, target) positions of the converted model's fairseq original."""
    found = json.loads((model_dir / LIMITS_FILE).read_text())
    return found[0], found[1]


def _converter_base() -> Any:
    from ctranslate2.converters.converter import Converter

    return Converter


class FairseqSpecConverter:
    """Builds the fairseq model (mtcore's architectures registered) and fills a CTranslate2
    ``TransformerSpec`` from its modules; ``convert`` is CTranslate2's ``Converter.convert``."""

    def __init__(
        self, model: Artifact, src: str, tgt: str, plugins: list[str], registry: Any
    ) -> None:
        self.model, self.src, self.tgt = model, src, tgt
        self.plugins, self.registry = plugins, registry
        self.limits: list[int | None] = [None, None]

    def convert(self, output_dir: str, force: bool = False, quantization: str | None = None) -> str:
        owner = self

        class _Converter(_converter_base()):  # type: ignore[misc]
            def _load(self) -> Any:
                return owner.spec()

        return str(_Converter().convert(output_dir, force=force, quantization=quantization))

    def spec(self) -> Any:
        import torch

        from mtcore_plugins.common.fairseq.setup import (
            add_safe_globals,
            importing_fairseq,
            register_models,
        )

        with importing_fairseq():
            from fairseq import checkpoint_utils, utils

        model = self.model
        names = [*self.plugins, *model.names("models")]
        register_models(list(dict.fromkeys(names)), self.registry)
        add_safe_globals()
        with torch.no_grad():
            models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
                [str(checkpoint_path(model))],
                arg_overrides={"data": str(model.path), "source_lang": self.src,
                               "target_lang": self.tgt},
            )  # fmt: skip
            loaded = models[0].eval()
            limits = utils.resolve_max_positions(task.max_positions(), loaded.max_positions())
            self.limits = list(limits) if limits else [None, None]
            return transformer_spec(loaded, task.source_dictionary, task.target_dictionary)
