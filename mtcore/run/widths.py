"""The widths of moldable steps (trainings, steps of independent shards): a search over the
valid widths (:mod:`mtcore.run.scaling`) whose candidates the list schedule
(:func:`mtcore.run.schedule.simulate`) judges, and a lower bound on any schedule's makespan."""

from __future__ import annotations

from dataclasses import dataclass, field

from mtcore.contracts.resources import Resources
from mtcore.recipe.plan import PlannedStep
from mtcore.run.scaling import Scaling, valid_widths
from mtcore.run.schedule import dependents, simulate

REFINE = 60  # simulations in choose_widths' second phase
DESCENT_PASSES = 4  # at most, over the classes' caps
CHAIN_ROUNDS = 100  # at most, widening the schedule's last chain


def _longest(
    plan: list[PlannedStep], children: dict[str, list[str]], cost: dict[str, float]
) -> tuple[float, dict[str, float], dict[str, float]]:
    """The critical path's length, each step's longest path from a start to its own start, and
    from its start to an end."""
    bottom: dict[str, float] = {}
    for planned in reversed(plan):
        bottom[planned.id] = cost[planned.id] + max(
            (bottom[c] for c in children[planned.id]), default=0.0
        )
    top: dict[str, float] = {}
    for planned in plan:
        top[planned.id] = max((top[d] + cost[d] for d in planned.deps if d in top), default=0.0)
    return max(bottom.values(), default=0.0), top, bottom


def sharded(planned: PlannedStep) -> bool:
    """A step of independent shards (``Step.widens_by_shards``): it scales as such."""
    return bool(getattr(type(planned.spec.plugin), "widens_by_shards", False))


def step_widths(
    planned: PlannedStep, need: Resources, capacity_gpus: int, scaling: Scaling
) -> list[int]:
    """The widths the step may run at (:func:`~mtcore.run.scaling.valid_widths`)."""
    batches = planned.spec.plugin.work().get("batches")
    return valid_widths(need, batches, capacity_gpus, scaling, sharded(planned))


@dataclass
class Widths:
    """The widths :func:`choose_widths` chose: each step's resources and seconds."""

    needs: dict[str, Resources]
    cost: dict[str, float]


def choose_widths(
    plan: list[PlannedStep],
    cost_at_1: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling | None = None,
) -> dict[str, Resources]:
    """Each step's resources, a moldable training's at the width chosen for it (the others as
    they are). ``cost_at_1``: a moldable training's seconds on one GPU, any other step's
    seconds. See :func:`mold`."""
    return mold(plan, cost_at_1, needs, capacity, scaling).needs


def mold(
    plan: list[PlannedStep],
    cost_at_1: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling | None = None,
) -> Widths:
    """Widths for the moldable trainings by CPA (Radulescu and van Gemund 2001, "A low-cost
    approach towards mixed task and data parallel scheduling", ICPP, §3): every one starts at
    the low end of its range; while the critical path is longer than the GPU area of all steps
    over the GPUs there are (T_CP > T_A), the step on the critical path whose next valid width
    saves most seconds is widened, then further while the simulated makespan does not grow.
    Against that, MCPA-like caps by precedence level and a descent over them; the best
    simulated schedule's last chain is then widened (:func:`_widen_late_chain`)."""
    search = _Search.start(plan, cost_at_1, needs, capacity, scaling or Scaling())
    search.cpa()
    best = search.refine()
    best, caps = search.level_caps(best)
    best = search.descend(best, caps)
    return _widen_late_chain(search, best.out, best.cost)


_Class = tuple[int, float, float]  # precedence level, seconds on one GPU, batches of an update


@dataclass
class _Candidate:
    """A choice of widths: its simulated makespan, each step's resources and seconds."""

    span: float
    out: dict[str, Resources]
    cost: dict[str, float]

    def gpu_time(self) -> float:
        return sum(self.cost[s] * self.out[s].gpus for s in self.cost)


