"""Every point of a scenario's sweeps checked against the rules, without CloudAI's job generation: what
``cloudai-mbridge preflight`` (cli/preflight.py, which renders it), dry-run / run (before anything is queued) and the
reports' "Skipped points" section (reports/common.py) use.

A point is what CloudAI's grid search would run: the product of a test's list-valued cmd_args (and list-valued
extra_env_vars / num_nodes), in CloudAI's order (``TestRun.param_space``), so point N here is DSE step N there. Each
point is checked with the plugin's own ``violations`` (the rules ``constraint_check`` runs at dry-run / run time) and
estimated with plan/memory.py; nothing is rendered, staged or written.

GPU-hours: the upper bound is GPUs x the test's time limit (what the scheduler may hold); with ``result_dir`` (an
earlier run of the same scenario) a point whose run logged iteration times gets train_iters x its measured mean
iteration time instead.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import itertools
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..metrics import safejson
from ..plan.bridge_estimate import bridge_estimate
from ..plan.memory import GIB, MemoryEstimate, estimate_memory
from .base import Violation

REPORT_CSV = "preflight.csv"  # cli/preflight.py writes it (--output-dir); a reason that lists too many points names it


@dataclass
class PointResult:
    test: str
    point: int  # DSE step number (1-based); 0 for a test without a sweep
    values: dict[str, Any]
    violations: list[Violation]
    gpus: int | None
    memory: MemoryEstimate | None = None
    bridge: Any = None  # plan/bridge_estimate.py BridgeEstimate: Megatron-Bridge's own estimate, for reference
    limit_hours: float | None = None  # GPU-hours at the time limit (upper bound)
    measured_hours: float | None = None  # GPU-hours from train_iters x measured iteration time
    measured_step_s: float | None = None
    error: str | None = None  # the point could not even be built (CloudAI would abort the sweep)
    checked: bool = True  # False for a workload that is not the plugin's (CloudAI's own: no rules here)
    expected: bool = False  # rejected only by rules the test declares in cmd_args.expected_rejections
    refit: Any = None  # plan/refit_bytes.py RefitPrediction of an accepted refit point on GPUs

    @property
    def swept(self) -> bool:
        return self.point > 0

    @property
    def ok(self) -> bool:
        return not self.violations and self.error is None

    @property
    def verdict(self) -> str:
        if not self.checked:
            return "not checked"
        return "ok" if self.ok else "rejected (expected)" if self.expected else "rejected"

    @property
    def gpu_hours(self) -> float | None:
        return self.measured_hours if self.measured_hours is not None else self.limit_hours

    @property
    def hours_basis(self) -> str:
        if self.measured_hours is not None:
            return f"measured {self.measured_step_s:.2f} s/iter"
        return "time limit" if self.limit_hours is not None else ""

    @property
    def largest_term(self) -> str:
        if self.memory is None:
            return ""
        name, value = max(self.memory.terms().items(), key=lambda kv: kv[1])
        return f"{name} {value / GIB:.1f}"

    @property
    def memory_gib(self) -> str:
        if self.memory is None:
            return ""
        return f"{self.memory.total / GIB:.1f}/{self.memory.capacity / GIB:.0f}"

    @property
    def memory_verdict(self) -> str:
        """fits / tight / does not fit, with the memory_check that let a non-fitting point through."""
        if self.memory is None:
            return ""
        verdict = self.memory.verdict
        if verdict == "does not fit" and self.ok:
            verdict += " (memory_check lets it run)"
        return verdict

    @property
    def memory_band(self) -> str:
        return "" if self.memory is None else f"{self.memory.band_pct:.0f}"

    @property
    def bridge_gib(self) -> str:
        return "" if self.bridge is None else f"{self.bridge.total / GIB:.1f}"

    @property
    def varies(self) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.values.items()) or "(no sweep)"

    @property
    def refit_s(self) -> str:
        return "" if self.refit is None else f"{self.refit.seconds:.2f}"

    @property
    def refit_megatron_s(self) -> str:
        """Executor "both": the predicted seconds of Megatron-Core's own service in the same job, else ""."""
        m = None if self.refit is None else self.refit.megatron_seconds
        return "" if m is None else f"{m:.2f}"

    @property
    def refit_cell(self) -> str:
        """What a table shows: ours, and for executor "both" Megatron-Core's beside it."""
        return self.refit_s + (f" (Megatron-Core's {self.refit_megatron_s})" if self.refit_megatron_s else "")

    @property
    def refit_recv_gb(self) -> str:
        return "" if self.refit is None else f"{self.refit.recv_gb:.1f}"

    @property
    def rules(self) -> str:
        return "; ".join(v.rule for v in self.violations) or ("invalid-point" if self.error else "")

    @property
    def reasons(self) -> str:
        if self.error:
            return self.error
        return " | ".join(map(str, self.violations))


