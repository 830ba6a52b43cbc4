"""The training payload's progress watchdog (payload/train/watchdog.py): a start that stops making progress prints
every thread's stack and one MBRIDGE_HANG line of its class into its rank log and ends with exit code 124, in a real
process whose main thread is stuck for good (as in a NCCL call); a start that keeps making progress is left alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cloudai_mbridge.catalog import get_gpu, get_model
from cloudai_mbridge.launch.training import training_config
from cloudai_mbridge.payload.train import config as tc
from cloudai_mbridge.payload.train import watchdog
from cloudai_mbridge.plan import TrainingPlan

ROOT = Path(__file__).resolve().parents[2]

# The payload's own stage calls and dispatcher wrapper around a dispatch that never returns (a stuck all-to-all).
STALL_AT_FIRST_DISPATCH = textwrap.dedent("""
    import threading
    from cloudai_mbridge.payload.train import watchdog

    class Dispatcher:
        def token_dispatch(self, hidden, probs):
            return stuck_in_token_dispatch()

    def stuck_in_token_dispatch():
        threading.Event().wait()  # never set: blocks like a collective whose peer never comes

    class Layer:
        token_dispatcher = Dispatcher()

    class Chunk:
        def modules(self):
            return [self, Layer()]

    watchdog.start(0.5, rank=1)
    watchdog.reach("model_built")
    chunk = Chunk()
    assert watchdog.watch_dispatch([chunk]) == 1
    chunk.modules()[1].token_dispatcher.token_dispatch("h", "p")
    print("MBRIDGE_UNREACHED", flush=True)
""")


def _run(code: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """One process whose stdout and stderr land in one log, as a rank log does."""
    return subprocess.run(code, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)


def test_a_stall_at_the_first_dispatch_is_reported_with_stacks_and_exit_124() -> None:
    proc = _run([sys.executable, "-c", STALL_AT_FIRST_DISPATCH])
    log = proc.stdout
    assert proc.returncode == watchdog.EXIT_HANG == 124, log
    stages = re.findall(r"MBRIDGE_STAGE stage=(\S+) rank=1 ", log)
    assert stages == ["init", "model_built", "first_dispatch"]
    hang = re.findall(r"^MBRIDGE_HANG class=(\S+) stage=(\S+) after_s=(\d+) rank=(\d+)", log, re.M)
    assert [(c, s, r) for c, s, _, r in hang] == [("first_dispatch", "first_dispatch", "1")]
    assert 0 <= int(hang[0][2]) <= 5  # 0.5 s without progress, as the thread saw it
    # every thread's Python stack, before the verdict line: the stuck frame and the watchdog's own thread
    stacks = log[log.index("MBRIDGE_HANG_STACKS rank=1"):log.index("MBRIDGE_HANG class=")]
    assert 'in stuck_in_token_dispatch' in stacks and "in token_dispatch" in stacks
    assert "Current thread" in stacks and stacks.count("Thread 0x") >= 1
    assert "MBRIDGE_UNREACHED" not in log


def _config(tmp_path: Path, hang_timeout_s: int | None) -> Path:
    plan = TrainingPlan(model=get_model("deepseek_v3_proxy"), gpu=get_gpu("h200"), num_nodes=1, gpus_per_node=1,
                        ep=1, gbs=8)
    cfg = training_config(plan, engine="mcore", data="mock", hf_model_id=None, checkpoint_dir=None, seed=1,
                          log_interval=1, output_dir=str(tmp_path), hang_timeout_s=hang_timeout_s)
    path = tmp_path / "mbridge_config.json"
    path.write_text(json.dumps(cfg))
    return path


# The real entry point (config read, rank resolved, watchdog started) with an engine that never returns.
MAIN_WITH_A_STUCK_ENGINE = textwrap.dedent("""
    import sys, threading
    from cloudai_mbridge.payload.train import bridge, mcore
    from cloudai_mbridge.payload.train.__main__ import main
    bridge.available = lambda: False
    def stuck_in_init(cfg, dist):
        threading.Event().wait()
    mcore.run = stuck_in_init
    sys.exit(main(["--config", sys.argv[1]]))
""")


def test_the_entry_point_reports_a_hang_at_init_with_the_configured_timeout(tmp_path: Path) -> None:
    proc = _run([sys.executable, "-c", MAIN_WITH_A_STUCK_ENGINE, str(_config(tmp_path, 1))],
                env={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert proc.returncode == 124, proc.stdout
    hang = re.search(r"^MBRIDGE_HANG class=init stage=init after_s=(\d+) rank=0 timeout_s=1$", proc.stdout, re.M)
    # after_s is the time it measured without progress: the timeout, or more where a loaded host ran its check late
    # (the fresh-clone CI saw after_s=2)
    assert hang and 1 <= int(hang.group(1)) <= 30, proc.stdout[-2000:]
    # the main thread's stack, wherever init was when a second was up (on a loaded host: still importing torch)
    # the stacks are written (where init was when 1 s ran out depends on the machine's load: imports, or main)
    assert re.search(r'File ".*", line \d+ in ', proc.stdout), proc.stdout


def test_progress_keeps_the_watchdog_quiet_and_its_absence_fires_it() -> None:
    now = [0.0]
    fired: list[int] = []
    lines: list[str] = []

    class Out:
        def write(self, s: str) -> None:
            lines.append(s)

        def flush(self) -> None:
            pass

    w = watchdog.Watchdog(10, rank=3, out=Out(), err=Out(), exit_fn=fired.append, clock=lambda: now[0])
    for step in range(1, 30):  # an iteration every 9 s: never 10 s without progress
        now[0] += 9.0
        w.iteration_done(step)
        assert not w.check()
    assert w.stage == "iteration_29" and not fired
    now[0] += 10.0
    assert w.check() and fired == [124]
    assert any(line.startswith("MBRIDGE_HANG class=later stage=iteration_29 after_s=10 rank=3") for line in lines)
    assert [line for line in lines if line.startswith("MBRIDGE_STAGE")] == [
        "MBRIDGE_STAGE stage=iteration_1 rank=3 t_s=9.0"]  # only the first iteration is a stage line


def test_zero_turns_it_off() -> None:
    w = watchdog.Watchdog(0, exit_fn=lambda code: pytest.fail("fired"), clock=lambda: 1e9)
    assert not w.check()


@pytest.mark.parametrize("bad", [-1, 1.5, "60", True, None, 7 * 24 * 3600 + 1])
def test_a_bad_hang_timeout_is_a_config_error_naming_it(tmp_path: Path, bad) -> None:
    cfg = json.loads(_config(tmp_path, None).read_text())
    assert "hang_timeout_s" not in cfg  # unset: the payload's default
    assert tc.check_config(cfg)["hang_timeout_s"] == watchdog.DEFAULT_HANG_TIMEOUT_S == 1200
    with pytest.raises(tc.ConfigError, match=re.escape(f"hang_timeout_s = {bad!r} must be an integer in [0, ")):
        tc.check_config({**cfg, "hang_timeout_s": bad})
