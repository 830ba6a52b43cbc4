"""The DSE metric ``iteration-time-no-gc``: a recorded real run (4 x H200, `cloudai run`, DeepSeek-V3 proxy, alltoall,
14 iterations, Bridge's manual GC every 5 steps) gives CloudAI the A/B page's steady-state mean (GC steps 6 and 11
left out), while ``iteration-time`` keeps them in."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudai_mbridge.metrics.training import parse_training_run
from cloudai_mbridge.workloads.reporting import MBridgeTrainingReport

RUN = Path(__file__).resolve().parent.parent / "benchmarks/results/bridge_ab_4gpu/dsv3_mbs1_cloudai_h7/start1/0/1"


def _metric(name: str) -> float | None:
    return MBridgeTrainingReport.metric_fns[name](parse_training_run(RUN))


def test_no_gc_metric_leaves_the_collection_steps_out() -> None:
    m = parse_training_run(RUN)
    assert m.ok and m.gc_iterations == (6, 11)
    assert _metric("iteration-time") == pytest.approx(0.7442, abs=1e-4)
    assert _metric("iteration-time-no-gc") == pytest.approx(0.5825, abs=1e-4)  # the A/B page's start mean, 582.5 ms
    assert "iteration-time-no-gc" in MBridgeTrainingReport.metrics
