"""The base of every plugin: ``name`` (its entry-point name), a nested pydantic ``Config`` and,
per kind (:mod:`mtcore.contracts.kinds`), one or two methods. The registry finds them through
entry points."""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, cast, get_args, get_origin

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypeVar


class PluginConfig(BaseModel):
    """Base of every plugin's ``Config``: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


ConfigT = TypeVar("ConfigT", bound=PluginConfig, default=PluginConfig)
"""A plugin's settings type: ``class LengthFilter(Filter[LengthConfig])`` types
``self.config`` as a ``LengthConfig`` and, declared once, sets ``Config`` too."""


class Plugin(Generic[ConfigT], metaclass=ABCMeta):
    """Common base: ``name`` equals the entry-point name; ``Config`` holds the settings.

    A plugin names its settings type once, as the kind's parameter
    (``class LengthFilter(Filter[LengthConfig])``): that sets ``Config`` (what the registry
    validates a recipe's settings with) and types ``self.config``. A class that sets ``Config``
    itself (a nested ``class Config``) keeps it; one that sets both must name the same class.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[PluginConfig]] = PluginConfig
    licences: ClassVar[Mapping[str, str]] = {}
    """The licences of the models or data the plugin runs, by backend or file (empty: only
    its code's, the package's): ``mtcore plugins KIND --show NAME`` prints them, so a user
    checks them before shipping a system trained with them."""

    config: ConfigT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if not (isinstance(origin, type) and issubclass(origin, Plugin)):
                continue
            args = get_args(base)
            given = args[0] if args else None
            if not (isinstance(given, type) and issubclass(given, PluginConfig)):
                continue  # still generic (``class ArrayFilter(Filter[ConfigT])``)
            own = cls.__dict__.get("Config")
            if own is not None and own is not given:
                raise TypeError(
                    f"{cls.__qualname__}: Config is {own.__qualname__} but the class is "
                    f"declared over {given.__qualname__}; name the settings type once"
                )
            cls.Config = given

    def __init__(self, config: ConfigT | None = None) -> None:
        self.config = config if config is not None else cast(ConfigT, self.Config())

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> Plugin[Any]:
        return cls(cast(ConfigT, cls.Config.model_validate(values or {})))


Pair = tuple[str, ...]
"""One segment of a corpus: one string per language, in the corpus' language order."""