# A sweep of more points than this is shown in part (terminal table, HTML page): the points that would run first,
# up to SHOWN_ACCEPTED, then up to SHOWN_REJECTED of the others; preflight.csv always holds every point.
SHOWN_ALL = 2000
SHOWN_ACCEPTED = 1000
SHOWN_REJECTED = 200
REASONS_KEPT = 1000  # distinct reasons counted per test (blocking_problems names the first six)


@dataclass
class TestTally:
    """What the report needs of one test's points, counted as they come (a 100k-point sweep is never held)."""

    points: int = 0
    runnable: int = 0  # accepted, or not a plugin test (CloudAI's own: not checked here)
    accepted: int = 0
    swept: bool = True
    reasons: dict[str, int] = field(default_factory=dict)  # distinct reason -> points, the first REASONS_KEPT
    other_reasons: int = 0  # distinct reasons beyond those kept


@dataclass(slots=True)
class PointTally:
    """What :meth:`PreflightReport.add` counts of a point."""

    test: str
    swept: bool
    ok: bool
    checked: bool
    expected: bool
    gpu_hours: float | None
    limit_hours: float | None
    measured: bool
    tight: bool
    has_memory: bool
    memory_top: float | None  # GiB: estimate + band, capacity, Bridge's estimate, the largest of them
    rules: tuple[str, ...]
    reasons: tuple[str, ...]  # of a rejected point

    @classmethod
    def of(cls, p: PointResult) -> PointTally:
        m, b = p.memory, p.bridge
        tops = ([(m.total + m.band) / GIB, m.capacity / GIB] if m is not None else []) + \
            ([b.total / GIB] if b is not None else [])
        rules = tuple(v.rule for v in p.violations) + (("invalid-point",) if p.error and not p.violations else ())
        return cls(p.test, p.swept, p.ok, p.checked, p.expected, p.gpu_hours, p.limit_hours,
                   p.measured_hours is not None, p.ok and m is not None and m.verdict != "fits", m is not None,
                   max(tops) if tops else None, rules,
                   () if p.ok else (p.error,) if p.error else tuple(str(v) for v in p.violations))


@dataclass
class PreflightReport:
    """Every point's verdict, counted as the points come (:meth:`add`); ``points`` holds all of them, or, when
    ``keep_all`` is off (the preflight command), those the terminal and the page show (SHOWN_*)."""

    scenario: str
    system: str
    points: list[PointResult] = field(default_factory=list)
    keep_all: bool = True
    total: int = 0
    n_accepted: int = 0
    n_expected: int = 0
    n_tight: int = 0
    n_measured: int = 0
    best_hours: float = 0.0
    bound_hours: float | None = 0.0  # None once an accepted point has no time limit
    any_hours: bool = False
    any_memory: bool = False
    memory_top: float = 0.0  # GiB: the largest estimate + band, capacity or Bridge estimate (the page's scale)
    rules: dict[str, int] = field(default_factory=dict)
    tests: dict[str, TestTally] = field(default_factory=dict)
    rejected_unswept: list[str] = field(default_factory=list)
    _kept_ok: int = field(default=0, init=False, repr=False)  # of ``points``: accepted, rejected
    _kept_bad: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        given, self.points = self.points, []
        for p in given:
            self.add(p)

    def add(self, p: PointResult | PointTally) -> None:
        """Count a point; keep it when the tables show it (a PointTally, a worker's answer for a point no table
        shows, is only counted)."""
        c = p if isinstance(p, PointTally) else PointTally.of(p)
        self.total += 1
        t = self.tests.setdefault(c.test, TestTally())
        t.points += 1
        t.swept = t.swept and c.swept
        if c.ok or not c.checked:
            t.runnable += 1
        if c.ok:
            t.accepted += 1
            self.n_accepted += 1
            self.best_hours += c.gpu_hours or 0.0
            if c.limit_hours is None:
                self.bound_hours = None
            elif self.bound_hours is not None:
                self.bound_hours += c.limit_hours
            self.n_measured += c.measured
            self.any_hours = self.any_hours or c.gpu_hours is not None
            self.n_tight += c.tight
        else:
            if not c.swept and c.test not in self.rejected_unswept:
                self.rejected_unswept.append(c.test)
            for reason in c.reasons:
                if reason in t.reasons:
                    t.reasons[reason] += 1
                elif len(t.reasons) < REASONS_KEPT:
                    t.reasons[reason] = 1
                else:
                    t.other_reasons += 1
        self.n_expected += c.expected
        for rule in c.rules:
            self.rules[rule] = self.rules.get(rule, 0) + 1
        if c.memory_top is not None:
            self.any_memory = self.any_memory or c.has_memory
            self.memory_top = max(self.memory_top, c.memory_top)
        if isinstance(p, PointTally):
            return
        if not self.keep_all and self.total > SHOWN_ALL:
            if self.total == SHOWN_ALL + 1:  # from here on only what the table shows is kept
                self.points = self._subset()
                self._kept_ok = sum(q.ok for q in self.points)
                self._kept_bad = len(self.points) - self._kept_ok
            if (self._kept_ok >= SHOWN_ACCEPTED) if p.ok else (self._kept_bad >= SHOWN_REJECTED):
                return
        self.points.append(p)
        if p.ok:
            self._kept_ok += 1
        else:
            self._kept_bad += 1

    def wants(self) -> tuple[int, int]:
        """How many more accepted and rejected points this report may keep (it keeps fewer as points come)."""
        if self.keep_all or self.total < SHOWN_ALL:
            return (1 << 62, 1 << 62)
        return max(0, SHOWN_ACCEPTED - self._kept_ok), max(0, SHOWN_REJECTED - self._kept_bad)

    def shown(self) -> list[PointResult]:
        """The points the terminal table and the page list, in point order: every point of a sweep of up to
        SHOWN_ALL, else the first SHOWN_ACCEPTED that would run and the first SHOWN_REJECTED of the others."""
        if self.complete or not self.keep_all:
            return self.points
        return self._subset()

    def _subset(self) -> list[PointResult]:
        ok = [p for p in self.points if p.ok][:SHOWN_ACCEPTED]
        bad = [p for p in self.points if not p.ok][:SHOWN_REJECTED]
        keep = {id(p) for p in ok + bad}
        return [p for p in self.points if id(p) in keep]

    @property
    def complete(self) -> bool:
        return self.total <= SHOWN_ALL

    def shown_note(self) -> str:
        """What the table leaves out of a large sweep ('' when it shows every point)."""
        if self.complete:
            return ""
        shown = self.shown()
        ok = sum(p.ok for p in shown)
        return (f"showing {ok:,} of {self.n_accepted:,} accepted and {len(shown) - ok:,} of "
                f"{self.total - self.n_accepted:,} rejected point(s); every one of the {self.total:,} points is in "
                f"{REPORT_CSV} (--output-dir)")

    @property
    def accepted(self) -> list[PointResult]:
        return [p for p in self.points if p.ok]

    @property
    def exit_code(self) -> int:
        """1 when nothing would run, or when a test without a sweep (its only point) is rejected."""
        if not self.total or not self.n_accepted:
            return 1
        return 1 if self.rejected_unswept else 0

    def sweep_hours(self) -> tuple[float, float | None, int]:
        """(GPU-hours of the accepted points, best estimate; the time-limit bound or None; measured points)."""
        return self.best_hours, self.bound_hours, self.n_measured


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "none" if v is None else str(v)


