"""mtcore: machine-translation systems from YAML recipes, every technique a plugin.

The core is laid out by concern (docs/plugins.md, "The core's layout"); plugins import
:mod:`mtcore.api` and nothing else. The flat module paths of before still import, with a
deprecation warning (:mod:`mtcore._moved`).
"""

from mtcore import _moved

__version__ = "0.1.0"

_moved.install()
