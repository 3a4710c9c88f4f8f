"""mtcore: machine-translation systems from YAML recipes, every technique a plugin.

The core is laid out by concern (docs/plugins.md, "The core's layout"); plugins import
:mod:`mtcore.api` and nothing else (the built-in ones :mod:`mtcore.api.engine` too). Its
folders are layers, each importing only those below it (lowest first; import-linter checks
it, ``[tool.importlinter]`` in pyproject.toml):

    contracts < recipe < exec < text < data < chain < run < system < report < cli | api
"""

__version__ = "0.1.0"