# --------------------------------------------------------------------------------------------------------------
# Sweep expansion (as CloudAI's grid search) and one point, unrolled cheaply
# --------------------------------------------------------------------------------------------------------------


def sweep_points(tr: Any) -> list[dict[str, Any]]:
    """The actions of CloudAI's GridSearchAgent for this test run, in its order; [{}] for a test without a sweep
    (itertools.product, as the agent enumerates them: the reference :func:`sweep_point` is tested against)."""
    space = _space(tr)
    if not space:
        return [{}]
    keys = list(space)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*space.values())]


def _space(tr: Any) -> dict[str, list[Any]]:
    return tr.param_space if tr.is_dse_job else {}


def sweep_size(tr: Any) -> int:
    """How many points the sweep has (1 without one; 0 when a list is empty)."""
    return math.prod(len(v) for v in _space(tr).values())


# The most sweep points one command checks, writes or reports (every test of the scenario together). The points are
# counted (the product of the swept lists' lengths) before any is enumerated; past the limit the command refuses in
# one line. 200,000 holds the largest grid the project measures (benchmarks/preflight_scale.py: six fields of seven
# values, 117,649 points) with room, and keeps a command's memory bounded: CloudAI's own grid search holds every
# point as a dict (72 MiB for 200,000 points of six fields, tracemalloc), preflight streams them (about 8 minutes on
# 2 cores at 2.3 s per 1,000, benchmarks/results/preflight_grid.txt). A dry-run of as many
# points writes a job folder each at 1.1 s per point (2.5 days). Raise it with the environment variable.
MAX_POINTS_ENV = "CLOUDAI_MBRIDGE_MAX_POINTS"
DEFAULT_MAX_POINTS = 200_000


class SweepLimitError(ValueError):
    """CLOUDAI_MBRIDGE_MAX_POINTS is not a whole number >= 1."""


def max_points() -> int:
    """The point limit: CLOUDAI_MBRIDGE_MAX_POINTS, else DEFAULT_MAX_POINTS."""
    raw = os.environ.get(MAX_POINTS_ENV, "").strip().replace("_", "").replace(",", "")
    if not raw:
        return DEFAULT_MAX_POINTS
    if not raw.isdigit() or int(raw) < 1 or len(raw) > 30:
        shown = os.environ[MAX_POINTS_ENV][:40].encode("ascii", "backslashreplace").decode("ascii")
        raise SweepLimitError(f"{MAX_POINTS_ENV}={shown!r} is not a whole number of points >= 1. Fix: "
                              f"export {MAX_POINTS_ENV}=1000000 (say), or unset it for the default "
                              f"{DEFAULT_MAX_POINTS:,}")
    return int(raw)


