"""Typed contracts (issue 49 point 4): a plugin names its settings type once, as its kind's
parameter, and that one declaration is what validates a recipe's settings and types
``self.config``."""

from __future__ import annotations

import ast

import pytest
from pydantic import Field

from mtcore.api import ConfigT, Filter, PluginConfig, Step, Tuner, load_registry
from mtcore.contracts.registry import KINDS
from tests.support import ROOT


class _Settings(PluginConfig):
    limit: int = Field(3, ge=1)


def test_the_kind_parameter_sets_config_and_types_self_config():
    class Limited(Filter[_Settings]):
        name = "limited"

        def accept(self, score):
            return True

    assert Limited.Config is _Settings
    plugin = Limited.from_dict({"limit": 5})
    assert isinstance(plugin.config, _Settings) and plugin.config.limit == 5
    assert Limited().config.limit == 3
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Limited.from_dict({"limit": 0})


def test_a_generic_intermediate_base_passes_the_parameter_on():
    class Base(Filter[ConfigT]):
        pass

    class Leaf(Base[_Settings]):
        name = "leaf"

        def accept(self, score):
            return True

    assert Base.Config is PluginConfig
    assert Leaf.Config is _Settings


def test_config_and_parameter_that_disagree_are_an_error():
    class Other(PluginConfig):
        pass

    with pytest.raises(TypeError, match="declared over _Settings"):

        class Twice(Step[_Settings]):
            name = "twice"
            Config = Other


def test_every_installed_plugin_validates_with_the_type_it_declares():
    """Every plugin of every kind whose class is declared over a settings type has that type
    as ``Config``; none is left with the bare base settings but those without settings."""
    registry = load_registry()
    seen = 0
    for kind in KINDS:
        for name in registry.names(kind):
            cls = registry.load(kind, name)
            seen += 1
            for base in getattr(cls, "__orig_bases__", ()):
                args = getattr(base, "__args__", ())
                if args and isinstance(args[0], type) and issubclass(args[0], PluginConfig):
                    assert cls.Config is args[0], (kind, name)
    assert seen > 100


def test_plugins_do_not_narrow_their_config_by_hand():
    """No ``assert isinstance(config, ...)`` and no class-level ``config: X`` annotation in the
    built-in plugins: the kind's parameter types ``self.config`` (a nested ``class Config``,
    which the parameter cannot name before it exists, keeps its annotation)."""
    wrong = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and "isinstance(config" in ast.unparse(node.test):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ClassDef):
                nested = any(isinstance(s, ast.ClassDef) and s.name == "Config" for s in node.body)
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.AnnAssign)
                        and ast.unparse(stmt.target) == "config"
                        and stmt.value is None
                        and not nested
                    ):
                        wrong.append(f"{path.relative_to(ROOT)}:{stmt.lineno} config: ...")
    assert not wrong, "declare the settings type as the kind's parameter:\n" + "\n".join(wrong)


def test_a_chain_setting_declares_its_specs_once():
    """Issue 49 point 3: the ``components`` mark of a setting (kind, the keys reserved for the
    step, the label key) is also where its chain's specs come from (``field_specs``), for
    the processors of ``normalize``, the features of ``rerank`` and the augmenters alike."""
    from mtcore.api import PluginError, components
    from mtcore.api.engine import field_specs

    class Chained(PluginConfig):
        features: list[dict | str] = Field(
            ...,
            json_schema_extra=components("scorers", reserved=("feature",), label_key="feature"),
        )
        processors: list[dict | str] | None = Field(
            None, json_schema_extra=components("processors", reserved=("langs",))
        )
        other: int = 0

    config = Chained(
        features=["length", {"name": "length", "ratio": True}, {"name": "ngram", "feature": "lm"}],
        processors=[{"name": "nfkc", "langs": ["ja"]}, "nfkc"],
    )
    specs = field_specs(config, "features")
    assert [s.label for s in specs] == ["length", "length#2", "lm"]
    assert [s.kind for s in specs] == ["scorers"] * 3
    assert dict(specs[1].settings) == {"ratio": True}
    assert dict(specs[2].settings) == {} and specs[2].get("feature") == "lm"
    processors = field_specs(config, "processors")
    assert list(processors[0].get("langs")) == ["ja"] and dict(processors[0].settings) == {}
    assert field_specs(Chained(features=[]), "processors") == ()
    with pytest.raises(PluginError, match="not a setting marked components"):
        field_specs(config, "other")


def test_required_methods_are_abstract_and_every_plugin_has_them():
    """Issue 49 point 4: a kind's required methods are abstract, so a plugin that lacks one
    fails when it is made, naming the method, not at its first batch; no installed plugin is
    abstract. An optional ability is a small mixin: a corpus fit is ``CorpusFit``."""
    import inspect

    from mtcore.api.engine import CorpusFit

    class NoAccept(Filter[_Settings]):
        name = "no_accept"

        def score(self, batch):
            return [0.0] * len(batch)

    with pytest.raises(TypeError, match="abstract method '?accept"):
        NoAccept()

    class NoRun(Step[_Settings]):
        name = "no_run"

    class NoFit(Tuner[_Settings]):
        name = "no_fit"

    with pytest.raises(TypeError, match="abstract method '?run"):
        NoRun()
    with pytest.raises(TypeError, match="abstract method '?fit"):
        NoFit()
    registry = load_registry()
    abstract = [
        f"{kind}:{name}"
        for kind in KINDS
        for name in registry.names(kind)
        if inspect.isabstract(registry.load(kind, name))
    ]
    assert abstract == []
    fitting = [
        name
        for name in registry.names("filters")
        if issubclass(registry.load("filters", name), CorpusFit)
    ]
    assert fitting == ["alignment"]
