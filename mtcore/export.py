"""``mtcore export``: a stage of a finished run as a self-contained directory.

The directory holds ``system.json`` and ``artifacts/``: every finished artifact the stage's
inference path reads (models with their dictionaries, SentencePiece and truecase models,
language models, rerank feature models), copied, and each replayed step's kind and settings as
it runs on new text (a rerank step with the weights the run tuned). ``system.json`` also
records the recipe, profile, step hashes, the stage's scores with their sacrebleu signatures
and the mtcore version. ``mtcore translate --system DIR`` (or :func:`load_system`) translates
with it, with no workdir and no recipe: the same steps, the same output.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from mtcore import __version__
from mtcore.errors import MtcoreError
from mtcore.inference import Replay, Stage, Translator
from mtcore.plan import make_plan, step_dir
from mtcore.recipe import Recipe
from mtcore.registry import Registry
from mtcore.runner import read_manifest
from mtcore.step import config_dict

SYSTEM_FILE = "system.json"
FORMAT = 1


def export_system(recipe: Recipe, registry: Registry, system: Translator, workdir: Path,
                  folder: Path) -> dict[str, Any]:  # fmt: skip
    """Writes ``system`` (loaded from the run in ``workdir``) into the new directory
    ``folder``; returns what ``system.json`` holds."""
    if folder.exists() and any(folder.iterdir()):
        raise MtcoreError(f"{folder} exists and is not empty; give a new directory")
    artifacts = folder / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    copied: dict[str, str] = {}
    steps = []
    for replay in system.replays:
        inputs: dict[str, list[str]] = {}
        for role, (where, what) in replay.inputs.items():
            if where == "artifact":
                if what not in copied:
                    source = Path(what)
                    name = f"{source.parent.name}.{source.name}"
                    shutil.copytree(source, artifacts / name, ignore=_logs)
                    copied[what] = f"artifacts/{name}"
                what = copied[what]
            inputs[role] = [where, what]
        config = config_dict(replay.plugin.config)
        steps.append({"id": replay.id, "kind": replay.kind, "hash": replay.hash,
                      "config": config, "inputs": inputs})  # fmt: skip
    planned = {p.id: p for p in make_plan(recipe, registry)}
    evaluated = read_manifest(step_dir(workdir, planned[system.stage.evaluate]))
    stage = system.stage
    info = {
        "format": FORMAT,
        "mtcore": __version__,
        "recipe": recipe.name,
        "profile": recipe.profile,
        "stage": {
            "name": stage.name,
            "direction": stage.direction,
            "evaluate": stage.evaluate,
            "hyp": list(stage.hyp),
            "test": list(stage.test),
        },  # fmt: skip
        "test_set": {
            "langs": list(system.langs),
            "name": system.corpus_name,
            "hash": planned[stage.test[0]].hash,
        },  # fmt: skip
        "scores": evaluated.get("metrics", {}),
        "executor": {"name": system.executor[0], "settings": system.executor[1]},
        "steps": steps,
    }
    (folder / SYSTEM_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return info


def _logs(folder: str, names: list[str]) -> list[str]:
    """Training and tool logs stay behind: nothing reads them on the way to a translation."""
    return [n for n in names if n.endswith(".log")]


def load_system(
    folder: Path, registry: Registry, device: str | None = None, show_progress: bool = False
) -> Translator:
    """The system an export wrote into ``folder``."""
    path = folder / SYSTEM_FILE
    if not path.is_file():
        raise MtcoreError(f"{folder} is not an exported system: it has no {SYSTEM_FILE}")
    info = json.loads(path.read_text(encoding="utf-8"))
    if info.get("format") != FORMAT:
        raise MtcoreError(f"{path}: format {info.get('format')!r}; this mtcore reads {FORMAT}")
    replays = []
    for step in info["steps"]:
        config = dict(step["config"])
        cls = registry.load("steps", step["kind"])
        if device is not None and "device" in cls.Config.model_fields:
            config["device"] = device
        inputs = {}
        for role, (where, what) in step["inputs"].items():
            inputs[role] = (where, str(folder / what) if where == "artifact" else what)
        replays.append(Replay(step["id"], step["kind"], step["hash"], cls.from_dict(config),
                              inputs))  # fmt: skip
    s = info["stage"]
    stage = Stage(s["name"], s["direction"], s["evaluate"], tuple(s["hyp"]), tuple(s["test"]))
    executor = (info["executor"]["name"], info["executor"]["settings"])
    test_set = info["test_set"]
    return Translator(stage, replays, tuple(test_set["langs"]), test_set["name"], registry,
                      executor, show_progress)  # fmt: skip
