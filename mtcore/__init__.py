"""mtcore: machine-translation systems from YAML recipes, every technique a plugin."""

__version__ = "0.1.0"
