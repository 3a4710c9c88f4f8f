"""``mtcore export``: a stage of a finished run as a self-contained directory.

The directory holds ``system.json`` and ``artifacts/``: every finished artifact the stage's
inference path reads (models with their dictionaries, SentencePiece and truecase models,
language models, rerank feature models), copied, and each replayed step's kind and settings as
it runs on new text (a rerank step with the weights the run tuned). ``system.json`` also
records the recipe, profile, step hashes, the stage's scores with their sacrebleu signatures
and the mtcore version. ``mtcore translate --system DIR`` (or :func:`load_system`) translates
with it, with no workdir and no recipe: the same steps, the same output.

An exported system is data from someone else (people download systems as they download
checkpoints), and loading one runs no code of its own and writes nowhere outside a temporary
directory. ``system.json`` is read against a strict, versioned schema (:class:`SystemFile`:
unknown keys refused, sizes bounded): step ids and output names are plain names, never paths;
each step's kind is one a replayed path may hold (a step kind that declares ``streams``) and its
settings are validated by that kind; an artifact is a path under ``artifacts/``, resolved
inside the directory, with no symbolic link on the way; every file under ``artifacts/`` is
listed with its sha256 at export and checked at load (an unlisted or changed file is an
error). No executor or environment settings are exported or honoured: a system translates with
the local executor on this machine's cores.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from mtcore import __version__
from mtcore.contracts.errors import MtcoreError, PluginError
from mtcore.contracts.registry import Registry
from mtcore.contracts.step import Artifact, ModelExport, config_dict
from mtcore.recipe.hashing import hash_file
from mtcore.recipe.load import VARIADIC, Recipe
from mtcore.recipe.plan import make_plan, step_dir
from mtcore.run.runner import read_manifest
from mtcore.system.inference import Replay, Stage, Translator

SYSTEM_FILE = "system.json"
FORMAT = 2  # 1: before the schema (executor settings, no checksums); re-export those
MAX_SYSTEM_BYTES = 16 << 20

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")]
"""A step id, an output, a corpus or language name: a plain name, never a path ('..' fails the
pattern's first character; '.' and '..' alone too)."""
Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8,64}$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ArtifactPath = Annotated[
    str, StringConstraints(pattern=r"^artifacts/[A-Za-z0-9_][A-Za-z0-9_.+-]{0,255}$")
]
ArtifactFile = Annotated[
    str,
    StringConstraints(
        pattern=r"^artifacts/[A-Za-z0-9_][A-Za-z0-9_.+-]{0,255}(/[^/\x00]{1,255}){1,32}$"
    ),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StageEntry(Strict):
    name: Name
    direction: Name  # as the recipe names it: "enja"
    evaluate: Name
    hyp: tuple[Name, Name]
    test: tuple[Name, Name]


class TestSetEntry(Strict):
    langs: list[Name] = Field(min_length=1, max_length=8)
    name: Name
    hash: Hex


class StepEntry(Strict):
    id: Name
    kind: Name
    hash: Hex
    config: dict[str, Any]
    inputs: dict[Name, tuple[Literal["test", "step", "artifact"], str]] = Field(max_length=32)


class SystemFile(Strict):
    """``system.json``, format 2."""

    format: Literal[2]
    mtcore: Annotated[str, StringConstraints(max_length=64)]
    recipe: Annotated[str, StringConstraints(max_length=256)]
    profile: Annotated[str, StringConstraints(max_length=256)] | None
    stage: StageEntry
    test_set: TestSetEntry
    scores: dict[str, Any]
    steps: list[StepEntry] = Field(min_length=1, max_length=256)
    artifacts: dict[ArtifactFile, Sha256] = Field(max_length=100_000)


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
                    refuse_links(source)
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
        "steps": steps,
        "artifacts": {
            path.relative_to(folder).as_posix(): hash_file(path)
            for path in sorted(artifacts.rglob("*"))
            if path.is_file()
        },
    }
    SystemFile.model_validate(info)  # what load_system will ask of it
    (folder / SYSTEM_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return info


def refuse_links(source: Path) -> None:
    """No step writes a symbolic link: one in an output was planted, and copying it would pack
    its target (anything the user can read) into a system meant for others."""
    found = [source] if source.is_symlink() else []
    for top, folders, files in os.walk(source):
        found += [Path(top, n) for n in folders + files if os.path.islink(os.path.join(top, n))]
    if found:
        raise MtcoreError(
            f"{found[0]}: a symbolic link in a step's output; an export copies plain files only "
            "(remove it and run the step again: `mtcore verify` finds what else changed)"
        )


def _logs(folder: str, names: list[str]) -> list[str]:
    """Training and tool logs stay behind: nothing reads them on the way to a translation."""
    return [n for n in names if n.endswith(".log")]


def load_system(
    folder: Path, registry: Registry, device: str | None = None, show_progress: bool = False
) -> Translator:
    """The system an export wrote into ``folder``, checked as data from someone else (the
    module's docstring): every problem is a :class:`MtcoreError` naming the file."""
    info = read_system(folder)
    replays = []
    made: set[str] = set()
    for index, step in enumerate(info.steps):
        where = f"{folder / SYSTEM_FILE}: steps.{index} ({step.id!r})"
        if step.id in made:
            raise MtcoreError(f"{where}: a second step with this id")
        try:
            cls = registry.load("steps", step.kind)
        except PluginError as exc:
            raise MtcoreError(f"{where}: {exc}") from exc
        if not cls.streams:
            raise MtcoreError(
                f"{where}: kind {step.kind!r} is not one a replayed path holds (its steps "
                "declare no streams)"
            )
        unknown = sorted(set(step.inputs) - set(cls.inputs))
        if unknown and VARIADIC not in cls.inputs:
            raise MtcoreError(f"{where}: kind {step.kind!r} reads no input {unknown[0]!r}")
        config = dict(step.config)
        if device is not None and "device" in cls.Config.model_fields:
            config["device"] = device
        try:
            plugin = cls.from_dict(config)
        except (ValidationError, MtcoreError, ValueError, TypeError) as exc:
            raise MtcoreError(f"{where}: config: {exc}") from exc
        problems = plugin.check(registry)
        if problems:
            raise MtcoreError(f"{where}: config: " + "; ".join(f"{a}: {b}" for a, b in problems))
        inputs: dict[str, tuple[str, str]] = {
            role: (kind, replay_input(folder, info, made, kind, what, f"{where}: inputs.{role}"))
            for role, (kind, what) in step.inputs.items()
        }
        replays.append(Replay(step.id, step.kind, step.hash, plugin, inputs))
        made.add(step.id)
    s = info.stage
    if s.hyp[0] not in made:
        raise MtcoreError(f"{folder / SYSTEM_FILE}: stage.hyp names no step of the system")
    stage = Stage(s.name, s.direction, s.evaluate, s.hyp, s.test)
    test_set = info.test_set
    return Translator(stage, replays, tuple(test_set.langs), test_set.name, registry,
                      ("local", {}), show_progress)  # fmt: skip


def read_system(folder: Path) -> SystemFile:
    """``system.json`` parsed against :class:`SystemFile`, and every artifact file checked
    against its listed sha256, with no symbolic link under the directory's artifacts."""
    path = folder / SYSTEM_FILE
    if not path.is_file() or path.is_symlink():
        raise MtcoreError(f"{folder} is not an exported system: it has no {SYSTEM_FILE}")
    if path.stat().st_size > MAX_SYSTEM_BYTES:
        raise MtcoreError(f"{path}: larger than {MAX_SYSTEM_BYTES:,} bytes; not a system file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MtcoreError(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise MtcoreError(f"{path}: not a system file (a JSON object is expected)")
    if raw.get("format") != FORMAT:
        raise MtcoreError(
            f"{path}: format {raw.get('format')!r}; this mtcore reads {FORMAT} (export the "
            "system again with this mtcore)"
        )
    try:
        info = SystemFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise MtcoreError(f"{path}: not a valid system file: {problems}") from None
    check_artifacts(folder, info)
    return info


def check_artifacts(folder: Path, info: SystemFile) -> None:
    """Every file under ``artifacts/`` listed, with its sha256; no link, no other entry."""
    root = folder / "artifacts"
    found: set[str] = set()
    if root.is_symlink():
        raise MtcoreError(f"{root}: a symbolic link; an exported system holds plain files")
    if root.exists():
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                entry = Path(dirpath) / name
                if entry.is_symlink():
                    raise MtcoreError(
                        f"{entry}: a symbolic link; an exported system holds plain files"
                    )
                if name in filenames:
                    if not entry.is_file():
                        raise MtcoreError(f"{entry}: not a plain file")
                    found.add(entry.relative_to(folder).as_posix())
    unlisted = sorted(found - set(info.artifacts))
    missing = sorted(set(info.artifacts) - found)
    if unlisted or missing:
        what = [f"not listed in {SYSTEM_FILE}: {', '.join(unlisted[:5])}"] if unlisted else []
        what += [f"listed but missing: {', '.join(missing[:5])}"] if missing else []
        raise MtcoreError(f"{folder}: artifacts changed since export ({'; '.join(what)})")
    for name, digest in sorted(info.artifacts.items()):
        if hash_file(folder / name) != digest:
            raise MtcoreError(
                f"{folder / name}: sha256 differs from the one {SYSTEM_FILE} lists: the file "
                "changed since export"
            )


def replay_input(
    folder: Path, info: SystemFile, made: set[str], kind: str, what: str, where: str
) -> str:
    """An input reference of ``system.json`` checked: an artifact is a directory listed under
    ``artifacts/`` (its absolute path returned); a step output names an earlier step."""
    if kind == "test":
        if what:
            raise MtcoreError(f"{where}: a test input names nothing (got {what!r})")
        return ""
    if kind == "step":
        step, _, output = what.partition("/")
        if step not in made or not output or "/" in output or output in (".", ".."):
            raise MtcoreError(f"{where}: {what!r} is no output of an earlier step")
        return what
    parts = what.split("/")
    if len(parts) != 2 or parts[0] != "artifacts" or parts[1] in ("", ".", ".."):
        raise MtcoreError(f"{where}: {what!r} is not a directory under artifacts/")
    if not any(name.startswith(what + "/") for name in info.artifacts):
        raise MtcoreError(f"{where}: {what!r} holds no file {SYSTEM_FILE} lists")
    path = (folder / what).resolve()
    if path.parent != (folder / "artifacts").resolve():
        raise MtcoreError(f"{where}: {what!r} resolves outside the system's artifacts/")
    return str(path)


EXPORT_FILE = "mtcore_export.json"


def export_model_format(
    recipe: Recipe, registry: Registry, system: Translator, workdir: Path, folder: Path,
    fmt: str, quantization: str, tolerance: float,
) -> dict[str, Any]:  # fmt: skip
    """The model of the stage's decoding step written for another tool into the new directory
    ``folder`` (``mtcore export --format``), with ``mtcore_export.json``. The written model and
    the same model unquantized both translate the stage's test set as the run fed it to that
    step; when quantization costs more than ``tolerance`` BLEU against the stage's references,
    nothing is written and the error gives both scores."""
    if folder.exists() and any(folder.iterdir()):
        raise MtcoreError(f"{folder} exists and is not empty; give a new directory")
    decoders = [r for r in system.replays if fmt in type(r.plugin).export_formats]
    if len(decoders) != 1:
        kinds = sorted({r.kind for r in system.replays})
        raise MtcoreError(
            f"stage {system.stage.name!r}: {len(decoders)} steps of its path ({', '.join(kinds)}) "
            f"write their model as {fmt}; the format holds one"
        )
    replay = decoders[0]
    test = system.test
    if test is None:
        raise MtcoreError("export --format needs the finished run (its test set), not a system")
    inputs = {
        role: Artifact.open(Path(what))
        for role, (where, what) in replay.inputs.items()
        if where == "artifact"
    }
    partial = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        try:
            made = replay.plugin.export_model(inputs, fmt, partial, quantization, registry)
        except MtcoreError as exc:  # name the stage's step, not the plugin's placeholder
            message = str(exc).removeprefix("export: ")
            raise MtcoreError(
                f"stage {system.stage.name!r}, step {replay.id!r}: {message}"
            ) from exc
        plan = make_plan(recipe, registry)
        sources = _fed(test, replay, workdir, plan, made.src)
        if made.tgt not in test.langs:
            raise MtcoreError(f"{test.path}: no {made.tgt!r} references (has {test.langs})")
        references = [pair[test.langs.index(made.tgt)] for pair in test]
        check = _quantization_check(registry, made, sources, references, made.tgt, quantization)
        if check["loss"] > tolerance:
            raise MtcoreError(
                f"{fmt} export refused: {quantization} scores {check['exported']:.2f} BLEU on "
                f"the stage's test set ({len(sources)} lines), the unquantized model "
                f"{check['unquantized']:.2f}: a loss of {check['loss']:.2f}, over the tolerance "
                f"{tolerance} (export with --quantization float32 or float16, or raise "
                "--tolerance)"
            )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    info = {
        **made.info,
        "mtcore": __version__,
        "recipe": recipe.name,
        "profile": recipe.profile,
        "stage": system.stage.name,
        "step": replay.id,
        "quantization_check": check,
        "not_included": [
            {"id": r.id, "kind": r.kind} for r in system.replays if r is not replay
        ],  # fmt: skip
        "test_set": system.corpus_name,
        "scores": read_manifest(
            step_dir(workdir, {p.id: p for p in plan}[system.stage.evaluate])
        ).get("metrics", {}),
    }
    if made.finish is not None:
        made.finish(partial, info)
    (partial / EXPORT_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():
        folder.rmdir()  # empty, checked above
    os.rename(partial, folder)
    return info


def _fed(test: Any, replay: Replay, workdir: Path, plan: list[Any], src: str) -> list[str]:
    """The source lines the run gave ``replay``'s step: the stage's test set, or the output
    of the step before it on the path (a normalizer, a truecaser)."""
    from mtcore.data.corpus import Corpus

    where, what = replay.inputs[type(replay.plugin).streams[0]]
    if where == "test":
        corpus = test
    else:
        step, output = what.split("/", 1)
        corpus = Corpus.open(step_dir(workdir, {p.id: p for p in plan}[step]) / output)
    if src not in corpus.langs:
        raise MtcoreError(f"{corpus.path}: no {src!r} column to translate (has {corpus.langs})")
    return [pair[corpus.langs.index(src)] for pair in corpus]


def _quantization_check(
    registry: Registry, made: ModelExport, sources: list[str], references: list[str],
    tgt: str, quantization: str,
) -> dict[str, Any]:  # fmt: skip
    from mtcore.system.metrics import build_metrics

    bleu = build_metrics(registry, ["bleu"])[0]
    unquantized = made.decode(sources, False)
    exported = made.decode(sources, True)
    before = bleu.corpus_score(unquantized, [references], tgt)
    after = bleu.corpus_score(exported, [references], tgt)
    same = sum(a == b for a, b in zip(unquantized, exported, strict=True))
    return {
        "quantization": quantization,
        "signature": before.signature,
        "unquantized": round(before.score, 2),
        "exported": round(after.score, 2),
        "loss": round(before.score - after.score, 2),
        "lines": len(sources),
        "identical_outputs": round(same / max(len(sources), 1), 4),
    }
