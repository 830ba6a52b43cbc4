"""The session-wide local Slurm cluster for every test under tests/slurm/."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from slurm_support import HERE, STATE, SlurmCluster, _ctld_running


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Start the cluster once per session (start.sh is idempotent) and stop it at the end.

    It is left running when MBRIDGE_SLURM_KEEP=1, or when it was already running before the session (someone started
    it on purpose). SLURM_CONF is set for the session, so the Slurm commands the tests and CloudAI run find it.
    """
    if os.geteuid() != 0:
        if os.environ.get("MBRIDGE_REQUIRE_SLURM") == "1":
            pytest.fail("MBRIDGE_REQUIRE_SLURM=1 but the local Slurm cluster needs root", pytrace=False)
        pytest.skip("the local Slurm cluster needs root (tests/slurm/start.sh)")
    was_running = _ctld_running()
    env = {**os.environ, "MBRIDGE_SLURM_STATE": str(STATE)}
    env.setdefault("MBRIDGE_SLURM_NODES", "2")
    started = time.monotonic()
    proc = subprocess.run([str(HERE / "start.sh")], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"tests/slurm/start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    print(f"\nslurm cluster ready in {time.monotonic() - started:.1f} s\n{proc.stderr}")
    conf = STATE / "etc" / "slurm.conf"
    assert f"export SLURM_CONF={conf}" in proc.stdout
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(conf))
    nodes = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "local", "-o", "%N"], capture_output=True, text=True, check=True
    ).stdout.split()
    try:
        yield SlurmCluster(conf=conf, nodes=sorted(set(nodes)))
    finally:
        mp.undo()
        if os.environ.get("MBRIDGE_SLURM_KEEP") != "1" and not was_running:
            subprocess.run([str(HERE / "stop.sh")], env=env, capture_output=True, text=True, timeout=300)
