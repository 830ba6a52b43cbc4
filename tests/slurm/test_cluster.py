"""End to end on a real single-host Slurm (tests/slurm/start.sh): jobs, sacct, and CloudAI's SlurmSystem against it.

The tests that need the cluster are marked ``slurm``. Their session fixture starts the cluster (installing the Debian
packages when missing, as root) and stops it at the end, unless MBRIDGE_SLURM_KEEP=1 or it was already running
before the session.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from slurm_support import HERE, SlurmCluster, run, sacct_final, sbatch, wait_for

SYSTEM_TOML = HERE.parent.parent / "conf" / "system" / "local_slurm.toml"


@pytest.mark.slurm
def test_pmix_job_4_tasks_on_2_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    assert len(slurm_cluster.nodes) >= 2
    out = tmp_path / "ranks.out"
    script = tmp_path / "ranks.sh"
    script.write_text(
        "#!/bin/bash\n"
        "srun --mpi=pmix bash -c 'echo rank=$SLURM_PROCID of=$SLURM_NTASKS node=$SLURMD_NODENAME pmix=$PMIX_RANK'\n"
    )
    job = sbatch("-N", "2", "--ntasks-per-node=2", "--time=1", "-o", str(out), "-D", str(tmp_path), str(script))
    rows = sacct_final(job)
    assert run("sacct", "-j", str(job), "-n", "-P", "-o", "State").split() == ["COMPLETED"] * len(rows)
    assert [r[0] for r in rows] == [str(job), f"{job}.batch", f"{job}.0"]
    lines = sorted(out.read_text().split("\n"))
    lines = [line for line in lines if line]
    assert len(lines) == 4, out.read_text()
    ranks = {}
    for line in lines:
        fields = dict(field.split("=", 1) for field in line.split())
        assert fields["of"] == "4"
        assert fields["pmix"] == fields["rank"], "PMIx server did not give the task its rank"
        ranks[int(fields["rank"])] = fields["node"]
    assert sorted(ranks) == [0, 1, 2, 3]
    # Block distribution: 2 tasks on each of the 2 nodes.
    assert sorted(ranks.values()) == sorted(slurm_cluster.nodes[:2] * 2)


@pytest.mark.slurm
def test_failing_job_is_failed_with_its_exit_code(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = sbatch("-N", "1", "-n", "1", "--time=1", "-o", str(tmp_path / "fail.out"), "--wrap", "exit 3")
    sacct_final(job)
    assert run("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State,ExitCode").strip() == "FAILED|3:0"


def _parse_system():
    import cloudai  # noqa: F401  (fills CloudAI's registry)
    from cloudai.parser import Parser
    from cloudai.systems.slurm import SlurmSystem

    system = Parser(SYSTEM_TOML).parse_system(SYSTEM_TOML)
    assert isinstance(system, SlurmSystem)
    return system


def test_system_toml_parses_with_cloudai() -> None:
    """Needs no cluster, so not marked slurm: it runs with the ordinary tests too."""
    system = _parse_system()
    assert system.name == "local-slurm"
    assert system.scheduler == "slurm"
    assert system.default_partition == "local"
    assert [p.name for p in system.partitions] == ["local"]
    assert system.mpi == "pmix"
    assert system.ntasks_per_node == 2
    assert system.gpus_per_node is None
    assert system.monitor_interval == 1
    assert system.cache_docker_images_locally is False
    assert not system.install_path.is_absolute() and not system.output_path.is_absolute()


@pytest.mark.slurm
def test_cloudai_slurm_system_queries_the_cluster(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    from cloudai.systems.slurm import SlurmJob, SlurmNodeState
    from cloudai.util import CommandShell

    class ReapingShell(CommandShell):
        """CloudAI's shell, keeping its processes: SlurmSystem.scancel never waits for its own (a ResourceWarning)."""

        def __init__(self) -> None:
            super().__init__()
            self.procs: list[subprocess.Popen] = []

        def execute(self, command: str) -> subprocess.Popen:
            proc = super().execute(command)
            self.procs.append(proc)
            return proc

    system = _parse_system()
    system.cmd_shell = shell = ReapingShell()
    system.update()
    (part,) = system.partitions
    assert sorted(n.name for n in part.slurm_nodes) == slurm_cluster.nodes
    assert all(n.state == SlurmNodeState.IDLE for n in part.slurm_nodes)
    assert [n.name for n in system.groups["local"]["all"] if n.state == SlurmNodeState.IDLE]
    assert system.supports_gpu_directives is (os.environ.get("MBRIDGE_SLURM_GPUS", "0") != "0")
    # Node specs as a test scenario gives them ("partition:group:count") resolve against the live states.
    assert system.get_nodes_by_spec(1, ["local:all:2"]) == (2, ["node1", "node2"])

    # A job that CloudAI watches the way its runner does (sacct through SlurmSystem), from running to completed.
    # The job ends when the test says so (a gate file), not after a fixed sleep that a slow accounting daemon can
    # miss: sacct may record the start late under load.
    gate = tmp_path / "go"
    job_id = sbatch("-N", "1", "-n", "1", "--time=2", "-o", str(tmp_path / "sleep.out"), "--wrap",
                    f"while [ ! -e {gate} ]; do sleep 0.2; done")
    job = SlurmJob(test_run=None, id=job_id)  # type: ignore[arg-type]  (the status calls read only the id)
    try:
        wait_for("CloudAI to see the job running", lambda: system.is_job_running(job), timeout=60)
        assert not system.is_job_completed(job)
    finally:
        gate.touch()
    wait_for("CloudAI to see the job completed", lambda: system.is_job_completed(job), timeout=60)
    steps = wait_for(
        "sacct to show the finished batch step",
        lambda: [s for s in system.get_job_status(job) if s.state == "COMPLETED" and s.step_id == "batch"],
        timeout=30,
    )
    assert steps[0].job_id == job_id and steps[0].exit_code == "0:0"
    system.complete_job(job)

    # And one that CloudAI kills: scancel through SlurmSystem.kill, seen as completed (CANCELLED).
    job_id = sbatch("-N", "1", "-n", "1", "--time=1", "-o", str(tmp_path / "kill.out"), "--wrap", "sleep 300")
    job = SlurmJob(test_run=None, id=job_id)  # type: ignore[arg-type]
    wait_for("the job to start", lambda: system.is_job_running(job), timeout=30)
    system.kill(job)
    for proc in shell.procs:
        proc.communicate(timeout=30)
    wait_for("CloudAI to see the cancelled job completed", lambda: system.is_job_completed(job), timeout=30)
    assert sacct_final(job_id)[0][1].startswith("CANCELLED")