@dataclass
class _Search:
    """:func:`mold`'s state: each moldable training's valid widths (``choices``), the index of
    the one it is at (``level``), and every step's seconds there (``cost``)."""

    plan: list[PlannedStep]
    cost_at_1: dict[str, float]
    needs: dict[str, Resources]
    capacity: Resources
    scaling: Scaling
    children: dict[str, list[str]]
    choices: dict[str, list[int]]
    depth: dict[str, int]  # the moldable trainings on a step's longest chain before it
    shards: set[str]  # the moldable steps of independent shards
    level: dict[str, int] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    klass: dict[str, _Class] = field(default_factory=dict)  # each moldable training's class

    @classmethod
    def start(
        cls,
        plan: list[PlannedStep],
        cost_at_1: dict[str, float],
        needs: dict[str, Resources],
        capacity: Resources,
        scaling: Scaling,
    ) -> _Search:
        """Every moldable training with more than one valid width at its narrowest."""
        choices: dict[str, list[int]] = {}
        for planned in plan:
            need = needs[planned.id]
            if need.moldable and capacity.gpus:
                widths = step_widths(planned, need, capacity.gpus, scaling)
                if len(widths) > 1:
                    choices[planned.id] = widths
        depth: dict[str, int] = {}
        for planned in plan:
            before = max((depth[d] + (d in choices) for d in planned.deps if d in depth), default=0)
            depth[planned.id] = before
        shards = {p.id for p in plan if p.id in choices and sharded(p)}
        search = cls(
            plan, cost_at_1, needs, capacity, scaling, dependents(plan), choices, depth, shards
        )
        search.level = {step_id: 0 for step_id in choices}
        search.cost = {p.id: search.seconds(p.id) for p in plan}
        search.klass = search.classes()
        return search

    def seconds(self, step_id: str) -> float:
        if step_id in self.choices:
            return self.at(step_id, self.choices[step_id][self.level[step_id]])
        return self.cost_at_1[step_id]

    def at(self, step_id: str, width: int) -> float:
        """A moldable step's seconds at ``width``."""
        return self.scaling.seconds(self.cost_at_1[step_id], width, step_id in self.shards)

    def gpus(self, step_id: str) -> int:
        if step_id in self.choices:
            return self.choices[step_id][self.level[step_id]]
        return self.needs[step_id].gpus

    def placed(self) -> dict[str, Resources]:
        """Every step's resources at the widths chosen now."""
        out = dict(self.needs)
        per_node = self.scaling.gpus_per_node
        for step_id in self.choices:
            out[step_id] = self.needs[step_id].at_width(self.gpus(step_id), per_node)
        for step_id, need in self.needs.items():
            if need.moldable and step_id not in self.choices:
                out[step_id] = need.at_width(need.gpus, per_node)
        return out

    def span(self, out: dict[str, Resources]) -> float:
        return simulate(self.plan, self.cost, out, self.capacity).makespan

    def widening(self, skip: set[str]) -> tuple[float, str | None]:
        """The critical path's length, and the training on a critical path (not in ``skip``)
        whose next valid width saves most seconds, None where none can widen."""
        critical, top, bottom = _longest(self.plan, self.children, self.cost)
        best, gain = None, 0.0
        for step_id in self.choices:
            if step_id in skip or self.level[step_id] + 1 >= len(self.choices[step_id]):
                continue
            if top[step_id] + bottom[step_id] < critical * (1 - 1e-9):
                continue  # not on a critical path
            width = self.choices[step_id][self.level[step_id] + 1]
            wider = self.at(step_id, width)
            if self.cost[step_id] - wider > gain:
                best, gain = step_id, self.cost[step_id] - wider
        return critical, best

    def cpa(self) -> None:
        """CPA: widen while the critical path is longer than the GPU area over the GPUs."""
        area = sum(self.cost[s] * self.gpus(s) for s in self.cost)
        gpu_count = max(1, self.capacity.gpus)
        while self.choices:
            critical, best = self.widening(set())
            if critical <= area / gpu_count or best is None:
                break
            area -= self.cost[best] * self.gpus(best)
            self.level[best] += 1
            self.cost[best] = self.seconds(best)
            area += self.cost[best] * self.gpus(best)

    def refine(self) -> _Candidate:
        """CPA's T_A counts all the GPU area at once; where the graph narrows (a few trainings
        that all the others wait for) the list schedule leaves GPUs idle there. So, as a second
        phase (ours, not the paper's), a critical step is widened further while the simulated
        makespan does not grow, at most REFINE simulations."""
        out = self.placed()
        best_span = self.span(out)
        tried: set[str] = set()
        for _ in range(REFINE):
            _, best = self.widening(tried)
            if best is None:
                break
            self.level[best] += 1
            self.cost[best] = self.seconds(best)
            trial = self.placed()
            span = self.span(trial)
            if span <= best_span * (1 + 1e-9):  # a plateau too: parallel chains widen in turn
                best_span, out = span, trial
            else:
                self.level[best] -= 1
                self.cost[best] = self.seconds(best)
                tried.add(best)
        return _Candidate(best_span, out, dict(self.cost))

    def classes(self) -> dict[str, _Class]:
        """Classes of like trainings: the same level, batches and seconds (NT5's sixteen
        pre-trainings are one); a class's trainings share one cap on their width."""
        klass: dict[str, _Class] = {}
        for planned in self.plan:
            if planned.id in self.choices:
                batches = float(planned.spec.plugin.work().get("batches") or 0)
                seconds = float(f"{self.cost_at_1[planned.id]:.3g}")
                klass[planned.id] = (self.depth[planned.id], seconds, batches)
        return klass

    def capped(self, caps: dict[_Class, int]) -> _Candidate:
        """Each moldable training at its widest valid width within its class's cap."""
        for step_id, widths in self.choices.items():
            fits = [i for i, w in enumerate(widths) if w <= caps[self.klass[step_id]]]
            self.level[step_id] = fits[-1] if fits else 0
            self.cost[step_id] = self.seconds(step_id)
        trial = self.placed()
        return _Candidate(self.span(trial), trial, dict(self.cost))

    def level_caps(self, best: _Candidate) -> tuple[_Candidate, dict[_Class, int]]:
        """A third candidate, by precedence levels (MCPA: Bansal, Kumar and Sadayappan, "An
        improved two-step algorithm for task and data parallel scheduling in distributed memory
        machines", Parallel Computing 2006, §3): the moldable trainings that wait for the same
        number of moldable trainings run side by side, so each of a level's k gets at most N / k
        (or 2 N / k: two waves) GPUs. One greedy widening at a time (above) leaves a level of a
        few trainings that gate all the others too narrow; this one does not. The better of it
        and ``best``, and the caps to start :meth:`descend` from."""
        levels_width: dict[int, int] = {}
        for step_id in self.choices:
            levels_width[self.depth[step_id]] = levels_width.get(self.depth[step_id], 0) + 1
        gpu_count = max(1, self.capacity.gpus)
        caps: dict[_Class, int] = {}
        for share in (1, 2):
            trial_caps = {
                k: max(1, gpu_count * share // levels_width[k[0]]) for k in set(self.klass.values())
            }
            trial = self.capped(trial_caps)
            if not caps:
                caps = trial_caps
            if trial.span < best.span * (1 - 1e-9):
                best, caps = trial, trial_caps
        return best, caps

    def descend(self, best: _Candidate, caps: dict[_Class, int]) -> _Candidate:
        """Each class's cap in turn, over the widths its trainings can take (coordinate
        descent, at most DESCENT_PASSES passes: a few simulations a class)."""
        options: dict[_Class, set[int]] = {}
        for step_id, key in self.klass.items():
            options.setdefault(key, set()).update(self.choices[step_id])
        best_area = best.gpu_time()
        for _ in range(DESCENT_PASSES):
            moved = False
            for key in sorted(options):
                for width in sorted(options[key]):
                    if width == caps[key]:
                        continue
                    trial = self.capped({**caps, key: width})
                    # a shorter schedule, or as short with less GPU time (a narrower training
                    # off the critical path leaves GPUs to the others)
                    shorter = trial.span < best.span * (1 - 1e-9)
                    if shorter or (
                        trial.span <= best.span * (1 + 1e-9) and trial.gpu_time() < best_area
                    ):
                        best, best_area = trial, trial.gpu_time()
                        caps = {**caps, key: width}
                        moved = True
            if not moved:
                break
        return best


def _widen_late_chain(search: _Search, out: dict[str, Resources], cost: dict[str, float]) -> Widths:
    """A last pass on the schedule itself: the chain of steps that ends last in the simulated
    schedule (each step's dependency that finished last before it started), its moldable
    trainings widened one valid width at a time, the one that shortens the schedule most
    kept, while one does (at most ``CHAIN_ROUNDS``). The static critical path (above) is not
    the schedule's: where the GPUs are busy a step waits for them, not for its inputs."""
    plan, choices, needs, capacity = search.plan, search.choices, search.needs, search.capacity
    cost_at_1 = search.cost_at_1
    by_id = {p.id: p for p in plan}
    out, cost = dict(out), dict(cost)
    result = simulate(plan, cost, out, capacity)
    for _ in range(CHAIN_ROUNDS):
        end = {k: result.starts[k] + cost[k] for k in result.starts}
        if not end:
            break
        chain: list[str] = []
        step: str | None = max(end, key=end.__getitem__)
        while step is not None:
            chain.append(step)
            deps = [d for d in by_id[step].deps if d in end]
            step = max(deps, key=end.__getitem__) if deps else None
        best: tuple[float, dict[str, Resources], dict[str, float]] | None = None
        for candidate in chain:
            if candidate not in choices:
                continue
            wider = [w for w in choices[candidate] if w > out[candidate].gpus]
            if not wider:
                continue
            # alone, and with its twins (trainings of its size at its width, which end as late
            # side by side: HW-TSC's fine-tunings of four seeds)
            twins = [
                t
                for t in choices
                if out[t].gpus == out[candidate].gpus
                and f"{cost_at_1[t]:.3g}" == f"{cost_at_1[candidate]:.3g}"
                and wider[0] in choices[t]
            ]
            for group in ([candidate], twins) if len(twins) > 1 else ([candidate],):
                trial_out, trial_cost = dict(out), dict(cost)
                for t in group:
                    trial_out[t] = needs[t].at_width(wider[0], search.scaling.gpus_per_node)
                    trial_cost[t] = search.at(t, wider[0])
                span = simulate(plan, trial_cost, trial_out, capacity).makespan
                if span < result.makespan * (1 - 1e-9) and (best is None or span < best[0]):
                    best = (span, trial_out, trial_cost)
        if best is None:
            break
        _, out, cost = best
        result = simulate(plan, cost, out, capacity)
    return Widths(out, cost)


@dataclass
class Bound:
    """A lower bound on any schedule's makespan: the GPU seconds of every step at its most
    efficient width over the GPUs there are, or the critical path with every moldable training
    at its widest valid width, whichever is longer."""

    area: float
    critical_path: float

    @property
    def seconds(self) -> float:
        return max(self.area, self.critical_path)


def lower_bound(
    plan: list[PlannedStep],
    cost_at_1: dict[str, float],
    needs: dict[str, Resources],
    capacity: Resources,
    scaling: Scaling | None = None,
) -> Bound:
    scaling = scaling or Scaling()
    children = dependents(plan)
    widest: dict[str, float] = {}
    area = 0.0
    for planned in plan:
        need, seconds = needs[planned.id], cost_at_1[planned.id]
        if need.moldable and capacity.gpus:
            widths = step_widths(planned, need, capacity.gpus, scaling)
            low, shards = widths[0], sharded(planned)
            area += scaling.seconds(seconds, low, shards) * low
            widest[planned.id] = scaling.seconds(seconds, widths[-1], shards)
        else:
            area += seconds * need.gpus
            widest[planned.id] = seconds
    critical, _, _ = _longest(plan, children, widest)
    return Bound(area / max(1, capacity.gpus), critical)
