"""Steps on a Ray cluster: each step a detached, named Ray actor holding the step's CPUs, GPUs
and memory, which runs ``mtcore.run.jobs.run_job`` on the workdir (a file system that every node
shares, at the same path) and ends itself. Detached, so it outlives the driver: a new driver
finds it by its name (recorded in the step's job folder) and waits for it instead of starting
the step a second time. Ray sets the actor's ``CUDA_VISIBLE_DEVICES`` to the GPUs it holds.
Data steps inside keep the executor the recipe configures.

A step of N ranks (a training given ``ranks`` or several GPUs) gets a detached placement group
of N bundles, each a rank's share of the step's CPUs and GPUs, and an actor in each bundle
(:mod:`mtcore.exec.ranks`): rank 0's runs the step, the others follow it. The job ends when
rank 0's actor does; the group is then removed, and the followers with it. A rank whose actor
dies (its node is lost) takes the others down, and the step starts again, same hash, from its
last checkpoint, in a new group placed on what is left of the cluster (``retries`` times).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from mtcore.api import PluginConfig, PluginError, Scheduler, StepError
from mtcore.api.engine import Ended, Job, Resources, job_state, largest, total
from mtcore_plugins.common.runtime.ray_local import restore, start_private

INSTALL_HINT = "scheduler 'ray' needs Ray: pip install 'mtcore[ray]' (or 'ray[default]')"
SOFT = {"STRICT_SPREAD": "SPREAD", "STRICT_PACK": "PACK", "SPREAD": "SPREAD", "PACK": "PACK"}
log = logging.getLogger("mtcore.schedulers.ray")


class RaySchedulerConfig(PluginConfig):
    address: str | None = Field(
        None,
        max_length=500,
        description="a running cluster ('auto', or host:port of its head); default: a cluster "
        "of this machine started for the run (its steps end with the run)",
    )
    namespace: str = Field("mtcore", max_length=100, description="Ray namespace of the actors")
    poll_seconds: float = Field(0.5, gt=0, le=600, description="how often jobs are looked at")
    rank_strategy: Literal["SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"] = Field(
        "SPREAD",
        description="how the bundles of a step's ranks are placed over the nodes (Ray's "
        "placement-group strategies); a step started again after a lost node uses the soft "
        "form (STRICT_SPREAD as SPREAD, STRICT_PACK as PACK)",
    )
    retries: int = Field(
        3,
        ge=0,
        le=100,
        description="times a step of several ranks starts again (from its last checkpoint) "
        "after a rank's actor died (its node was lost)",
    )
    rank_grace_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="rank 0 failed while another rank was lost: how long to wait for Ray to "
        "report that rank's actor dead (a lost node is retried, a failing step is not)",
    )


class StepActor:
    """One step's job; ``run`` runs it and ends the actor (freeing its resources)."""

    def run(self, folder: str) -> str:
        import ray

        from mtcore.api.engine import run_job

        try:
            return run_job(folder)
        finally:
            ray.actor.exit_actor()


class RankActor:
    """One rank of a step of several: rank 0 runs the step, every other follows it
    (:mod:`mtcore.exec.ranks`). Its line in ``log`` says on which node it ran. It is not ended
    here: the scheduler removes the placement group, and its actors with it."""

    def run(self, folder: str, rank: int, world: int, token: str, log: str) -> object:
        import ray

        from mtcore.api.engine import run_task

        address = ray.util.get_node_ip_address()
        node = ray.get_runtime_context().get_node_id()
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"rank {rank} on ray node {node} ({address})\n")
        # each actor sees only its own GPUs (Ray sets CUDA_VISIBLE_DEVICES): local rank 0; the
        # rendezvous is on rank 0's node, at the address the others reach
        return run_task(folder, rank, world, 0, token, Path(log), leader_address=address)


@dataclass
class Ranks:
    """The actors of one attempt of a step of several ranks."""

    job: Job
    name: str  # rank 0's actor name (the job's id)
    attempt: int
    group: Any  # its placement group
    refs: list[Any]  # each rank's run call; empty for a group re-attached to (rank 0 by name)
    failed_at: float = 0.0  # rank 0 ended failed; waiting for word of a lost rank


