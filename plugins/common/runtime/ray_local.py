"""A Ray cluster that mtcore starts on this machine (an executor's or a scheduler's, given no
address) is private to it: Ray's own token authentication on, a fresh random token that only
this process and the cluster's processes hold (or the user's, from ``RAY_AUTH_TOKEN`` /
``RAY_AUTH_TOKEN_PATH``), the dashboard off, and every server on the loopback address only.
Ray 2.58 rewrites a ``127.0.0.1`` node address to the host's routable one and then listens on
every interface (its change to bind the node's address only, ray-project/ray#59852, is not in
this release); its single-host mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read at import,
so set here in its module as well as in the environment the cluster's processes inherit) keeps
``127.0.0.1``: ``ss -ltnp`` then shows the GCS, raylet, object manager, agents and workers on
loopback only (issue 70; tested). Connecting to a cluster by address is the user's explicit
choice, with that cluster's own settings."""

from __future__ import annotations

import logging
import os
import secrets
from typing import Any

AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


def start_private(ray: Any, **options: Any) -> dict[str, str | None]:
    """``ray.init`` of a new local cluster with token authentication; returns the environment
    it replaced, for :func:`restore` after ``ray.shutdown``."""
    old = {key: os.environ.get(key) for key in AUTH_ENV}
    os.environ["RAY_AUTH_MODE"] = "token"
    if not (old["RAY_AUTH_TOKEN"] or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # one host: keep 127.0.0.1
    reread()
    try:
        ray.init(
            address="local",
            include_dashboard=False,
            logging_level=logging.WARNING,
            _node_ip_address="127.0.0.1",
            **options,
        )
    except BaseException:
        restore(old)
        raise
    return old


def restore(old: dict[str, str | None]) -> None:
    """The authentication environment as it was before :func:`start_private`."""
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    reread()


def reread() -> None:
    """Ray reads ``RAY_AUTH_MODE`` and the token once per process: where it has read them
    already (an earlier cluster of the same process), it reads them again, as Ray's own
    ``reset_auth_token_state`` does."""
    from ray._private import ray_constants
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    AuthenticationTokenLoader.instance().reset_cache()
    Config.initialize("")
    ray_constants.ENABLE_RAY_CLUSTER = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0"