def _dimensions(tr: Any) -> str:
    """'gbs 1,000 x seq_length 1,000' of a test run's sweep, the longest lists first (at most four named)."""
    dims = sorted(((k, len(v)) for k, v in _space(tr).items() if len(v) > 1), key=lambda kv: -kv[1])
    text = " x ".join(f"{'num_nodes' if k == 'NUM_NODES' else k} {n:,}" for k, n in dims[:4])
    return text + (f" x {len(dims) - 4} more list(s)" if len(dims) > 4 else "")


def sweep_limit_problem(scenario: Any, sources: dict[str, str] | None = None, source: str = "") -> str | None:
    """One line when the scenario's sweeps together have more points than :func:`max_points` (None when they fit):
    the test file of the largest sweep (``sources``: the test's name -> its TOML), the count, the limit and how to
    raise it. Only the lengths of the swept lists are multiplied: nothing is enumerated."""
    try:
        limit = max_points()
    except SweepLimitError as exc:
        return str(exc)
    sizes = [(sweep_size(tr), tr) for tr in scenario.test_runs]
    total = sum(n for n, _ in sizes)
    if total <= limit:
        return None
    size, tr = max(sizes, key=lambda st: st[0])
    file = (sources or {}).get(getattr(tr.test, "name", ""), "")
    where = f"{source}: " if source else ""
    what = f"test {tr.name!r}{f' ({file})' if file else ''}: its sweep has {size:,} points ({_dimensions(tr)})"
    if size < total:
        what += f", the scenario's {len(sizes)} tests {total:,} together"
    return (f"{where}{what}, over the limit of {limit:,} points a command checks. Nothing was enumerated or written. "
            f"Fix: sweep fewer values (or split the sweep into several scenarios), or raise the limit: "
            f"{MAX_POINTS_ENV}={total} (preflight: about 2 s per 1,000 points; dry-run: 1.1 s per point)")


