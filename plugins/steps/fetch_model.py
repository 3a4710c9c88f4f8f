"""The step every ``models`` entry becomes: fetches a pretrained translation model (a Hugging
Face repository at a revision, or a local directory) into the workdir as a model artifact.

``hf:ORG/NAME`` files come from ``https://huggingface.co/ORG/NAME/resolve/REVISION/FILE``
through the same downloader as the ``url`` source: resumed from a ``.part`` file, retried,
checked against ``sha256`` pins, recorded in the recipe's lock file on first download, and read
from ``$MTCORE_MIRROR`` when it is set (a cluster without internet, the offline rehearsal). Pin
``revision`` to a commit: a branch such as ``main`` moves, and the lock file then stops the run
when a file changes. What is fetched is checked as data
(:mod:`~mtcore_plugins.common.hub.pretrained`): no ``auto_map``, transformers' own tokenizer
classes, safetensors weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from mtcore.api import (
    NOT_IDENTITY,
    DataError,
    PluginConfig,
    Registry,
    Stats,
    Step,
    StepContext,
    cache_home,
    content_hash,
    write_artifact_meta,
)
from mtcore_plugins.common.hub.download import Downloader, FileSpec
from mtcore_plugins.common.hub.lockfile import active_lock
from mtcore_plugins.common.hub.mirror import (
    mirror_address,
    mirror_base,
    replica_hashes,
    replicas_allowed,
)
from mtcore_plugins.common.hub.pretrained import (
    ARTIFACT_TYPE,
    PICKLED_WEIGHTS,
    WEIGHTS,
    check_config,
    languages,
    model_files,
    safetensors_from_pickle,
    task_of,
    tokenizer_class,
)
from mtcore_plugins.common.neural_metrics import models as metric_models

HUB = "https://huggingface.co"
SMALL = 16 << 20  # the largest JSON file read (config, tokenizer config)


class FetchModelConfig(PluginConfig):
    id: str = Field(
        pattern=r"^(hf:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}|\S.{0,4095})$",
        description="hf:ORG/NAME (a Hugging Face repository), or the path of a local directory "
        "holding such a model's files",
    )
    revision: str = Field(
        "main",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="hf: the commit (40 hex digits: pinned) or branch or tag to fetch",
    )
    sha256: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        description="file name -> expected sha256 (64 hex digits); unpinned files are recorded "
        "in the recipe's lock file on first download",
    )
    files: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="further files to fetch beside those the tokenizer class reads (a "
        "repository whose tokenizer needs others)",
    )
    weights: Literal["safetensors", "bin"] = Field(
        "safetensors",
        description="safetensors: model.safetensors; bin: pytorch_model.bin, read with "
        "torch.load(weights_only=True) and kept as safetensors (for repositories without one)",
    )
    metric: Literal["comet", "metricx"] | None = Field(
        None,
        description="the model is a metric's (plugins/common/neural_metrics/models.py): comet "
        "(a COMET repository: hparams.yaml, checkpoints/model.ckpt) or metricx (an mT5 MetricX "
        "model)",
    )
    encoder: str | None = Field(
        None,
        pattern=r"^(hf:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?|\S.{0,4095})$",
        description="metric models: where the tokenizer comes from (hf:ORG/NAME or a local "
        "directory); default: COMET's hparams.yaml pretrained_model, mT5's for MetricX",
    )
    encoder_revision: str = Field(
        "main",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="the encoder repository's commit, branch or tag",
    )
    max_bytes: int = Field(
        64 << 30, ge=1, le=1 << 50, description="largest file accepted (bytes)",
        json_schema_extra=NOT_IDENTITY,
    )  # fmt: skip
    timeout: float = Field(60.0, gt=0, le=3600, json_schema_extra=NOT_IDENTITY)
    retries: int = Field(3, ge=0, le=20, json_schema_extra=NOT_IDENTITY)
    backoff: float = Field(1.0, ge=0, le=60, json_schema_extra=NOT_IDENTITY)

    @field_validator("sha256")
    @classmethod
    def _hashes(cls, value: dict[str, str]) -> dict[str, str]:
        for name, digest in value.items():
            if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
                raise ValueError(f"sha256 of {name!r} must be 64 hex digits, not {digest!r}")
        return {name: digest.lower() for name, digest in value.items()}

    @field_validator("files")
    @classmethod
    def _plain_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}", name):
                raise ValueError(f"{name!r} is not a plain file name")
        return value

    @model_validator(mode="after")
    def _local(self) -> FetchModelConfig:
        if not self.id.startswith("hf:") and self.revision != "main":
            raise ValueError("revision is for hf: ids; a local directory is read as it is")
        if self.metric is None and self.encoder is not None:
            raise ValueError("encoder is for metric models (metric: comet or metricx)")
        return self


class FetchModelStep(Step[FetchModelConfig]):
    """A pretrained model (``model``): its files, checked, with an artifact description the
    decoders read (type ``pretrained-model``, architecture, tokenizer, languages, each file's
    sha256)."""

    name = "fetch_model"
    fetches_model = True
    outputs: ClassVar[tuple[str, ...]] = ("model",)

    def fingerprint(self, registry: Registry) -> str:
        """A local directory's files that are read (by content, remembered by size and mtime:
        a multi-gigabyte model is read once); for hf: the mirror, when one is set (the id,
        revision and pins are settings)."""
        cfg = self.config
        if not cfg.id.startswith("hf:") and cfg.metric is not None:
            where = f"models ({cfg.id})"
            try:
                fetch = self._local_file(where)
                encoder = self._encoder_fetch(Stats(), "fingerprint", fetch, where)
                weights = PICKLED_WEIGHTS if cfg.weights == "bin" else WEIGHTS
                files = metric_models.plan(cfg.metric, fetch, encoder, weights, where)
            except DataError:  # the run says what is wrong with the directory
                files = []
            return json.dumps({name: content_hash(path) for name, path in files})
        if not cfg.id.startswith("hf:"):
            root = Path(cfg.id).expanduser()
            try:
                _, _, tokenizer = self._describe(self._local_file(str(root)), str(root))
                weights = PICKLED_WEIGHTS if cfg.weights == "bin" else WEIGHTS
                names = [weights if n == WEIGHTS else n for n in model_files(tokenizer, cfg.files)]
            except DataError:  # the run says what is wrong with the directory
                names = []
            files = [root / name for name in names if (root / name).is_file()]
            return json.dumps({p.name: content_hash(p) for p in files})
        base = mirror_base()
        return json.dumps({"mirror": base, "replicas": replicas_allowed()}) if base else ""

    def run(self, ctx: StepContext) -> None:
        out = ctx.output("model")
        cfg = self.config
        where = f"models.{ctx.step_id} ({cfg.id})"
        hub = cfg.id.startswith("hf:")
        fetch = self._hub_file(ctx.stats, ctx.step_id) if hub else self._local_file(where)
        if cfg.metric is not None:
            self._fetch_metric(ctx, out, fetch, where)
            return
        config, model_type, tokenizer = self._describe(fetch, where)
        hashes: dict[str, str] = {}
        for name in model_files(tokenizer, cfg.files):
            if name == WEIGHTS and cfg.weights == "bin":
                pickled = fetch(PICKLED_WEIGHTS)
                safetensors_from_pickle(pickled, out / WEIGHTS)
            else:
                place(fetch(name), out / name, link=cfg.id.startswith("hf:"))
            hashes[name] = content_hash(out / name)
            ctx.stats.add("fetch_model.files")
            ctx.stats.add("fetch_model.bytes", (out / name).stat().st_size)
        positions = config.get("max_position_embeddings")
        write_artifact_meta(
            out,
            type=ARTIFACT_TYPE,
            id=cfg.id,
            revision=cfg.revision if cfg.id.startswith("hf:") else None,
            model_type=model_type,
            task=task_of(model_type),
            tokenizer=tokenizer,
            languages=languages(out, tokenizer),
            max_positions=positions if isinstance(positions, int) else None,
            files=hashes,
        )

    def _encoder_fetch(self, stats: Any, step_id: str, fetch: Any, where: str) -> Any:
        cfg = self.config
        assert cfg.metric is not None
        encoder = cfg.encoder or metric_models.default_encoder(cfg.metric, fetch, where)
        if encoder.startswith("hf:"):
            return self._hub_file(stats, step_id, repo=encoder, revision=cfg.encoder_revision)
        return self._local_file(f"{where} encoder", encoder)

    def _fetch_metric(self, ctx: StepContext, out: Path, fetch: Any, where: str) -> None:
        """A metric's model (COMET, MetricX): its files in the layout the metric reads."""
        cfg = self.config
        assert cfg.metric is not None
        encoder = self._encoder_fetch(ctx.stats, ctx.step_id, fetch, where)
        weights = PICKLED_WEIGHTS if cfg.weights == "bin" else WEIGHTS
        hashes: dict[str, str] = {}
        for name, fetched in metric_models.plan(cfg.metric, fetch, encoder, weights, where):
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if name == PICKLED_WEIGHTS:
                name, target = WEIGHTS, out / WEIGHTS
                safetensors_from_pickle(fetched, target)
            else:
                place(fetched, target, link=cfg.id.startswith("hf:"))
            hashes[name] = content_hash(target)
            ctx.stats.add("fetch_model.files")
            ctx.stats.add("fetch_model.bytes", target.stat().st_size)
        revision = cfg.revision if cfg.id.startswith("hf:") else None
        metric_models.describe(out, cfg.metric, cfg.id, revision)
        write_artifact_meta(
            out,
            type=ARTIFACT_TYPE,
            id=cfg.id,
            revision=revision,
            model_type=cfg.metric,
            task="metric",
            metric=cfg.metric,
            files=hashes,
        )

    def _describe(self, fetch: Any, where: str) -> tuple[dict[str, Any], str, str]:
        """(config.json, model type, tokenizer class), fetched and checked as data."""
        config = read_json(fetch("config.json"), "config.json", where)
        model_type = check_config(config, where)
        tok_config = read_json(fetch("tokenizer_config.json"), "tokenizer_config.json", where)
        return config, model_type, tokenizer_class(model_type, tok_config, where)

    def relock(self, stats: Any, step_id: str) -> int:
        """``mtcore lock``: every unpinned file of an hf: model downloaded anew (its cached
        copy dropped) and recorded in the active lock file; the number of files."""
        cfg = self.config
        if not cfg.id.startswith("hf:"):
            return 0
        cache = cache_home() / "downloads"
        names = ["config.json", "tokenizer_config.json"]
        fetch = self._hub_file(stats, step_id, forget=cache)
        if cfg.metric is not None:
            where = f"models.{step_id} ({cfg.id})"
            encoder = self._encoder_fetch(stats, step_id, fetch, where)
            weights = PICKLED_WEIGHTS if cfg.weights == "bin" else WEIGHTS
            return len(metric_models.plan(cfg.metric, fetch, encoder, weights, where))
        _, _, tokenizer = self._describe(fetch, f"models.{step_id} ({cfg.id})")
        weights = PICKLED_WEIGHTS if cfg.weights == "bin" else WEIGHTS
        for name in model_files(tokenizer, cfg.files):
            if name not in names:
                fetch(weights if name == WEIGHTS else name)
                names.append(name)
        return len(names)

    def _local_file(self, where: str, directory: str | None = None) -> Any:
        root = Path(directory or self.config.id).expanduser()
        if not root.is_dir():
            raise DataError(f"{where}: no such directory (give hf:ORG/NAME or a model directory)")

        def fetch(name: str) -> Path:
            path = root / name
            if not path.is_file():
                present = ", ".join(sorted(p.name for p in root.iterdir())[:20])
                raise DataError(f"{where}: {path} is missing (the directory has: {present})")
            pinned = self.config.sha256.get(name)
            if pinned and content_hash(path) != pinned:
                raise DataError(f"{where}: {path} has sha256 {content_hash(path)}, not {pinned}")
            return path

        return fetch

    def _hub_file(
        self,
        stats: Any,
        step_id: str,
        forget: Path | None = None,
        repo: str | None = None,
        revision: str | None = None,
    ) -> Any:
        """A function fetching one file of the repository (another one: ``repo``, ``revision``,
        a metric's encoder); with ``forget`` (the cache), an unpinned file's cached copy is
        dropped first (``mtcore lock``)."""
        cfg = self.config
        repo = (repo or cfg.id).removeprefix("hf:")
        revision = revision or cfg.revision
        base = mirror_base()
        replicas = replica_hashes(base, cfg.timeout) if base else {}
        lock = None if base and replicas_allowed() else active_lock()
        downloader = Downloader(
            cache_home() / "downloads", cfg.timeout, cfg.retries, cfg.backoff, stats, lock
        )

        def fetch(name: str) -> Path:
            url = f"{HUB}/{repo}/resolve/{revision}/{name}"
            limit = SMALL if name.endswith((".json", ".yaml")) else cfg.max_bytes
            spec = FileSpec(url=url, sha256=cfg.sha256.get(name), max_bytes=limit)
            if base:
                copy = {"url": mirror_address(url, base), "sha256": replicas.get(url, spec.sha256)}
                spec = spec.model_copy(update=copy)
            if forget is not None and spec.sha256 is None:
                (forget / spec.cached_name()).unlink(missing_ok=True)
            try:
                return downloader.fetch(spec)
            except DataError as exc:
                hint = ""
                if "HTTP 404" in str(exc) and name == WEIGHTS:
                    hint = f" (a repository with {PICKLED_WEIGHTS} only: set weights: bin)"
                elif "HTTP 404" in str(exc):
                    hint = f" ({repo} at revision {revision} has no {name})"
                raise DataError(f"models.{step_id}: {exc}{hint}") from exc

        return fetch


def read_json(path: Path, name: str, where: str) -> Any:
    if path.stat().st_size > SMALL:
        raise DataError(f"{where}: {name} is over {SMALL} bytes; not a model's {name}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{where}: {name} is not JSON: {exc}") from None


def place(source: Path, target: Path, link: bool) -> None:
    """``source`` at ``target``: with ``link``, a hard link where both share a file system (a
    cached download is never written to again), else a copy (a user's directory may be)."""
    target.unlink(missing_ok=True)
    if link:
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copyfile(source, target)
