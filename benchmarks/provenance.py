"""Where a GPU benchmark number came from (date, host, versions, GPUs, topology, the relevant environment), and
whether this host can take one at all: ``require_gpu`` stops a benchmarks/gpu_*.py script with one line and exit
status 3 (NO_GPU_EXIT) on a host without the CUDA GPUs or the Python packages it needs."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path


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


NO_GPU_EXIT = 3  # the exit status of a benchmarks/gpu_* script on a host without the GPUs or the pieces it needs
DOCS = "docs/gpu.md"


def gpu_problem(need: int = 1) -> str | None:
    """Why this host cannot run a benchmark that needs ``need`` CUDA GPUs (None when it can), in one line: torch
    missing, a CPU-only torch, no GPU visible, or too few. Never raises, never warns (a CUDA torch on a host without a
    driver warns at ``is_available()``)."""
    try:
        import torch
    except ImportError as exc:
        return f"torch needed, but it does not import ({exc}): install a CUDA build of torch and the GPU stack ({DOCS})"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:  # a broken driver or CUDA runtime: no usable GPU
            have = 0
    if have >= need:
        return None
    gpus = f"{need} CUDA GPU{'s' if need != 1 else ''} needed"
    if getattr(torch.version, "cuda", None) is None:
        return f"{gpus}, but torch {torch.__version__} is a CPU-only build: run it on a GPU host ({DOCS})"
    if have == 0:
        return f"{gpus}, but torch {torch.__version__} sees none (no NVIDIA driver or GPU here): run it on a GPU host"
    return f"{gpus}, but torch sees {have}: run it on a host with {need} GPUs"


def missing_modules(modules: Iterable[str]) -> str | None:
    """The modules of ``modules`` that this Python cannot find (None when it finds them all), in one line. Found, not
    imported: nothing runs and nothing is printed."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if not missing:
        return None
    them = "them" if len(missing) > 1 else "it"
    return f"{', '.join(missing)} needed, but this Python ({sys.executable}) cannot import {them}: install the GPU " \
           f"stack ({DOCS})"


def require_gpu(script: str, need: int = 1, modules: Iterable[str] = (), code: int = NO_GPU_EXIT) -> None:
    """Stop a GPU benchmark at once when this host cannot run it: one line on stderr, ``error: <script>: <why>``, and
    exit status ``code`` (NO_GPU_EXIT unless the script documents another). Called before anything is written."""
    problem = gpu_problem(need) or missing_modules(modules)
    if problem:
        print(f"error: {Path(script).name}: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(code)
