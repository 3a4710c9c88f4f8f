"""What every process that loads fairseq checkpoints sets up first: the types torch's safe
loader allows, fairseq's logging kept off the terminal, the model plugins registered."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mtcore_plugins.common.fairseq.deferred import deferred


def safe_globals() -> list[Any]:
    """Types inside fairseq checkpoints that torch's weights-only unpickler must allow. Found by
    loading fairseq 0.12 checkpoints (interval, last, best; with optimizer state) under torch
    2.13: ``argparse.Namespace`` (a legacy architecture's ``cfg.model``), and with --eval-bleu
    the numpy arrays of n-gram counts in the logged meters (``extra_state["metrics"]``): numpy's
    array reconstructor, ``ndarray``, ``dtype`` and the integer and float dtype classes. Plain
    data only; every other global stays refused."""
    import numpy

    core = getattr(numpy, "_core", None) or numpy.core  # numpy 2 renamed numpy.core
    dtypes = [type(numpy.dtype(t)) for t in ("int32", "int64", "float32", "float64")]
    return [argparse.Namespace, core.multiarray._reconstruct, numpy.ndarray, numpy.dtype, *dtypes]


@contextmanager
def importing_fairseq() -> Iterator[None]:
    """Around a process's first fairseq import: its root logger kept, and the statistics
    libraries two unused fairseq tasks import deferred to first use (deferred.py)."""
    with root_logging_kept(), deferred():
        yield


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """Importing fairseq calls ``logging.basicConfig(level=DEBUG)`` (wav2vec2_classification)
    and more: every library's debug output would reach the user's terminal. Undo that."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    if not handlers:  # basicConfig does nothing while the root logger has a handler
        root.addHandler(logging.NullHandler())
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def add_safe_globals() -> None:
    """The allow-list above, and every torch load of the process weights-only whatever the
    environment says (:func:`mtcore.exec.process.safe_torch_loads`)."""
    import torch.serialization

    from mtcore.api.engine import safe_torch_loads

    safe_torch_loads()
    torch.serialization.add_safe_globals(safe_globals())


def register_models(names: Sequence[str], registry: Any = None) -> None:
    """Calls ``register()`` of each named ``mtcore.models`` plugin (idempotent by contract)."""
    if registry is None:
        from mtcore.api import load_registry

        registry = load_registry()
    for name in names:
        plugin = registry.load("models", name).from_dict({})
        plugin.register()
