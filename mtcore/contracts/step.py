"""The step contract: the verbs of a recipe. A step reads its input artifacts, writes its outputs
into the directories the runner gives it and reports counts and metrics; the runner owns
hashing, caching, the temporary directory and the manifest."""

from __future__ import annotations

import json
import logging
import os
import shutil
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mtcore.contracts.components import (
    ComponentField,
    check_component_fields,
    component_fields,
    entry_name,
)
from mtcore.contracts.errors import DataError, PluginError
from mtcore.contracts.identity import identity_dict
from mtcore.contracts.kinds import Executor
from mtcore.contracts.plugin import ConfigT, Plugin, PluginConfig
from mtcore.contracts.resources import Resources
from mtcore.contracts.stats import Stats

if TYPE_CHECKING:
    from mtcore.contracts.registry import Registry

ARTIFACT_FILE = "artifact.json"


@dataclass(frozen=True)
class Artifact:
    """One output directory of a completed step, with the metadata its step wrote."""

    path: Path
    meta: dict[str, Any]

    @classmethod
    def open(cls, path: Path) -> Artifact:
        meta_file = path / ARTIFACT_FILE
        if not meta_file.exists():
            return cls(path, {})
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{meta_file}: not JSON ({exc})") from None
        if not isinstance(meta, dict):
            raise DataError(f"{meta_file}: holds a {type(meta).__name__}, not an object")
        return cls(path, meta)

    def names(self, key: str) -> list[str]:
        """The list of names its metadata holds under ``key`` (none where absent); anything
        else there is an error naming the file (``artifact.json`` is data, issue 70)."""
        value = self.meta.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DataError(
                f"{self.path / ARTIFACT_FILE}: {key!r} holds {value!r:.80}; give a list of names"
            )
        return value

    def files(self, key: str = "files") -> dict[str, str]:
        """The ``{language or role: file name}`` table under ``key`` (empty where absent);
        anything else there is an error naming the file. The names are read through
        :meth:`member`."""
        value = self.meta.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise DataError(
                f"{self.path / ARTIFACT_FILE}: {key!r} holds {value!r:.80}; give an object of "
                "file names"
            )
        return value

    @property
    def type(self) -> str:
        return str(self.meta.get("type", "files"))

    def file(self, key: str, default: str | None = None) -> Path:
        """The file its metadata names under ``key`` (``checkpoint``, ``model``, ``file``), or
        ``default`` where it names none: :meth:`member` of that name."""
        name = self.meta.get(key, default)
        if name is None:
            raise DataError(f"{self.path}: {ARTIFACT_FILE} names no {key!r} file")
        return self.member(name, key)

    def member(self, name: object, what: str = "file") -> Path:
        """The regular file ``name`` inside this artifact's folder. ``artifact.json`` is data
        (an exported system comes from someone else): a name is a plain relative path, never
        absolute, with no ``..``, link or device on the way (issue 70: ``/etc/passwd`` and a
        model outside the system were read through such names)."""
        text = name if isinstance(name, str) else ""
        parts = text.split("/")
        if (
            not text
            or text.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or any(ord(c) < 32 or c == "\\" for c in text)
        ):
            raise DataError(
                f"{self.path}: {ARTIFACT_FILE} names {name!r} as its {what}; give a plain "
                "relative path inside the folder (not absolute, no '..', no control characters)"
            )
        path = self.path.joinpath(*parts)
        current = self.path
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise DataError(f"{current}: a symbolic link; an artifact holds plain files")
        if not path.is_file():
            raise DataError(f"{path}: the {what} {ARTIFACT_FILE} names is not a file here")
        return path


def write_artifact_meta(path: Path, **meta: Any) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / ARTIFACT_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


