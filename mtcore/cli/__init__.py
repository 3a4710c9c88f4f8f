"""The ``mtcore`` command (:mod:`.app`), its shared options, and ``translate`` / ``export``.
``python -m mtcore.cli`` runs it without the console script."""
