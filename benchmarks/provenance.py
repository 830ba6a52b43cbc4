"""Where a GPU benchmark number came from (date, host, versions, GPUs, topology, the relevant environment), and
whether this host can take one at all."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone


def provenance(argv: list[str]) -> dict:
    info = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
            "python": platform.python_version(), "command": " ".join(["python3", *argv])}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda,
                    nccl=".".join(map(str, torch.cuda.nccl.version())),
                    gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
    except Exception as exc:
        info["torch_error"] = repr(exc)
    try:
        from megatron.core import package_info

        info["megatron_core"] = package_info.__version__
    except Exception as exc:
        info["megatron_core_error"] = repr(exc)
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False).stdout.strip()
        info["gpu_uuids"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True, timeout=30,
            check=False).stdout.split()
        info["topology"] = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30,
                                          check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        info["nvidia_smi_error"] = repr(exc)
    prefixes = ("NCCL_", "TORCH_SYMM", "NVSHMEM_", "PYTORCH_CUDA")
    info["env"] = {k: os.environ[k] for k in sorted(os.environ) if k.startswith(prefixes)}
    return info


def gpu_problem(need: int) -> str | None:
    """Why this host cannot run a benchmark that needs ``need`` CUDA GPUs (None when it can)."""
    try:
        import torch
    except ImportError as exc:
        return f"torch does not import ({exc})"
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return None if have >= need else f"{need} CUDA GPU(s) needed, torch sees {have}: run this on a GPU host"
