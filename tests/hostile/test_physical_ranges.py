"""Issue 46 (6): a count far outside its physical range (10**9 training steps, a 10**14-token sequence, a 10 TiB
message) is refused where the test file is read, and the message names the whole range and why it ends there;
the largest physical value is still accepted."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from cloudai_mbridge.cli.friendly import friendly_lines
from cloudai_mbridge.workloads.dispatch_bench.test_definition import MBridgeDispatchBenchCmdArgs
from cloudai_mbridge.workloads.refit.test_definition import MBridgeRefitCmdArgs
from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingCmdArgs

TRAIN = {"model": "kimi_k2_proxy"}
REFIT = {"model": "kimi_k2_proxy", "src": {"tp": 1}, "dst": {"tp": 1}}
BENCH = {"model": "kimi_k2_proxy", "dispatcher": "alltoall"}

# (model, base, path, lowest, highest): each count a test definition reads, with its physical range
COUNTS = [
    (MBridgeTrainingCmdArgs, TRAIN, ("train_iters",), 1, 10_000_000),
    (MBridgeTrainingCmdArgs, TRAIN, ("log_interval",), 1, 10_000_000),
    (MBridgeTrainingCmdArgs, TRAIN, ("mbs",), 1, 1 << 22),
    (MBridgeTrainingCmdArgs, TRAIN, ("gbs",), 1, 1 << 22),
    (MBridgeTrainingCmdArgs, TRAIN, ("seq_length",), 1, 1 << 24),
    (MBridgeTrainingCmdArgs, TRAIN, ("num_distributed_optimizer_instances",), 1, 1 << 20),
    (MBridgeTrainingCmdArgs, TRAIN, ("hang_timeout_s",), 0, 7 * 24 * 3600),
    (MBridgeRefitCmdArgs, REFIT, ("iterations",), 1, 100_000),
    (MBridgeRefitCmdArgs, REFIT, ("warmup",), 1, 100_000),
    (MBridgeRefitCmdArgs, REFIT, ("seq_length",), 1, 1 << 24),
    (MBridgeRefitCmdArgs, REFIT, ("num_layers",), 1, 1024),
    (MBridgeRefitCmdArgs, REFIT, ("coalesce_mib",), 0, 1 << 20),
    (MBridgeRefitCmdArgs, REFIT, ("coalesce_edge_mib",), 0, 1 << 20),
    (MBridgeRefitCmdArgs, REFIT, ("src", "world"), 1, 1 << 20),
    (MBridgeDispatchBenchCmdArgs, BENCH, ("iterations",), 1, 100_000),
    (MBridgeDispatchBenchCmdArgs, BENCH, ("warmup",), 1, 100_000),
    (MBridgeDispatchBenchCmdArgs, BENCH, ("seq_length",), 1, 1 << 24),
    (MBridgeDispatchBenchCmdArgs, BENCH, ("mbs",), 1, 1 << 22),
]


def _with(base: dict, path: tuple[str, ...], value: object) -> dict:
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    obj = data
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value
    return data


def _line(model: type[BaseModel], data: dict) -> str:
    with pytest.raises(ValidationError) as e:
        model.model_validate(data)
    lines = friendly_lines(e.value.errors())
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("model", "base", "path", "lo", "hi"), COUNTS, ids=[".".join(c[2]) + f"-{c[0].__name__}"
                                                                             for c in COUNTS])
def test_a_count_beyond_its_physical_range_is_refused_naming_the_range(model, base, path, lo, hi) -> None:
    model.model_validate(_with(base, path, hi))
    model.model_validate(_with(base, path, lo))
    for wild in (hi + 1, 10**9 if hi < 10**9 else 10**12, 10**30, lo - 1):
        line = _line(model, _with(base, path, wild))
        assert f"from {lo} to {hi}" in line and path[-1] in line and str(wild) in line, line
        assert "Fix: " in line and line.count("(") <= 3, line


def test_a_sweep_element_beyond_the_range_is_named_by_position() -> None:
    line = _line(MBridgeTrainingCmdArgs, _with(TRAIN, ("seq_length",), [4096, 10**14]))
    assert "element 2 (100000000000000)" in line and "from 1 to 16777216" in line, line
