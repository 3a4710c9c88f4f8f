"""The hook manager of a run started from the CLI: the lifecycle events of
:mod:`mtcore.contracts.hooks`, the core's own implementations (the report writer) and those of
installed packages."""

from __future__ import annotations

import pluggy

from mtcore.contracts.hooks import lifecycle_manager
from mtcore.report.markdown import ReportWriter

REPORT = "mtcore.report"
"""The name the built-in report writer is registered under (``pm.unregister(name=REPORT)``
runs without writing ``report.md``)."""


def make_plugin_manager(
    load_entrypoints: bool = True, builtins: bool = True
) -> pluggy.PluginManager:
    """A fresh manager per run: the core's own hook implementations (``builtins``: the report
    writer), then those of the ``mtcore.hooks`` entry-point group."""
    pm = lifecycle_manager()
    if builtins:
        pm.register(ReportWriter(), name=REPORT)
    if load_entrypoints:
        pm.load_setuptools_entrypoints("mtcore.hooks")
    return pm