@dataclass
class StepContext:
    """What a running step sees. ``work`` survives a killed run (resume state lives there);
    ``output(name)`` is a directory inside it that the runner renames into place on success."""

    step_id: str
    kind: str
    step_hash: str
    work: Path
    inputs: dict[str, Artifact]
    executor: Executor
    registry: Registry
    stats: Stats = field(default_factory=Stats)
    metrics: dict[str, Any] = field(default_factory=dict)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("mtcore.step"))
    show_progress: bool = True
    progress_sink: Callable[[str, int | None, str], Any] | None = None
    """Where bars go when a display shows several running steps (:mod:`mtcore.report.display`):
    called with (step id, total, description), it returns the bar."""
    ranks: int = 1
    """The ranks the scheduler gave this run of the step (its width: a training's GPUs or gloo
    processes on CPU, a sharded step's workers); not part of the step's identity."""
    nodes: int = 1
    """The machines those ranks spread over."""

    def output(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def fresh_output(self, name: str) -> Path:
        """An output the step writes whole in one go (a tool that refuses to overwrite, such as
        fairseq-preprocess): what an interrupted earlier attempt left in it is removed."""
        path = self.work / name
        if path.exists():
            shutil.rmtree(path)
        return self.output(name)

    def scratch(self, name: str) -> Path:
        """A resume-safe working directory that is not part of the output."""
        path = self.work / ".scratch" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def progress(self, total: int | Callable[[], int] | None, desc: str) -> Any:
        """A progress bar; ``total`` may be a function, called only when the bar is shown
        (counting a corpus's lines reads it once more)."""
        from tqdm import tqdm

        if callable(total):
            total = total() if self.show_progress else None
        if self.progress_sink is not None:
            return self.progress_sink(self.step_id, total, desc)
        return tqdm(
            total=total,
            desc=f"{self.step_id}: {desc}",
            unit="seg",
            disable=not self.show_progress,
            leave=False,
            mininterval=1.0,
        )


@dataclass
class ModelExport:
    """A model written for another tool (:meth:`Step.export_model`): the languages it
    translates, what to record about it (``info``: files, decoding settings), and
    ``decode(lines, exported)``, the model's 1-best translations of source lines through the
    other tool's own API with the settings ``info`` states (what a user of the export runs),
    by the written (quantized) model when ``exported``, else by the same model unquantized:
    the export compares them with the run's output and with each other. ``finish(directory,
    record)``, if given, adds what needs the export's whole record (the stage's scores: a model
    card) once it passed."""

    src: str
    tgt: str
    info: dict[str, Any]
    decode: Callable[[list[str], bool], list[str]]
    finish: Callable[[Path, dict[str, Any]], None] | None = None


class Step(Plugin[ConfigT]):
    """A recipe verb. ``inputs`` maps role to whether it is required; ``outputs`` names the
    output directories, the first being the default one a bare reference picks."""

    inputs: ClassVar[dict[str, bool]] = {}
    outputs: ClassVar[tuple[str, ...]] = ("out",)
    trains: ClassVar[bool] = False  # trains a model: comparisons report its seconds as training
    parallel: ClassVar[bool] = False
    """Spreads its work over ``ctx.executor``'s workers (shards of a corpus), so that its output
    does not depend on how many run at once. On the local scheduler such a step holds its
    threads times the executor's workers, and may be given fewer: it then runs as many tasks
    side by side as it holds CPUs for (:meth:`mtcore.contracts.kinds.Executor.narrowed`)."""
    widens_by_shards: ClassVar[bool] = False
    """Runs at any width the scheduler gives it (``ctx.ranks``, a GPU range): its work is
    independent shards, each rank taking every ``ranks``-th one into one shard store, so its
    output does not depend on the width and its time falls as one over the width."""
    fetches: ClassVar[bool] = False
    """Turns one of a recipe's ``data`` entries into a corpus: the recipe builds a step of the
    one installed kind that says so for each entry (settings ``source``, ``config``, and any of
    the entry's keys the kind's config declares)."""
    export_formats: ClassVar[tuple[str, ...]] = ()
    """Formats other tools read that :meth:`export_model` writes this step's model in
    (``ctranslate2``); empty: the step has no model to export."""
    fetches_model: ClassVar[bool] = False
    """Turns one of a recipe's ``models`` entries (a pretrained model by id) into a model
    artifact: the recipe builds a step of the one installed kind that says so for each entry,
    the entry being its settings."""
    streams: ClassVar[tuple[str, ...]] = ()
    """Input roles whose lines the default output keeps one for one, in order (the corpus a
    step translates, normalizes, truecases or reranks). ``mtcore translate`` replays the steps
    that lead from a test set to a stage's output through these roles on new text; every other
    input is a finished artifact of the run (a model, a vocabulary, tuned weights)."""

    def components_used(self) -> list[ComponentField]:
        """The config's settings marked :func:`~mtcore.contracts.components.components` that these
        settings
        use: all of them, unless :meth:`unused_components` names some."""
        unused = self.unused_components()
        return [f for f in component_fields(self.config) if f.field not in unused]

    def unused_components(self) -> set[str]:
        """Component settings these settings leave unused (a rerank step given fixed weights
        fits no tuner): neither checked nor recorded. None by default."""
        return set()

    def check(self, registry: Registry) -> list[tuple[str, str]]:
        """Problems of the config's plugin references, as (location, message) pairs: by
        default those of its component settings; a step with checks of its own adds them to
        ``super().check(registry)``."""
        return check_component_fields(self.components_used(), registry)

    def plugins_used(self) -> list[tuple[str, str]]:
        """(kind, name) of every component plugin this step calls, whose versions enter the
        step's hash: by default those its component settings name; a step that calls others
        (a source, model plugins named elsewhere) adds them."""
        return [
            (found.kind, name)
            for found in self.components_used()
            for name in map(entry_name, found.entries)
            if name is not None
        ]

    def identity(self, registry: Registry) -> dict[str, Any]:
        """The settings that define the output, for the step's hash."""
        return identity_dict(self.config, registry)

    def emitted_tokens(self, registry: Registry) -> frozenset[str]:
        """Tokens this configured step writes into the text it outputs (a ``<BT>`` tag, a
        noise's ``<blank>``): every vocabulary that encodes that text downstream must keep
        them whole (:meth:`kept_tokens`). None by default."""
        return frozenset()

    def kept_tokens(self) -> frozenset[str] | None:
        """When this step makes a vocabulary (a SentencePiece model): the tokens it keeps as
        one piece, which must hold every token the steps upstream of its users write
        (:meth:`emitted_tokens`); the recipe check reports any other. None (the default):
        the step makes no vocabulary."""
        return None

    def accepted_inputs(self) -> frozenset[str] | None:
        """The input roles this configured step takes, where its settings name them (binarize's
        ``aux``): a role outside them is a problem at validation. None (the default): the roles
        of ``inputs``, any role where it has ``"*"``."""
        return None

    def written_outputs(self) -> tuple[str, ...]:
        """The outputs this configured step writes: by default all of ``outputs``; a step whose
        settings leave some unwritten (select_models' ``top``) names the others, so a reference
        to one of those is a problem at validation."""
        return self.outputs

    def stage(self, step_id: str) -> tuple[str, str] | None:
        """``(stage, direction)`` when this step, with this id, scores a stage of the system
        (the report's stage table, ``mtcore translate``'s ``--stage``); None by default."""
        return None

    def fingerprint(self, registry: Registry) -> str:
        """Extra identity beyond the config: what outside the workdir the output depends on
        (a source's files, say). Called at planning time; keep it cheap."""
        return ""

    @abstractmethod
    def run(self, ctx: StepContext) -> None:
        """Reads ``ctx``'s inputs and writes the step's outputs into its output directories."""

    def resources(self) -> Resources:
        """What one run of this configured step holds (the scheduler places steps by it): the
        step's ``threads`` setting where it has one (0, torch's default of every core, holds
        this machine's cores), else one CPU thread. A recipe's ``resources:`` overrides it
        (:mod:`mtcore.contracts.resources`)."""
        return Resources(cpus=thread_count(getattr(self.config, "threads", None)))

    def work(self) -> dict[str, float]:
        """What the cost model needs to estimate this step's time before it has run: a
        training says ``{"tokens": N}`` (target tokens it will see); by default nothing, and
        the step counts as a data step (:mod:`mtcore.costs`)."""
        return {}

    def volume(self, lines_in: Mapping[str, float | None]) -> dict[str, float]:
        """What the plan knows of this step's data before anything runs, from the lines of
        its inputs by role (None: not known): ``lines``, those of its default output (by
        default its first ``streams`` role's, kept one for one); a step that decodes with a
        model adds ``decode_lines``. Estimates for the cost model; empty when not known."""
        known = lines_in.get(self.streams[0]) if self.streams else None
        return {} if known is None else {"lines": known}

    def live(self, work: Path) -> str:
        """One short line of how far a running step is, read from what it has written in
        ``work`` (a training: updates of max_update, loss, updates/s); empty when it has
        nothing to say. Called from the display's thread while the step runs: read only."""
        return ""

    @classmethod
    def curves(cls, folder: Path) -> dict[str, list[tuple[int, float]]]:
        """Training curves read from a step's folder (its output directory, or its working
        directory while it runs): metric name (``train/loss``, ``valid/bleu``, ``train/lr``) to
        (update, value) points sorted by update, one point per update even where a killed
        training resumed. The run page draws them and trackers log them. Empty by default;
        read only, called from other threads while the step runs."""
        return {}

    def export_model(
        self, inputs: dict[str, Artifact], fmt: str, out: Path, quantization: str, registry: Any
    ) -> ModelExport:
        """Writes the model this step decodes with (its ``inputs`` as the finished run has
        them) into the new directory ``out`` in a format other tools read (``mtcore export
        --format``, one of ``export_formats``), quantized so. Steps that decode with a model
        implement it; by default a step has none."""
        raise PluginError(f"step kind {self.name!r} has no model to export as {fmt}")

    def export_statement(self, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        """What a user of a model export (``mtcore export --format``) needs to redo this step
        of the stage's path before or after the model without mtcore: files it writes into the
        existing directory ``out`` and how a common tool applies them. Empty by default: the
        export then states the step's kind and settings only."""
        return {}

    def for_new_text(self, finished: Path) -> tuple[Step[Any], tuple[str, ...]]:
        """This step as ``mtcore translate`` replays it on new text, given its output directory
        in the finished run. A step that learns from other inputs on the way (rerank: weights
        tuned on a dev n-best) returns a copy that applies what it learned, and the input roles
        the copy no longer reads; by default the step itself, reading every input."""
        return self, ()


def thread_count(threads: object) -> int:
    """CPU threads a ``threads`` setting takes: itself, or every core for 0 (torch's default);
    one for a step without the setting."""
    if not isinstance(threads, int):
        return 1
    return threads if threads > 0 else (os.cpu_count() or 1)


def config_dict(config: PluginConfig) -> dict[str, Any]:
    return config.model_dump(mode="json")
