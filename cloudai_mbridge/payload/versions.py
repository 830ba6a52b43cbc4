"""What a run ran with, printed once by rank 0 so that a report can say it later (reports/provenance.py reads it).

``MBRIDGE_VERSIONS {json}``: date_utc (when the payload started), host (rank 0's node), python, torch, cuda (torch's
build), nccl (the libnccl.so mapped into the process, by its own ncclGetVersion; nccl_library: its path),
nccl_torch_build (torch.cuda.nccl.version(): torch's build-time NCCL, which is not the one loaded when another
libnccl.so.2 came first), machine (a digest of the UUIDs of the GPUs rank 0 sees), megatron_core, megatron_bridge,
transformer_engine; a package that is not installed is left out. The refit payload puts the same dict under
"versions" in its REFIT_CONFIG line. Stdlib only; torch is asked only when it is already imported or importable.
"""

from __future__ import annotations

import hashlib
import json
import platform
from datetime import datetime, timezone
from importlib import metadata

from . import nccl_runtime

TAG = "MBRIDGE_VERSIONS"
# (key, distribution names to try): the wheel's name differs between releases and builds.
DISTRIBUTIONS = (
    ("megatron_core", ("megatron-core", "megatron_core")),
    ("megatron_bridge", ("megatron-bridge", "megatron_bridge")),
    ("transformer_engine", ("transformer-engine", "transformer_engine", "transformer-engine-torch")),
)


def _dist_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # a broken install's metadata: unknown, not a crash of the run
            return None
    return None


def machine_id(torch) -> str | None:
    """``gpus-<16 hex>``: a digest of the sorted UUIDs of the GPUs this process sees, the identity of the machine.
    Hostnames do not tell lent GPU hosts apart (every one is "vm"), and an A/B that pools starts from two hosts
    measures the hosts (about 8 % apart on 4 x H100), not the arms (reports/ab_starts.py same_machine)."""
    try:
        found = sorted(str(getattr(torch.cuda.get_device_properties(i), "uuid", "") or "")
                       for i in range(torch.cuda.device_count()))
        if not found or not all(found):
            return None
        return "gpus-" + hashlib.sha256(",".join(found).encode()).hexdigest()[:16]
    except Exception:
        return None


def software_versions() -> dict[str, str]:
    out = {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
           "python": platform.python_version()}
    try:
        import torch

        out["torch"] = str(torch.__version__)
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            out["nccl_torch_build"] = ".".join(map(str, torch.cuda.nccl.version()))
            if machine := machine_id(torch):
                out["machine"] = machine
    except Exception:
        pass
    # The NCCL that serves this process, which torch.cuda.nccl.version() does not say (payload/nccl_runtime.py).
    nccl = nccl_runtime.loaded()
    if nccl.version is not None:
        out["nccl"] = nccl_runtime.text(nccl.version)
        out["nccl_library"] = str(nccl.path)
    elif "nccl_torch_build" in out:
        out["nccl"] = f"{out['nccl_torch_build']} (torch's build; the loaded library was not identified)"
    for key, names in DISTRIBUTIONS:
        if found := _dist_version(names):
            out[key] = found
    if "megatron_core" not in out:  # built from source, without wheel metadata: its package_info says
        try:
            from megatron.core import package_info

            out["megatron_core"] = str(package_info.__version__)
        except Exception:
            pass
    return out


def versions_line() -> str:
    return f"{TAG} {json.dumps(software_versions(), sort_keys=True)}"
