"""Run the refit payload as N local processes (the way torchrun would) and read its output back.

For the CPU tests and the CPU benchmark; jobs use torchrun/srun instead. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_KV = re.compile(r"(\w+)=(\S+)")


@dataclass
class LocalRun:
    returncodes: list[int]
    stdout: list[str]
    stderr: list[str]
    parsed: dict = field(default_factory=dict)

    @property
    def out(self) -> str:
        """Rank 0's stdout, where the payload writes its results."""
        return self.stdout[0]

    def failed_ranks(self) -> list[int]:
        return [r for r, code in enumerate(self.returncodes) if code != 0]

    def describe(self) -> str:
        parts = [f"return codes {self.returncodes}"]
        for rank, (out, err) in enumerate(zip(self.stdout, self.stderr, strict=True)):
            parts.append(f"--- rank {rank} stdout ---\n{out[-3000:]}\n--- rank {rank} stderr ---\n{err[-3000:]}")
        return "\n".join(parts)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse(stdout: str) -> dict:
    """The machine-readable lines of rank 0's output."""
    parsed: dict = {"iters": [], "summary": {}}
    for line in stdout.splitlines():
        if line.startswith(("REFIT_CONFIG ", "REFIT_RESULT ")):
            key, _, payload = line.partition(" ")
            parsed[key.lower()] = json.loads(payload)
        elif line.startswith("REFIT_ITER "):
            parsed["iters"].append(float(dict(_KV.findall(line))["time_ms"]))
        elif line.startswith(("REFIT_STATS ", "REFIT_VERIFY ", "REFIT_ERROR ")):
            key = line.split(" ", 1)[0].lower()
            parsed[key] = dict(_KV.findall(line))
        elif line.endswith((" ms", " GB/s")) and ":" in line:
            label, _, value = line.partition(":")
            parsed["summary"][label.strip()] = value.split()[0]
    return parsed


def config_text(config: dict) -> str:
    """The exact text `launch` hands the ranks. A run folder that keeps the config must write this text: the payload
    logs the sha256 of the file it read, and the metrics call any other bytes an edit after the run."""
    return json.dumps(config)


def launch(
    config: dict,
    world_size: int,
    *,
    timeout: float = 300,
    module: str = "cloudai_mbridge.payload.refit",
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> LocalRun:
    """Start `world_size` ranks of the payload on this host with torchrun-style variables and wait for all."""
    with tempfile.TemporaryDirectory(prefix="refit-") as tmp:
        cfg_path = Path(tmp) / "refit.json"
        cfg_path.write_text(config_text(config), encoding="utf-8")
        port = free_port()
        procs = []
        for rank in range(world_size):
            rank_env = {
                **os.environ, **(env or {}),
                "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                # One thread per rank: the ranks share the machine's cores.
                "OMP_NUM_THREADS": "1",
            }
            procs.append(subprocess.Popen(
                [sys.executable, "-m", module, "--config", str(cfg_path), *extra_args],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace",
                env=rank_env, cwd=cwd,
            ))
        outputs = []
        deadline = time.monotonic() + timeout  # one deadline for all ranks: a hung rank cannot wait N timeouts
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for other in procs:
                    other.kill()
                outputs.append(proc.communicate())
        run = LocalRun([p.returncode for p in procs], [o[0] for o in outputs], [o[1] for o in outputs])
    run.parsed = parse(run.out)
    return run
