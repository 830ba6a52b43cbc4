"""The dispatch microbenchmark's log (payload/dispatch_bench/lines.py) -> per-phase latency and bandwidth.

A run yields numbers only when its log is whole and consistent; otherwise ``status`` says what is wrong and
``phases`` is empty:

- ``missing_log``: no rank-0 log; ``error``: the payload's MBRIDGE_*_ERROR line (its text in ``error``);
- ``check_failed``: the combine did not give back the dispatched tokens (MBRIDGE_DISPATCH_CHECK ok=false, or none);
- ``incomplete``: a phase line or the DONE line is missing (a run cut short);
- ``damaged``: a line that does not parse, a number that is not finite and positive, percentiles out of order, a
  bandwidth that the byte count and median do not give, a phase twice, or another backend than the config's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..safe_read import InputFileError, read_text

MAX_LOG_BYTES = 256 * 1024 * 1024
PHASES = ("dispatch", "combine")
_LINE = re.compile(r"^(?:\[[^\]\s]*\]:)?(MBRIDGE_[A-Z_]+)(?: (.*))?$")
_PAIR = re.compile(r"^([a-z0-9_]+)=(\S+)$")
RESULT_FLOATS = ("median_us", "p10_us", "p90_us", "min_us", "max_us", "algbw_gbps", "busbw_gbps")
RESULT_INTS = ("calls", "warmup", "ranks")
BYTES_INTS = ("tokens_per_rank", "hidden", "topk", "experts", "ep", "elem_bytes", "logical_bytes",
              "cross_rank_bytes")
ZERO_OK = ("warmup", "busbw_gbps", "cross_rank_bytes")  # one rank: nothing crosses to another
BW_RTOL = 0.01  # the line rounds algbw to 3 decimals and the times to 2


@dataclass(frozen=True)
class PhaseResult:
    phase: str
    backend: str
    calls: int
    warmup: int
    median_us: float
    p10_us: float
    p90_us: float
    min_us: float
    max_us: float
    algbw_gbps: float
    busbw_gbps: float
    timer: str
    ranks: int


@dataclass
class DispatchBenchMetrics:
    status: str
    backend: str | None = None
    phases: dict[str, PhaseResult] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    bytes_rule: str | None = None
    check: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    log: Path | None = None


def _fields(rest: str | None) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for token in (rest or "").split():
        m = _PAIR.match(token)
        if m is None or m.group(1) in out:
            return None
        out[m.group(1)] = m.group(2)
    return out


def _number(text: str, kind: type) -> float | int | None:
    try:
        value = kind(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _phase(f: dict[str, str]) -> PhaseResult | str:
    """A RESULT line's fields -> PhaseResult, or why the line is damaged."""
    missing = [k for k in ("phase", "backend", "timer", *RESULT_FLOATS, *RESULT_INTS) if k not in f]
    if missing:
        return f"fields missing: {', '.join(missing)}"
    values: dict[str, float | int] = {}
    for key, kind in [*((k, float) for k in RESULT_FLOATS), *((k, int) for k in RESULT_INTS)]:
        v = _number(f[key], kind)
        if v is None or v < 0 or (v == 0 and key not in ZERO_OK):
            return f"{key}={f[key]!r} is not a finite positive number"
        values[key] = v
    if not values["min_us"] <= values["p10_us"] <= values["median_us"] <= values["p90_us"] <= values["max_us"]:
        return "min <= p10 <= median <= p90 <= max does not hold"
    if f["phase"] not in PHASES:
        return f"phase {f['phase']!r} is neither dispatch nor combine"
    return PhaseResult(phase=f["phase"], backend=f["backend"], timer=f["timer"], **values)  # type: ignore[arg-type]


def parse_dispatch_log(text: str, expected_backend: str | None = None) -> DispatchBenchMetrics:
    m = DispatchBenchMetrics(status="incomplete", backend=expected_backend)
    done = False
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        tag, rest = match.group(1), match.group(2)
        if tag.endswith("_ERROR"):
            m.status, m.error, m.phases = "error", f"{tag} {rest or ''}".strip(), {}
            return m
        if tag not in ("MBRIDGE_DISPATCH_RESULT", "MBRIDGE_DISPATCH_BYTES", "MBRIDGE_DISPATCH_CHECK",
                       "MBRIDGE_DISPATCH_DONE"):
            continue
        f = _fields(rest)
        if f is None:
            return _damaged(m, f"{tag}: not key=value fields: {rest!r}")
        if tag == "MBRIDGE_DISPATCH_BYTES":
            if m.bytes:
                return _damaged(m, "two byte-count lines")
            for key in BYTES_INTS:
                v = _number(f.get(key, ""), int)
                if v is None or v < 0 or (v == 0 and key not in ZERO_OK):
                    return _damaged(m, f"MBRIDGE_DISPATCH_BYTES {key}={f.get(key)!r}")
                m.bytes[key] = int(v)
            m.bytes_rule = f.get("rule")
        elif tag == "MBRIDGE_DISPATCH_CHECK":
            m.check = f
        elif tag == "MBRIDGE_DISPATCH_RESULT":
            r = _phase(f)
            if isinstance(r, str):
                return _damaged(m, f"MBRIDGE_DISPATCH_RESULT: {r}")
            if r.phase in m.phases:
                return _damaged(m, f"phase {r.phase} reported twice")
            if m.backend is None:
                m.backend = r.backend
            if r.backend != m.backend:
                return _damaged(m, f"backend {r.backend} in a run of {m.backend}")
            m.phases[r.phase] = r
        else:
            if f.get("backend") != m.backend and m.backend is not None:
                return _damaged(m, f"DONE for backend {f.get('backend')} in a run of {m.backend}")
            done = True
    if m.check.get("ok") != "true":
        m.status, m.phases = "check_failed", {}
        m.error = "no MBRIDGE_DISPATCH_CHECK line" if not m.check else f"check: {m.check}"
        return m
    if not done or set(m.phases) != set(PHASES) or not m.bytes:
        m.status, m.phases = "incomplete", {}
        return m
    for r in m.phases.values():
        for key, nbytes in (("algbw_gbps", m.bytes["logical_bytes"]), ("busbw_gbps", m.bytes["cross_rank_bytes"])):
            expected = nbytes / (r.median_us * 1e-6) / 1e9
            if not math.isclose(getattr(r, key), expected, rel_tol=BW_RTOL, abs_tol=2e-3):
                return _damaged(m, f"{r.phase} {key}={getattr(r, key)} but bytes / median give {expected:.3f}")
    m.status = "ok"
    return m


def _damaged(m: DispatchBenchMetrics, why: str) -> DispatchBenchMetrics:
    m.status, m.error, m.phases = "damaged", why, {}
    return m


def parse_dispatch_run(run_dir: Path | str, expected_backend: str | None = None) -> DispatchBenchMetrics:
    """A run folder's rank-0 log (``logs/rank-0.log``, as the Slurm job writes it) -> metrics."""
    log = Path(run_dir) / "logs" / "rank-0.log"
    try:
        text = read_text(log, MAX_LOG_BYTES, "the rank-0 log", errors="replace")
    except (InputFileError, OSError) as e:
        return DispatchBenchMetrics(status="missing_log", backend=expected_backend, error=str(e), log=log)
    m = parse_dispatch_log(text, expected_backend)
    m.log = log
    return m
