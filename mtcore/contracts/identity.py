"""What of a plugin's settings is part of a step's hash: the markers a ``Config`` puts on a
setting (``NOT_IDENTITY``, ``HASHED_WHEN_SET``, :func:`ignored_when`) and the settings less
what they leave out (:func:`identity_dict`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.config import JsonDict

NOT_IDENTITY: JsonDict = {"identity": False}
"""``Field(..., json_schema_extra=NOT_IDENTITY)`` marks a setting that cannot change a step's
output (a cache directory, a timeout, a thread count): it is left out of the step's hash."""


HASHED_WHEN_SET: JsonDict = {"hashed_when_set": True}
"""``Field(..., json_schema_extra=HASHED_WHEN_SET)`` marks a setting added after recipes were
cached: left out of the step's hash while it has its default, so that the steps of recipes that
do not use it keep their hashes (and their cached outputs)."""


def ignored_when(**settings: Any) -> JsonDict:
    """``Field(..., json_schema_extra=ignored_when(backend="fairseq"))`` marks a setting the
    output ignores while the config's other settings have these values (CTranslate2's compute
    type under the fairseq backend): it is then left out of the step's hash."""
    return {"ignored_when": settings}


def _hashed(field: Any) -> bool:
    extra = field.json_schema_extra
    return not (isinstance(extra, dict) and extra.get("identity") is False)


def _left_out(config: BaseModel, field: Any, dumped: Any) -> bool:
    """Whether a setting stays out of the hash: marked ``NOT_IDENTITY``, ``HASHED_WHEN_SET`` at
    its default, or ``ignored_when`` its condition holds."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if extra.get("identity") is False:
        return True
    if extra.get("hashed_when_set") is True and dumped == field.default:
        return True
    condition = extra.get("ignored_when")
    return isinstance(condition, dict) and all(
        getattr(config, key) == value for key, value in condition.items()
    )


def identity_dict(config: BaseModel, registry: Any = None) -> dict[str, Any]:
    """The config as JSON values, at every depth (nested models and, given the ``registry``,
    the settings of components, lists or one), less what the markers leave out of a hash:
    ``NOT_IDENTITY``, ``HASHED_WHEN_SET`` at its default, ``ignored_when``."""
    out: dict[str, Any] = {}
    dumped = config.model_dump(mode="json")
    for name, field in type(config).model_fields.items():
        if _left_out(config, field, dumped[name]):
            continue
        value = getattr(config, name)
        extra = field.json_schema_extra
        kind = extra.get("components") if isinstance(extra, dict) else None
        if isinstance(value, BaseModel):
            out[name] = identity_dict(value, registry)
        elif registry is not None and isinstance(kind, str) and isinstance(dumped[name], list):
            out[name] = [component_identity(registry, kind, entry) for entry in dumped[name]]
        elif registry is not None and isinstance(kind, str) and isinstance(dumped[name], dict):
            out[name] = component_identity(registry, kind, dumped[name])
        else:
            out[name] = dumped[name]
    return out


def component_identity(registry: Any, kind: str, entry: Any) -> Any:
    """A component entry as written, less the plugin's settings marked ``NOT_IDENTITY``
    (keys the plugin's ``Config`` does not know, such as an engine's ``keep``, stay)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return entry
    plugin = registry.load(kind, entry["name"])
    return _strip(entry, plugin.Config)


def _strip(values: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        field = model.model_fields.get(key)
        if field is not None and not _hashed(field):
            continue
        inner = field.annotation if field is not None else None
        if isinstance(value, dict) and isinstance(inner, type) and issubclass(inner, BaseModel):
            value = _strip(value, inner)
        out[key] = value
    return out
