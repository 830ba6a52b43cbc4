from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def fixture_bytes(*names: str) -> bytes:
    """Concatenation of fixture files, each ending in a newline unless it is the last one."""
    parts = [(FIXTURES / name).read_bytes() for name in names]
    return b"".join(p if p.endswith(b"\n") or i == len(parts) - 1 else p + b"\n" for i, p in enumerate(parts))


def make_run(
    root: Path,
    config: dict | None,
    ranks: dict[int, bytes | str] | None = None,
    stdout: bytes | str | None = None,
    stderr: bytes | str | None = None,
) -> Path:
    """A run folder as the generators write it: mbridge_config.json, logs/rank-<R>.log, stdout.txt, stderr.txt."""
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "mbridge_config.json").write_text(json.dumps(config))
    for rank, data in (ranks or {}).items():
        logs = root / "logs"
        logs.mkdir(exist_ok=True)
        (logs / f"rank-{rank}.log").write_bytes(data.encode() if isinstance(data, str) else data)
    for name, data in (("stdout.txt", stdout), ("stderr.txt", stderr)):
        if data is not None:
            (root / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def training_config(**overrides) -> dict:
    config = {
        "workload": "training",
        "tp": 1,
        "pp": 2,
        "ep": 1,
        "etp": 1,
        "cp": 1,
        "vp": 1,
        "mbs": 1,
        "gbs": 128,
        "seq_length": 4096,
        "dispatcher": "alltoall",
        "world_size": 2,
        "num_nodes": 1,
        "gpus_per_node": 2,
    }
    config.update(overrides)
    return config


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