def sweep_point(tr: Any, index: int, space: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """Action ``index`` (0-based) of the grid, as itertools.product orders it (the last key varies fastest)."""
    space = _space(tr) if space is None else space
    values: list[tuple[str, Any]] = []
    for key, options in reversed(space.items()):
        index, i = divmod(index, len(options))
        values.append((key, options[i]))
    return dict(reversed(values))


def unroll(tr: Any, action: dict[str, Any], step: int) -> Any:
    """``TestRun.apply_params_set`` without its deep copies (the sweep's lists are already validated element by
    element at parse time; ``validate`` re-checks the point as a whole, as CloudAI does)."""
    from pydantic import BaseModel

    tdef = tr.test.model_copy()
    args = tdef.cmd_args.model_copy()
    env = dict(tdef.extra_env_vars)
    copied: dict[tuple[str, ...], Any] = {(): args}
    for key, value in action.items():
        if key == "NUM_NODES":
            continue
        if key.startswith("extra_env_vars."):
            env[key[len("extra_env_vars."):]] = value
            continue
        attrs = key.split(".")
        obj = args
        for depth in range(1, len(attrs)):
            path = tuple(attrs[:depth])
            if path not in copied:
                child = obj[attrs[depth - 1]] if isinstance(obj, dict) else getattr(obj, attrs[depth - 1])
                child = child.model_copy() if isinstance(child, BaseModel) else dict(child)
                if isinstance(obj, dict):
                    obj[attrs[depth - 1]] = child
                else:
                    setattr(obj, attrs[depth - 1], child)
                copied[path] = child
            obj = copied[path]
        if isinstance(obj, dict):
            obj[attrs[-1]] = value
        else:
            setattr(obj, attrs[-1], value)
    tdef.cmd_args = args
    tdef.extra_env_vars = env
    point = object.__new__(type(tr))  # dataclasses.replace without its __init__: the same shallow copy, cheaper
    point.__dict__.update(tr.__dict__)
    point.test, point.num_nodes, point.step = tdef, action.get("NUM_NODES", tr.num_nodes), step
    return point


def _has_model_validators(model: Any) -> bool:
    """Whether a pydantic model class, or one nested in its fields, checks fields against each other."""
    from pydantic import BaseModel

    seen: set[type] = set()
    todo = [model]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls.__pydantic_decorators__.model_validators:
            return True
        for f in cls.model_fields.values():
            for arg in [f.annotation, *getattr(f.annotation, "__args__", ())]:
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    todo.append(arg)
    return False


def validate_swept(tr: Any, action: dict[str, Any], caches: PointCaches) -> str | None:
    """:func:`validate` of a point, from the validation of each swept value on its own (remembered per test, key and
    value): exact where the point differs from the parsed test only in those values and no validator of the test's
    cmd_args compares fields (then the whole definition is validated, as CloudAI does). The first point of a test
    is always validated whole."""
    tdef = tr.test
    whole = caches.whole.get(tr.name)
    if whole is None:
        caches.whole[tr.name] = _has_model_validators(type(tdef.cmd_args))
        return validate(tr)
    if whole:
        return validate(tr)
    errors = []
    for key, value in action.items():
        if key == "NUM_NODES":
            continue
        memo = (tr.name, key, repr(value))
        if memo not in caches.fields:
            caches.fields[memo] = _validate_value(tdef, key, value)
        if caches.fields[memo]:
            errors.append(caches.fields[memo])
    return "; ".join(errors) or None


def _validate_value(tdef: Any, key: str, value: Any) -> str | None:
    """One swept value validated as its model would on assignment (field validators and types)."""
    from pydantic import ValidationError

    if key.startswith("extra_env_vars."):
        owner, attr, value, where = tdef, "extra_env_vars", {key[len("extra_env_vars."):]: value}, ""
    else:
        *parents, attr = key.split(".")
        owner = tdef.cmd_args
        for name in parents:
            owner = owner[name] if isinstance(owner, dict) else getattr(owner, name)
        where = "cmd_args." + ".".join(parents) + ("." if parents else "")
        if isinstance(owner, dict):  # a plain table: no schema below it
            return None
    try:
        type(owner).__pydantic_validator__.validate_assignment(owner.model_copy(), attr, value)
    except ValidationError as exc:
        return "; ".join(f"{where}{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return None


def validate(tr: Any) -> str | None:
    """What CloudAI's apply_params_set would raise for this point (it validates the unrolled definition)."""
    from pydantic import ValidationError

    tdef = tr.test
    data = tdef.model_dump()
    data.pop("env_params", None)
    try:
        type(tdef)(**data)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return None


# --------------------------------------------------------------------------------------------------------------
# Time limits and measured step times
# --------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def time_limit_hours(limit: str | None) -> float | None:
    """Slurm's formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    if not limit:
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", limit.strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:
        h, mi, s = int(a), int(b or 0), int(c or 0)
        return int(days) * 24 + h + mi / 60 + s / 3600
    if c is not None:
        return int(a) + int(b) / 60 + int(c) / 3600
    if b is not None:
        return int(a) / 60 + int(b) / 3600
    return int(a) / 60


def measured_step_seconds(result_dir: Path, tr_name: str, point: int, values: dict[str, Any]) -> float | None:
    """Mean iteration time of this point's run in an earlier results folder of the scenario, if it logged any.

    The run folder is CloudAI's ``<test>/0/<step>`` (``<test>/0`` without a sweep); its recorded config must agree
    with the point on every swept field it records under the same name, else it is not this point's run."""
    run = result_dir / tr_name / "0"
    if point:
        run = run / str(point)
    config_path = run / "mbridge_config.json"
    if not config_path.is_file():
        return None
    from ..safe_read import MAX_JSON_BYTES, InputFileError, read_bytes

    try:
        config = safejson.loads(read_bytes(config_path, MAX_JSON_BYTES, "the run's config"))
    except (OSError, ValueError, InputFileError):
        return None
    for key, value in values.items():
        name = key.split(".")[-1]
        if name in config and not isinstance(config[name], dict) and config[name] != value:
            return None
    from ..metrics import parse_run

    try:
        m = parse_run(run)
    except Exception:
        return None
    mean = getattr(getattr(m, "iteration_time_ms", None), "mean", None)
    return None if mean is None else mean / 1000.0


# --------------------------------------------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------------------------------------------


def _gpus_and_memory(tr: Any, system: Any, plan: Any = None) -> tuple[int | None, MemoryEstimate | None, Any]:
    """GPUs, the plugin's memory estimate and Megatron-Bridge's own (None where either does not apply); ``plan``:
    the point's plan when the caller has it already."""
    tdef = tr.test
    plan = tdef.plan(tr, system) if plan is None else plan
    if hasattr(plan, "gpu"):  # training
        memory = bridge = None
        if plan.dp and plan.expert_dp and plan.experts_per_rank:
            try:
                memory = estimate_memory(plan)
                bridge = bridge_estimate(plan)
            except Exception:  # a layout the rules reject; they say why
                memory = bridge = None
        return plan.world_size, memory, bridge
    device = getattr(tdef.cmd_args, "device", "cuda")
    return (plan.world_size if device == "cuda" else 0), None, None


def preview_problem(tr: Any, system: Any) -> str | None:
    """What generating this point's job would refuse beyond the rules (a scheduler field the script or the
    manifests cannot carry, a missing setting), found by rendering it in memory with the real strategy."""
    from cloudai.core import Registry

    key = (type(system), type(tr.test))
    strategy_cls = Registry.command_gen_strategies_map.get(key) or Registry.json_gen_strategies_map.get(key)
    preview = getattr(strategy_cls, "preview", None)
    if preview is None:
        return None
    from ..rules import PointRejectedError

    if tr.output_path is None or str(tr.output_path) in ("", "."):
        tr = dataclasses.replace(tr, output_path=Path("results") / tr.name / "0")
    try:
        strategy_cls(system, tr).preview()
    except PointRejectedError as exc:
        return " | ".join(map(str, exc.violations))
    except (ValueError, TypeError, KeyError, OSError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _preview_key(tr: Any, values: dict[str, Any]) -> tuple:
    """Points of one test whose swept values differ only in numbers render alike (a number always has a form in a
    script and a JSON config; a string may not): one preview per test, node count and set of non-numeric values."""
    text = tuple((k, repr(v)) for k, v in values.items() if not isinstance(v, (bool, int, float)))
    return (tr.name, tr.num_nodes, text)


@dataclass
class PointCaches:
    """What the points of one sweep share, found once: the validation of each swept value, the secret checks and the
    in-memory job render per set of non-numeric values (a number never changes either)."""

    previews: dict[tuple, str | None] = field(default_factory=dict)
    secrets: dict[tuple, list[Violation]] = field(default_factory=dict)
    fields: dict[tuple, str | None] = field(default_factory=dict)
    whole: dict[str, bool] = field(default_factory=dict)


def check_point(tr: Any, system: Any, values: dict[str, Any], result_dir: Path | None = None,
                render: bool = False, previews: dict[tuple, str | None] | None = None,
                caches: PointCaches | None = None, action: dict[str, Any] | None = None) -> PointResult:
    """One point's verdict. Without ``caches`` everything is checked from scratch (the reference the fast path is
    tested against); with them, what points share is looked up (``action``: the point's swept keys and values)."""
    tdef = tr.test
    res = PointResult(test=tr.name, point=tr.step, values=values, violations=[], gpus=None)
    if not hasattr(tdef, "violations"):
        res.checked = False
        return res
    if caches is not None:
        previews = caches.previews
    if tr.step:
        res.error = validate(tr) if caches is None else validate_swept(tr, action or {}, caches)
        if res.error:
            return res
    plan = None
    key = _preview_key(tr, values) if previews is not None else None
    try:
        if caches is None or key is None:
            res.violations = tdef.violations(tr, system)
        else:
            if key not in caches.secrets:
                caches.secrets[key] = tdef.secret_violations(system)
            kind = tdef.system_kind_violations(system)
            if kind:  # no job of this kind for this system type: the other rules' verdicts would not matter
                res.violations = [*caches.secrets[key], *kind]
            else:
                rules, plan = tdef.checked_plan(tr, system)
                res.violations = [*caches.secrets[key], *rules]
        res.expected = tdef.rejection_expected(res.violations)
        if not any(v.rule == "system-gpu" for v in res.violations):  # no plan without a GPU: the rule says why
            res.gpus, res.memory, res.bridge = _gpus_and_memory(tr, system, plan)
    except Exception as exc:  # a value combination the plan cannot even be built from
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    if render and not res.violations:
        if key is not None and key in previews:
            res.error = previews[key]
        else:
            res.error = preview_problem(tr, system)
            if key is not None:
                previews[key] = res.error
        if res.error:
            return res
    if res.ok and res.gpus and hasattr(tdef, "payload_config"):
        res.refit = refit_prediction(tr, system)
    limit = time_limit_hours(tr.time_limit)
    if res.gpus is not None and limit is not None:
        res.limit_hours = res.gpus * limit
    iters = getattr(tdef.cmd_args, "train_iters", None)
    if result_dir is not None and iters and res.gpus:
        step_s = measured_step_seconds(result_dir, tr.name, tr.step, values)
        if step_s is not None:
            res.measured_step_s = step_s
            res.measured_hours = res.gpus * iters * step_s / 3600
    return res


def refit_prediction(tr: Any, system: Any) -> Any:
    """Predicted seconds of an accepted refit point on GPUs (plan/refit_bytes.py: its byte plan at the refit rate
    measured on 2x H200); None where the plan cannot be made."""
    from ..plan.refit_bytes import predict_payload

    plan = tr.test.plan(tr, system)
    try:
        return predict_payload(plan.config, plan.world_size, plan.tasks_per_node)
    except Exception:  # a layout the byte plan does not cover: no prediction rather than no preflight
        return None


def _check(tr: Any, system: Any, index: int, space: dict[str, list[Any]], result_dir: Path | None, render: bool,
           caches: PointCaches) -> PointResult:
    """Point ``index`` (0-based) of ``tr``'s sweep, unrolled and checked."""
    action = sweep_point(tr, index, space)
    step = index + 1 if action else 0
    try:
        point = unroll(tr, action, step) if action else dataclasses.replace(tr, step=0)
    except Exception as exc:
        return PointResult(tr.name, step, action, [], None, error=str(exc))
    values = {("num_nodes" if k == "NUM_NODES" else k): v for k, v in action.items()}
    return check_point(point, system, values, result_dir, render, caches=caches, action=action)


# Sweeps of at least this many points are checked by worker processes (forked: they share the parsed scenario), in
# chunks of CHUNK points, each returning its points with their CSV rows; the parent counts and writes in order.
PARALLEL_FROM = 4000
CHUNK = 500
_WORK: dict[str, Any] = {}


def workers_for(points: int) -> int:
    if points < PARALLEL_FROM or "fork" not in __import__("multiprocessing").get_all_start_methods():
        return 1
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8))


def _worker_start() -> None:
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the parent stops the sweep; it stops us
        signal.signal(sig, signal.SIG_IGN)


def _check_chunk(job: tuple[int, int, int, int, int]) -> tuple[list[PointResult | PointTally], str]:
    """Points ``start`` to ``stop`` of a test: the first ``want_ok`` accepted and ``want_bad`` rejected ones whole
    (the parent may still show them), the others as what it counts; and their CSV rows as one text."""
    test, start, stop, want_ok, want_bad = job
    tr = _WORK["scenario"].test_runs[test]
    space = _space(tr)
    caches = _WORK.setdefault("caches", PointCaches())
    line = _LineWriter()
    out: list[PointResult | PointTally] = []
    rows = []
    for index in range(start, stop):
        p = _check(tr, _WORK["system"], index, space, _WORK["result_dir"], _WORK["render"], caches)
        rows.append(line(p))
        if p.ok and want_ok > 0:
            want_ok -= 1
            out.append(p)
        elif not p.ok and want_bad > 0:
            want_bad -= 1
            out.append(p)
        else:
            out.append(PointTally.of(p))
    return out, "".join(rows)


Wants = Callable[[], tuple[int, int]]  # (accepted, rejected) points the report may still keep


def iter_points(system: Any, scenario: Any, result_dir: Path | None = None, render: bool = True,
                workers: int | None = None,
                wants: Wants | None = None) -> Iterator[tuple[list[PointResult | PointTally], str | None]]:
    """Every point of every test, in CloudAI's order, in runs: the points (or, from a worker, the tallies of those
    ``wants`` no longer asks for) with their CSV rows when a worker made them (else None)."""
    caches = PointCaches()
    for test, tr in enumerate(scenario.test_runs):
        size = sweep_size(tr)
        n = workers_for(size) if workers is None else workers
        if n <= 1 or size <= 1:
            space = _space(tr)
            for index in range(size):
                yield [_check(tr, system, index, space, result_dir, render, caches)], None
            continue
        yield from _parallel(test, size, n, system, scenario, result_dir, render, wants)


def _parallel(test: int, size: int, workers: int, system: Any, scenario: Any, result_dir: Path | None,
              render: bool, wants: Wants | None) -> Iterator[tuple[list[PointResult | PointTally], str | None]]:
    """Chunks of the sweep checked by ``workers`` forked processes, a few chunks ahead of the one the caller takes;
    each is sent with what the report may still keep then (it only keeps fewer later), so every point the report
    keeps comes back whole."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    _WORK.clear()
    _WORK.update(system=system, scenario=scenario, result_dir=result_dir, render=render)
    chunk = max(1, min(CHUNK, -(-size // (workers * 4))))
    starts = iter(range(0, size, chunk))
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start)
    pending: deque = deque()

    def submit() -> None:
        start = next(starts, None)
        if start is not None:
            ok, bad = wants() if wants is not None else (size, size)
            pending.append(pool.submit(_check_chunk, (test, start, min(start + chunk, size), ok, bad)))

    try:
        for _ in range(workers * 3):
            submit()
        while pending:
            try:
                result = pending.popleft().result()
            except BrokenProcessPool:
                raise RuntimeError(f"a worker process checking test {scenario.test_runs[test].name!r} ended "
                                   "unexpectedly (out of memory?). Fix: free memory and run preflight again") from None
            submit()
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _WORK.clear()


def preflight(system: Any, scenario: Any, result_dir: Path | None = None, render: bool = True,
              sink: Callable[[str], None] | None = None, keep_all: bool = True,
              workers: int | None = None) -> PreflightReport:
    """Every point checked; ``sink`` gets preflight.csv line by line (header first) as the points come, and the
    report keeps every point or (``keep_all`` off) only those its tables show. ``workers``: processes to check a
    sweep with (default: one per CPU from PARALLEL_FROM points on). A scenario past :func:`max_points` raises
    SweepTooLargeError before its first point (callers say so first: :func:`sweep_limit_problem`); one past
    PROGRESS_FROM points logs how far it got every PROGRESS_EVERY_S seconds."""
    too_many = sweep_limit_problem(scenario)
    if too_many:
        raise SweepTooLargeError(too_many)
    report = PreflightReport(scenario=scenario.name, system=system.name, keep_all=keep_all)
    line = _LineWriter()
    if sink is not None:
        sink(line.header())
    progress = _Progress(sum(sweep_size(tr) for tr in scenario.test_runs))
    for points, rows in iter_points(system, scenario, result_dir, render, workers, report.wants):
        for point in points:
            report.add(point)
        if sink is not None:
            sink(rows if rows is not None else "".join(line(p) for p in points))
        progress(report.total)
    return report


class SweepTooLargeError(ValueError):
    """More sweep points than max_points(): nothing was enumerated (the message is sweep_limit_problem's line)."""


PROGRESS_FROM = 5000  # points: a sweep this large takes ten seconds or more (about 2 s per 1,000 points)
PROGRESS_EVERY_S = 10.0


class _Progress:
    """'checked 12,000 of 100,000 sweep points (12 %), about 3 min left' on the log, at most every PROGRESS_EVERY_S."""

    def __init__(self, total: int) -> None:
        import time

        self.total, self.clock = total, time.monotonic
        self.start = self.last = self.clock()

    def __call__(self, done: int) -> None:
        if self.total < PROGRESS_FROM or done >= self.total:
            return
        now = self.clock()
        if now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        left = (now - self.start) / max(done, 1) * (self.total - done)
        eta = f"{left / 60:,.0f} min" if left >= 90 else f"{left:,.0f} s"
        import logging

        logging.info(f"checked {done:,} of {self.total:,} sweep points ({100 * done // self.total} %), about {eta} "
                     "left")


def blocking_problems(report: PreflightReport, scenario: Any, sources: dict[str, str] | None = None) -> list[str]:
    """Why dry-run / run must not start this scenario at all (nothing written): a test whose sweep is empty, a test
    whose every point is rejected, a test without a sweep that is rejected. Each names the test, the test file that
    sets its fields (``sources``: the test's name -> its TOML, where known) and says why."""
    problems = []
    for tr in scenario.test_runs:
        source = (sources or {}).get(getattr(tr.test, "name", ""))
        t = report.tests.get(tr.name)
        if t is None:
            empty = [k for k, v in _space(tr).items() if not v]
            what = ", ".join(f"{k} = []" for k in empty) or "its sweep"
            problems.append(f"test {tr.name!r}{f' ({source})' if source else ''}: {what} is an empty sweep: no point "
                            "to run. "
                            "Fix: give the list at least one value, or a single value")
            continue
        if t.runnable:
            continue  # all fine, or a sweep with some rejected points: dry-run / run skip those, saying why
        head = (f"test {tr.name!r}{f' (fields set in {source})' if source else ''}: "
                + ("every point of its sweep is rejected" if t.swept else "rejected"))
        problems.append(head + ": " + reason_summary(t.reasons, t.points, t.other_reasons))
    return problems


def reason_summary(counts: dict[str, int], points: int, other: int = 0, limit: int = 6) -> str:
    shown = [r if n == 1 or points == 1 else f"{r} ({n:,} of {points:,} points)"
             for r, n in list(counts.items())[:limit]]
    more = len(counts) - len(shown) + other
    return " | ".join(shown) + (f" | and {more} other reason(s) (cloudai-mbridge preflight lists them)" if more > 0
                               else "")


# --------------------------------------------------------------------------------------------------------------
# Output: terminal, CSV, HTML
# --------------------------------------------------------------------------------------------------------------

COLUMNS = ("test", "point", "varies", "verdict", "rule", "reason_and_fix", "gpus", "memory_gib_per_gpu",
           "memory_verdict", "memory_band_pct", "bridge_estimate_gib", "largest_term_gib", "gpu_hours",
           "gpu_hours_basis", "refit_predicted_s", "refit_predicted_megatron_s", "refit_recv_gb_per_gpu",
           "refit_predicted_basis")


def row(p: PointResult) -> dict[str, str]:
    return {
        "test": p.test, "point": str(p.point), "varies": p.varies, "verdict": p.verdict, "rule": p.rules,
        "reason_and_fix": p.reasons, "gpus": "" if p.gpus is None else str(p.gpus),
        "memory_gib_per_gpu": p.memory_gib, "memory_verdict": p.memory_verdict, "memory_band_pct": p.memory_band,
        "bridge_estimate_gib": p.bridge_gib, "largest_term_gib": p.largest_term,
        "gpu_hours": "" if p.gpu_hours is None or not p.ok else f"{p.gpu_hours:.1f}",
        "gpu_hours_basis": p.hours_basis if p.ok else "",
        "refit_predicted_s": p.refit_s, "refit_predicted_megatron_s": p.refit_megatron_s,
        "refit_recv_gb_per_gpu": p.refit_recv_gb,
        "refit_predicted_basis": "" if p.refit is None else p.refit.basis,
    }


def rows(report: PreflightReport) -> list[dict[str, str]]:
    """The CSV's rows of the points the report holds (every point unless it was made with keep_all off)."""
    return [row(p) for p in report.points]


class _LineWriter:
    """preflight.csv a line at a time (csv module quoting, \r\n line ends as DictWriter writes them)."""

    def __init__(self) -> None:
        self._buf = io.StringIO(newline="")
        self._writer = csv.DictWriter(self._buf, fieldnames=COLUMNS)

    def _take(self) -> str:
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        return text

    def header(self) -> str:
        self._writer.writeheader()
        return self._take()

    def __call__(self, p: PointResult) -> str:
        self._writer.writerow(row(p))
        return self._take()
