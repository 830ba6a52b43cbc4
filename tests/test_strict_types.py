"""Issue 14: the TOML-facing models take ints as ints (no "8", 8.0 or true coerced), a bounded seed and timeout."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cloudai_mbridge.workloads.refit.test_definition import MBridgeRefitCmdArgs
from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingCmdArgs

TRAIN = {"model": "kimi_k2_proxy", "gpu": "h100"}
REFIT = {"model": "kimi_k2_proxy", "src": {"tp": 1}, "dst": {"tp": 1}}

BAD = [
    (MBridgeTrainingCmdArgs, TRAIN, "tp", "8"),
    (MBridgeTrainingCmdArgs, TRAIN, "tp", 1.0),
    (MBridgeTrainingCmdArgs, TRAIN, "tp", True),
    (MBridgeTrainingCmdArgs, TRAIN, "ep", [2, "4"]),
    (MBridgeTrainingCmdArgs, TRAIN, "train_iters", 20.0),
    (MBridgeTrainingCmdArgs, TRAIN, "seed", "1234"),
    (MBridgeTrainingCmdArgs, TRAIN, "seed", -1),
    (MBridgeTrainingCmdArgs, TRAIN, "seed", 2**63),
    (MBridgeRefitCmdArgs, REFIT, "iterations", "5"),
    (MBridgeRefitCmdArgs, REFIT, "seed", 2**64),
    (MBridgeRefitCmdArgs, REFIT, "timeout_s", 0),
    (MBridgeRefitCmdArgs, REFIT, "timeout_s", 10**9),
    (MBridgeRefitCmdArgs, REFIT, "timeout_s", False),
    (MBridgeRefitCmdArgs, REFIT, "coalesce_mib", 1.5),
]


@pytest.mark.parametrize(("model", "base", "key", "value"), BAD)
def test_no_coercion_and_bounded_values(model, base, key, value) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate({**base, key: value})
    assert key in str(info.value)


@pytest.mark.parametrize(("model", "base", "key", "value"), [
    (MBridgeTrainingCmdArgs, TRAIN, "tp", 8),
    (MBridgeTrainingCmdArgs, TRAIN, "seed", 2**63 - 1),
    (MBridgeRefitCmdArgs, REFIT, "timeout_s", 7 * 24 * 3600),
])
def test_good_values(model, base, key, value) -> None:
    assert getattr(model.model_validate({**base, key: value}), key) == value


@pytest.mark.parametrize("value", ["--help", "-c", "relative/py", "python3; touch x", "/opt/my venv/python", ""])
def test_an_interpreter_that_srun_would_read_as_an_option_or_a_shell_would_split_is_refused(value: str) -> None:
    """`python` follows srun's options on the job's line: "--help" made srun print its usage and exit 0 (a job that
    "succeeded" without running anything)."""
    from cloudai_mbridge.workloads.dispatch_bench.test_definition import MBridgeDispatchBenchCmdArgs
    from cloudai_mbridge.workloads.refit.test_definition import MBridgeRefitCmdArgs

    for model, base in ((MBridgeRefitCmdArgs, {"model": "kimi_k2_proxy", "src": {"tp": 2}, "dst": {"ep": 2}}),
                        (MBridgeDispatchBenchCmdArgs, {"model": "kimi_k2_proxy", "dispatcher": "alltoall"})):
        with pytest.raises(ValueError, match="is not an interpreter"):
            model(**base, python=value)
        assert model(**base, python="/usr/bin/python3").python == "/usr/bin/python3"
