"""benchmarks/gpu_dispatcher_ab.py run_point on this CPU host, through the real payload (issue 43): the rank logs are
written into the run folder as the ranks print (a start killed from outside still leaves them; on 2 x H200 the hung
start left none), each carries the payload's stage lines, the payload config carries the A/B's watchdog limit, and a
start that fails at once is a failure of its own kind, not a hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

import gpu_dispatcher_ab as ab  # benchmarks/ is on pytest's pythonpath


def test_a_start_writes_its_rank_logs_into_the_run_folder(tmp_path: Path) -> None:
    args = ab.parse_args(["--out", str(tmp_path), "--gpus", "2", "--gpu", "h200", "--arms", "alltoall", "--mbs", "1",
                          "--overlap", "off", "--iters", "5", "--warmup", "1", "--timeout-s", "120",
                          "--deepep-impl", "uccl"])
    (point,) = ab.build_grid(args)
    row = ab.run_point(point, args, {}, 120)
    folder = Path(row["run_folder"])
    assert json.loads((folder / "mbridge_config.json").read_text())["hang_timeout_s"] == ab.HANG_TIMEOUT_S == 120
    assert not row["timed_out"]
    for rank in (0, 1):
        log = (folder / "logs" / f"rank-{rank}.log").read_text()
        assert f"MBRIDGE_STAGE stage=init rank={rank} " in log
    numbers, _ = ab.measure(folder, args.warmup)
    # no GPU here: the mcore engine fails at torch.cuda.set_device, a crash with its traceback, not a hang
    assert numbers["status"] == "failed" and not ab.hung({**row, **numbers}), numbers["failure"]
