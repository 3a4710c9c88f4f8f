"""The ``mtcore`` command (:mod:`.app`), its shared options, and ``translate`` / ``export``.
``python -m mtcore.cli`` runs it without the console script.

``mtcore.cli`` was one module before the core was laid out by concern; its names still resolve
here, with a deprecation warning, for a deprecation period.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from mtcore._moved import forward

    return forward(__name__, "mtcore.cli.app", name)
