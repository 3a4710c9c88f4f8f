"""What the MLflow tracker writes into a store, as names and values: the store's URI and its
artifact location, a step's settings as parameters (set ones only, secrets redacted), metric
keys and the tags of signatures. Pure functions; :mod:`mtcore.report.tracking` calls them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

DEFAULT_DB = "mlflow.db"
ARTIFACTS = "mlartifacts"
"""The artifact folder in the workdir of an experiment created on a local store (the name
``mlflow server`` gives its own default)."""
PARAM_LIMIT = 6000  # MLflow's longest parameter value
SERVERS = ("http://", "https://", "databricks")
"""Tracking URIs of a server: it chooses the artifact location of the experiments it creates."""
RAW_TRAINING = re.compile(r"^(train_inner|train|valid)_")
"""fairseq's own names of a training's summary (``train_loss``, ``valid_ppl``, ``train_wall``):
the training's curves carry these values under the clean names (``epoch/loss``,
``valid/ppl``), so they are not logged again. The clean names of a training's nested run are
its curves' (``train/…``, ``epoch/…``, ``valid/…``), ``updates``, ``tokens_per_second``,
``seconds``, ``counts/…`` and the step's other numeric metrics."""


def tracking_uri(workdir: Path, uri: str | None) -> str:
    """``uri``; else ``MLFLOW_TRACKING_URI``; else the SQLite database in the workdir."""
    if uri:
        return uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(workdir / DEFAULT_DB).resolve()}"


def artifact_location(uri: str, workdir: Path) -> str | None:
    """Where a new experiment keeps its runs' artifacts: ``WORKDIR/mlartifacts`` on a local
    store (SQLite, a file store, a database: MLflow's own default there is ``./mlruns`` under
    the current directory); None, the server's choice, on a tracking server."""
    if uri.startswith(SERVERS):
        return None
    return (workdir / ARTIFACTS).resolve().as_uri()


def signature_tag(metric: str, direction: str | None = None) -> str:
    """``signature.BLEU`` on a step's run; ``signature.BLEU.enja`` on the workdir's run, which
    holds every direction's scores (en-ja's BLEU is on characters, ja-en's on words)."""
    key = f"signature.{metric_key(metric)}"
    return f"{key}.{metric_key(direction)}" if direction else key


SECRET_KEY = re.compile(r"(?i)(^|[._-])(token|password|passwd|secret|api_?key|auth|credentials?)$")
"""A setting whose name says it is a secret: logged as ``<redacted>``."""
SECRET_QUERY = re.compile(r"(?i)([?&](?:[a-z_-]*(?:token|key|sig|signature|password|secret|auth)"
                          r"[a-z_-]*)=)[^&#]*")  # fmt: skip
USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")


def redact(text: str) -> str:
    """``text`` without the secrets a URL in it may carry: its user info (``user:pass@``) and
    the values of query parameters named like a token, key, signature or password."""
    return SECRET_QUERY.sub(r"\1<redacted>", USERINFO.sub(r"\1", text))


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A step's settings as MLflow parameters: nested keys joined with dots, lists and other
    values as JSON, each cut to MLflow's longest value; a setting left unset (None) is not a
    parameter. A tracking store is read by others: a setting named like a secret is logged as
    ``<redacted>``, and URLs lose their user info and token-like query values
    (:func:`redact`)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if value is None:
            continue
        if isinstance(value, dict) and value:
            out.update(flat_params(value, name + "."))
        elif SECRET_KEY.search(str(key)) and value != "":
            out[name[:250]] = "<redacted>"
        else:
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out[name[:250]] = redact(text)[:PARAM_LIMIT]
    return out


def owner_only_store(uri: str) -> None:
    """A SQLite store (``sqlite:///path``) is created readable by its owner only, and an
    existing one of the owner's is made so: it holds every setting of every run."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///").partition("?")[0])  # absolute: sqlite:////x
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        if os.fstat(descriptor).st_uid == os.getuid():
            os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)


def metric_key(text: str) -> str:
    """MLflow accepts letters, digits, ``_ - . /`` and spaces in a metric key."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in text)
