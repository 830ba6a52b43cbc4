"""The dispatch/combine microbenchmark's pure side (stdlib only, tested on any machine): the balanced routing it
feeds the dispatcher, how bytes are counted, the per-call statistics and the lines it prints.

Lines (rank 0 unless said otherwise; ``key=value`` fields, no spaces inside a value):

  MBRIDGE_DISPATCH_CONFIG {json}     the config as run, once
  MBRIDGE_DISPATCHER requested=<a> built=<alltoall|flex> backend=<deepep|ncclep|none>   (as the training payload)
  MBRIDGE_DISPATCH_BYTES tokens_per_rank=.. hidden=.. topk=.. experts=.. ep=.. elem_bytes=.. logical_bytes=..
      cross_rank_bytes=.. rule=tokens*topk*hidden*elem
  MBRIDGE_DISPATCH_CHECK scale=<output/input> expected=<topk|1> max_rel_err=.. ok=<true|false>
  MBRIDGE_DISPATCH_RESULT phase=<dispatch|combine> backend=<arm> calls=<n> warmup=<w> median_us=.. p10_us=..
      p90_us=.. min_us=.. max_us=.. algbw_gbps=.. busbw_gbps=.. timer=cuda_events ranks=<world>
  MBRIDGE_DISPATCH_DONE backend=<arm> phases=2

Timing: per call, the slowest rank's time (an all-reduce MAX over ranks of each call's time after the loop), so a
call is as long as the rank that finished it last. dispatch = dispatch_preprocess + token_dispatch +
dispatch_postprocess (router output to expert input, what an MoE layer pays before its experts), combine =
combine_preprocess + token_combine + combine_postprocess (expert output back to token order); the experts are the
identity in between. Bytes: ``logical_bytes`` = tokens_per_rank * topk * hidden * element size, what one rank hands
the dispatcher per call, the same for every backend (a backend that sends a token once per destination rank rather
than once per expert moves fewer bytes on the wire; logical bytes keep the backends comparable). algbw =
logical_bytes / median time; busbw = cross_rank_bytes / median time, with cross_rank_bytes the (token, expert)
pairs whose expert lives on another rank, times hidden * element size. GB/s = 1e9 bytes per second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

DISPATCHERS = ("alltoall", "deepep", "ncclep")
PHASES = ("dispatch", "combine")
TAG_RESULT = "MBRIDGE_DISPATCH_RESULT"
TAG_BYTES = "MBRIDGE_DISPATCH_BYTES"
TAG_CHECK = "MBRIDGE_DISPATCH_CHECK"
TAG_DONE = "MBRIDGE_DISPATCH_DONE"
TAG_CONFIG = "MBRIDGE_DISPATCH_CONFIG"
TAG_ERROR = "MBRIDGE_DISPATCH_ERROR"
BYTES_RULE = "tokens*topk*hidden*elem"


def balanced_experts(token: int, rank: int, topk: int, num_experts: int) -> list[int]:
    """The experts of one token: ``topk`` consecutive experts (mod num_experts) starting where the previous token
    stopped, rank-shifted, so every expert gets the same number of tokens when tokens * topk is a multiple of
    num_experts (what balanced routing aims at in training)."""
    start = (token * topk + rank * topk) % num_experts
    return [(start + j) % num_experts for j in range(topk)]


def byte_counts(tokens: int, hidden: int, topk: int, num_experts: int, ep: int, rank: int,
                elem_bytes: int) -> tuple[int, int]:
    """(logical_bytes, cross_rank_bytes) of one rank's dispatch with :func:`balanced_experts` routing."""
    per_rank = num_experts // ep
    cross = sum(1 for t in range(tokens) for e in balanced_experts(t, rank, topk, num_experts)
                if e // per_rank != rank)
    return tokens * topk * hidden * elem_bytes, cross * hidden * elem_bytes


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(times_us: Sequence[float]) -> dict[str, float]:
    values = sorted(float(t) for t in times_us)
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError(f"per-call times must be finite and > 0, got {values[:5]}...")
    return {"median_us": percentile(values, 50), "p10_us": percentile(values, 10), "p90_us": percentile(values, 90),
            "min_us": values[0], "max_us": values[-1]}


def gbps(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


def result_line(*, phase: str, backend: str, times_us: Sequence[float], warmup: int, logical_bytes: int,
                cross_rank_bytes: int, timer: str, ranks: int) -> str:
    s = summarize(times_us)
    fields = {
        "phase": phase, "backend": backend, "calls": len(times_us), "warmup": warmup,
        **{k: f"{v:.2f}" for k, v in s.items()},
        "algbw_gbps": f"{gbps(logical_bytes, s['median_us']):.3f}",
        "busbw_gbps": f"{gbps(cross_rank_bytes, s['median_us']):.3f}",
        "timer": timer, "ranks": ranks,
    }
    return TAG_RESULT + " " + " ".join(f"{k}={v}" for k, v in fields.items())


def bytes_line(*, tokens: int, hidden: int, topk: int, experts: int, ep: int, elem_bytes: int, logical_bytes: int,
               cross_rank_bytes: int) -> str:
    return (f"{TAG_BYTES} tokens_per_rank={tokens} hidden={hidden} topk={topk} experts={experts} ep={ep} "
            f"elem_bytes={elem_bytes} logical_bytes={logical_bytes} cross_rank_bytes={cross_rank_bytes} "
            f"rule={BYTES_RULE}")


def check_line(scale: float, expected: float, max_rel_err: float, ok: bool) -> str:
    return (f"{TAG_CHECK} scale={scale:.6g} expected={expected:g} max_rel_err={max_rel_err:.3g} "
            f"ok={'true' if ok else 'false'}")


def config_line(cfg: dict[str, Any]) -> str:
    return f"{TAG_CONFIG} {json.dumps(cfg, sort_keys=True)}"