class RayScheduler(Scheduler[RaySchedulerConfig]):
    name = "ray"
    remote: ClassVar[bool] = True

    def __init__(self, config: RaySchedulerConfig | None = None) -> None:
        super().__init__(config)
        self._watched: dict[str, tuple[str, Any, Path]] = {}  # step -> (name, call ref, folder)
        self._ranks: dict[str, Ranks] = {}  # steps of several ranks
        self._started_here = False
        self._auth_env: dict[str, str | None] | None = None  # what start_private replaced
        self._prefix = "mtcore"

    def open(self, workdir: Path) -> None:
        try:
            import ray
        except ImportError as exc:
            raise PluginError(INSTALL_HINT) from exc
        if not ray.is_initialized():
            address = self.config.address
            try:
                if address is None:  # a cluster of this machine, private to it: ray_local.py
                    self._auth_env = start_private(ray, namespace=self.config.namespace)
                else:
                    ray.init(
                        address=address,
                        namespace=self.config.namespace,
                        logging_level=logging.WARNING,
                    )
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise PluginError(
                    f"scheduler 'ray': cannot connect to the Ray cluster at {address!r}: {exc}"
                ) from exc
            self._started_here = True
        digest = hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:10]
        self._prefix = f"mtcore-{digest}"  # actor names unique per workdir

    def _nodes(self) -> list[Resources]:
        import ray

        out = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            have = node.get("Resources", {})
            out.append(
                Resources(
                    cpus=int(have.get("CPU", 0)),
                    gpus=int(have.get("GPU", 0)),
                    memory_gb=float(have.get("memory", 0)) / 1024**3,
                )
            )
        if not out:
            raise PluginError("scheduler 'ray': the cluster has no live node")
        return out

    def capacity(self) -> Resources:
        return largest(self._nodes())

    def slots(self) -> Resources:
        return total(self._nodes())

    def submit(self, job: Job) -> str:
        import ray

        name = f"{self._prefix}-{job.folder.name.removesuffix('.job')}"
        res = job.resources
        if res.ranks > 1:
            self._ranks[job.step_id] = self._start_ranks(job, name, 0, self.config.rank_strategy)
            return name
        options: dict[str, Any] = {
            "name": name,
            "namespace": self.config.namespace,
            "lifetime": "detached",
            "num_cpus": res.cpus,
            "num_gpus": res.gpus,
            "max_restarts": 0,
        }
        if res.memory_gb:
            options["memory"] = int(res.memory_gb * 1024**3)
        actor: Any = ray.remote(StepActor).options(**options).remote()
        self._watched[job.step_id] = (name, actor.run.remote(str(job.folder)), job.folder)
        return name

    def _start_ranks(self, job: Job, name: str, attempt: int, strategy: str) -> Ranks:
        """A placement group of ``job``'s ranks and an actor in each bundle."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res, world = job.resources, job.resources.ranks
        bundle = rank_bundle(res)
        leader = name if attempt == 0 else f"{name}.try{attempt}"
        group = placement_group(
            [dict(bundle) for _ in range(world)],
            strategy=strategy,
            name=f"{leader}.ranks",
            lifetime="detached",  # outlives the driver, as the actors in it do
        )
        token = uuid.uuid4().hex  # one attempt's: a new attempt publishes anew
        refs = []
        for rank in range(world):
            options: dict[str, Any] = {
                "name": leader if rank == 0 else f"{leader}.rank{rank}",
                "namespace": self.config.namespace,
                "lifetime": "detached",
                "num_cpus": bundle["CPU"],
                "num_gpus": bundle.get("GPU", 0),
                "max_restarts": 0,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=rank
                ),
            }
            if "memory" in bundle:
                options["memory"] = bundle["memory"]
            actor: Any = ray.remote(RankActor).options(**options).remote()
            log = str(rank_log(job, rank))
            refs.append(actor.run.remote(str(job.folder), rank, world, token, log))
        return Ranks(job, leader, attempt, group, refs)

    def attach(self, job: Job, record: dict[str, Any]) -> bool:
        name = str(record.get("id", ""))
        if not name or not self._alive(name):
            return False
        if job.resources.ranks > 1:  # rank 0 watched by name; its group removed when it ends
            self._ranks[job.step_id] = Ranks(job, name, 0, self._group(f"{name}.ranks"), [])
            return True
        self._watched[job.step_id] = (name, None, job.folder)
        return True

    def _group(self, name: str) -> Any:
        import ray

        try:
            return ray.util.get_placement_group(name)
        except ValueError:
            return None

    def _alive(self, name: str) -> bool:
        import ray

        try:
            ray.get_actor(name, namespace=self.config.namespace)
        except ValueError:
            return False
        return True

    def wait(self, timeout: float) -> list[Ended]:
        deadline = time.monotonic() + timeout
        while True:
            ended = self._poll()
            if ended or time.monotonic() >= deadline:
                return ended
            time.sleep(min(self.config.poll_seconds, max(0.0, deadline - time.monotonic())))

    def _poll(self) -> list[Ended]:
        import ray

        out = [ended for ranks in list(self._ranks.values()) if (ended := self._poll_ranks(ranks))]
        for step_id, (name, ref, folder) in list(self._watched.items()):
            if ref is not None:
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    continue
            elif self._alive(name):
                continue
            del self._watched[step_id]
            state = job_state(folder)
            error = None
            if state["state"] == "failed":
                error = StepError(
                    f"step {step_id!r} failed in Ray actor {name}: {state.get('error')}"
                )
            out.append(Ended(step_id, error=error))
        return out

    def _poll_ranks(self, ranks: Ranks) -> Ended | None:
        """The step's Ended once rank 0's actor has ended (and no rank was lost meanwhile);
        None while it runs or after it was started again."""
        if not ranks.refs:  # re-attached: rank 0 by name, alive after its step ended
            ended = job_state(ranks.job.folder)["state"] in ("done", "failed")
            return self._end(ranks) if ended or not self._alive(ranks.name) else None
        import ray

        ready, _ = ray.wait(ranks.refs, num_returns=len(ranks.refs), timeout=0)
        lost = [
            f"rank {rank}: {why}"
            for rank, ref in enumerate(ranks.refs)
            if ref in ready and (why := actor_lost(ref))
        ]
        if lost:
            return self._again(ranks, "; ".join(lost))
        if ranks.refs[0] not in ready:
            return None
        if job_state(ranks.job.folder)["state"] == "failed" and len(ready) < len(ranks.refs):
            # rank 0 failed: a lost peer, or the step's own error? Ray reports a lost node's
            # actors dead some seconds after their peers' connections broke.
            ranks.failed_at = ranks.failed_at or time.monotonic()
            if time.monotonic() - ranks.failed_at < self.config.rank_grace_seconds:
                return None
        return self._end(ranks)

    def _end(self, ranks: Ranks) -> Ended:
        del self._ranks[ranks.job.step_id]
        self._remove(ranks)
        state = job_state(ranks.job.folder)
        error = None
        if state["state"] == "failed":
            error = StepError(
                f"step {ranks.job.step_id!r} failed in Ray actor {ranks.name}: {state.get('error')}"
            )
        return Ended(ranks.job.step_id, error=error)

    def _again(self, ranks: Ranks, why: str) -> Ended | None:
        """A rank was lost: the group removed, the step started again on what is left (the
        soft form of the strategy: the ranks may share a node), or its Ended once the retries
        are spent or the nodes left cannot hold its ranks."""
        job = ranks.job
        self._remove(ranks)
        bundle = rank_bundle(job.resources)
        room = sum(
            min(int(node.get(k, 0) // v) for k, v in bundle.items() if v)
            for node in self._live_resources()
        )
        problem = ""
        if ranks.attempt >= self.config.retries:
            problem = (
                f"lost a rank {ranks.attempt + 1} times ({why}; retries: {self.config.retries})"
            )
        elif room < job.resources.ranks:
            problem = (
                f"lost a rank ({why}) and the nodes left hold {room} of its "
                f"{job.resources.ranks} ranks of {bundle}"
            )
        if problem:
            del self._ranks[job.step_id]
            return Ended(job.step_id, error=StepError(f"step {job.step_id!r}: {problem}"))
        log.warning("step %s: %s; starting it again (attempt %d)", job.step_id, why,
                    ranks.attempt + 2)  # fmt: skip
        (job.folder / "state.json").unlink(missing_ok=True)  # followers must not see it ended
        name = ranks.name.split(".try")[0]
        strategy = SOFT[self.config.rank_strategy]
        again = self._start_ranks(job, name, ranks.attempt + 1, strategy)
        self._ranks[job.step_id] = again
        record_id(job.folder, again.name)
        return None

    def _remove(self, ranks: Ranks) -> None:
        """The group's actors killed (a follower may still wait), then the group removed."""
        import ray

        names = [ranks.name] + [
            f"{ranks.name}.rank{r}" for r in range(1, ranks.job.resources.ranks)
        ]
        for name in names:
            with contextlib.suppress(ValueError):  # ended, or never started
                ray.kill(ray.get_actor(name, namespace=self.config.namespace), no_restart=True)
        if ranks.group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(ranks.group)
            except Exception as exc:
                log.debug("placement group of %s: %s", ranks.name, exc)

    def _live_resources(self) -> list[dict[str, float]]:
        import ray

        return [dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")]

    def close(self) -> None:
        if self._started_here:
            import ray

            ray.shutdown()
            self._started_here = False
            if self._auth_env is not None:
                restore(self._auth_env)
                self._auth_env = None

    def describe(self, job_id: str) -> str:
        return f"ray actor {job_id}"


def rank_bundle(res: Resources) -> dict[str, float]:
    """One rank's share of a step's CPUs, GPUs and memory (a placement-group bundle)."""
    ranks = max(1, res.ranks)
    bundle: dict[str, float] = {"CPU": max(1, res.cpus // ranks)}
    if res.gpus:
        bundle["GPU"] = max(1, res.gpus // ranks)
    if res.memory_gb:
        bundle["memory"] = int(res.memory_gb * 1024**3 / ranks)
    return bundle


def rank_log(job: Job, rank: int) -> Path:
    """Where a rank's actor says where it ran and a follower's fairseq writes."""
    return job.log.with_name(f"{job.log.stem}.rank{rank}.log")


def actor_lost(ref: Any) -> str:
    """Why the ready call ``ref`` has no result because its actor died (its node lost, or
    killed); "" where it returned or raised an error of its own."""
    import ray

    try:
        ray.get(ref, timeout=0)
    except ray.exceptions.RayTaskError:
        return ""
    except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ""


def record_id(folder: Path, name: str) -> None:
    """The job's record (``job.json``) names the attempt's rank 0, for a driver that
    re-attaches."""
    path = folder / "job.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    record["id"] = name
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)
