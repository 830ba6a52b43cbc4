"""Which NCCL a process really runs with, and whether NCCL EP can bootstrap on it. Stdlib only (ctypes).

``torch.cuda.nccl.version()`` answers with the NCCL torch was *built* against (2.28.9 for torch 2.11+cu130), even
when another ``libnccl.so.2`` was loaded first (``LD_PRELOAD``, a library path): seen on 4 x H100, 2026-11-27. The
library that serves the process is found in ``/proc/self/maps`` and asked through its own ``ncclGetVersion``.

NCCL EP (Transformer Engine's ``wheel_lib/libnccl_ep.so``) compiles its kernels with nvcc at bootstrap against the
``nccl.h`` of the NCCL it runs with, and refuses a runtime older than the NCCL it was built with. Its messages, seen on
the hosts with TE 2.20.2:

- ``Could not find NCCL headers matching runtime NCCL 2.31.2. Set NCCL_EP_JIT_BUILD_INCLUDE_DIR to the directory
  containing nccl.h or set NCCL_HOME.``
- ``NCCL EP: build NCCL 2.32.3 and runtime NCCL 2.31.2 are incompatible. Supported combinations are: (1) runtime NCCL
  equals build-time NCCL; (2) build-time NCCL >= 2.31 with a newer runtime; (3) build-time NCCL >= 2.30.5 and < 2.31
  with a newer runtime and NCCL_DEV_API_JIT enabled.``

The build NCCL is a compiled constant of ``libnccl_ep.so`` (not readable without disassembly), so it is kept here per
Transformer Engine release, from that message. TE's own Python check (``ep.py`` ``_MIN_NCCL_VERSION``, 2.30.4) is the
floor for a TE release not in the table. :func:`nccl_ep_problems` checks all of it before a model is built, and
:func:`nccl_ep_headers` points NCCL EP at the headers of the loaded NCCL when a pip wheel brought them.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

Version = tuple[int, int, int]

# Transformer Engine release -> the NCCL its libnccl_ep.so was built with (from the bootstrap's own message).
NCCL_EP_BUILD_NCCL: dict[str, Version] = {"2.20.2": (2, 32, 3)}
# transformer_engine/pytorch/ep.py _MIN_NCCL_VERSION (2.18.0 and 2.20.2).
NCCL_EP_MIN_NCCL: Version = (2, 30, 4)
NCCL_EP_MIN_SM: tuple[int, int] = (9, 0)
INCLUDE_VARS = ("NCCL_EP_JIT_BUILD_INCLUDE_DIR", "NCCL_HOME")
DEFAULT_NVCC = "/usr/local/cuda/bin/nvcc"
_MAPS_LIB = re.compile(r"\s(/\S*/libnccl\.so(?:\.\d+)*)$")
_HEADER = re.compile(r"^#define\s+NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)\s*$", re.MULTILINE)


def text(version: Version | None) -> str:
    return "unknown" if version is None else ".".join(map(str, version))


def decode(code: int) -> Version:
    """ncclGetVersion's integer: major*10000 + minor*100 + patch from 2.9 on, major*1000 + minor*100 + patch before."""
    if code >= 10000:
        return code // 10000, (code % 10000) // 100, code % 100
    return code // 1000, (code % 1000) // 100, code % 100


def loaded_library(maps: str | None = None) -> str | None:
    """The path of the libnccl.so mapped into this process (``maps``: /proc/self/maps' text, read when None)."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in maps.splitlines():
        m = _MAPS_LIB.search(line)
        if m:
            return m.group(1)
    return None


def library_version(path: str) -> Version | None:
    """``ncclGetVersion`` of the library at ``path`` (already loaded: dlopen hands back the same copy)."""
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return decode(code.value)


@dataclass(frozen=True)
class LoadedNccl:
    path: str | None
    version: Version | None

    def describe(self) -> str:
        return f"NCCL {text(self.version)} ({self.path or 'no libnccl.so mapped in this process'})"


def global_nccl(maps: str | None = None) -> LoadedNccl | None:
    """The ncclGetVersion the process's global symbol scope resolves to (what torch and NCCL EP bind to when several
    copies are mapped, e.g. LD_PRELOAD's and torch's own), with the mapped file that holds it."""
    try:
        fn = ctypes.CDLL(None).ncclGetVersion
        code = ctypes.c_int(0)
        if fn(ctypes.byref(code)) != 0:
            return None
        addr = ctypes.cast(fn, ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return None
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            maps = ""
    path = None
    for line in maps.splitlines():
        parts = line.split()
        lo, _, hi = parts[0].partition("-") if parts else ("", "", "")
        try:
            if len(parts) >= 6 and int(lo, 16) <= addr < int(hi, 16):
                path = parts[-1]
                break
        except ValueError:
            continue
    return LoadedNccl(path, decode(code.value))


def loaded(maps: str | None = None) -> LoadedNccl:
    found = global_nccl(maps) if maps is None else None
    if found is not None:
        return found
    path = loaded_library(maps)
    return LoadedNccl(path, library_version(path) if path else None)


def header_version(include_dir: str | Path) -> Version | None:
    """NCCL_MAJOR / NCCL_MINOR / NCCL_PATCH of ``<include_dir>/nccl.h``; None when absent or unreadable."""
    try:
        found = dict(_HEADER.findall((Path(include_dir) / "nccl.h").read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return None
    try:
        return int(found["MAJOR"]), int(found["MINOR"]), int(found["PATCH"])
    except (KeyError, ValueError):
        return None


def wheel_include_dir(library: str | None) -> Path | None:
    """``nvidia/nccl/include`` beside a pip wheel's ``nvidia/nccl/lib/libnccl.so.2``."""
    if not library:
        return None
    lib = Path(library).parent
    include = lib.parent / "include"
    return include if lib.name == "lib" and (include / "nccl.h").is_file() else None


def include_dir_from_env(env: dict[str, str]) -> tuple[str, Path] | None:
    """Where NCCL EP looks for nccl.h: NCCL_EP_JIT_BUILD_INCLUDE_DIR, else $NCCL_HOME/include."""
    if env.get("NCCL_EP_JIT_BUILD_INCLUDE_DIR"):
        return "NCCL_EP_JIT_BUILD_INCLUDE_DIR", Path(env["NCCL_EP_JIT_BUILD_INCLUDE_DIR"])
    if env.get("NCCL_HOME"):
        return "NCCL_HOME", Path(env["NCCL_HOME"]) / "include"
    return None


def nccl_ep_headers(nccl: LoadedNccl, env: dict[str, str]) -> str | None:
    """When neither variable is set and the loaded NCCL came from a pip wheel that carries its headers, set
    NCCL_EP_JIT_BUILD_INCLUDE_DIR in ``env`` to them; returns what was done (None: nothing)."""
    if include_dir_from_env(env) is not None:
        return None
    include = wheel_include_dir(nccl.path)
    if include is None or header_version(include) != nccl.version:
        return None
    env["NCCL_EP_JIT_BUILD_INCLUDE_DIR"] = str(include)
    return f"NCCL_EP_JIT_BUILD_INCLUDE_DIR={include}"


def nvcc_path(env: dict[str, str]) -> str | None:
    """The nvcc NCCL EP's JIT would run: NCCL_EP_JIT_NVCC, $CUDA_HOME/bin/nvcc, nvcc on PATH, /usr/local/cuda."""
    if env.get("NCCL_EP_JIT_NVCC"):
        return env["NCCL_EP_JIT_NVCC"] if os.access(env["NCCL_EP_JIT_NVCC"], os.X_OK) else None
    candidates = []
    if env.get("CUDA_HOME"):
        candidates.append(str(Path(env["CUDA_HOME"]) / "bin" / "nvcc"))
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if on_path:
        candidates.append(on_path)
    candidates.append(DEFAULT_NVCC)
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def required_nccl(te_version: str) -> tuple[Version, str]:
    """The oldest runtime NCCL NCCL EP of this Transformer Engine takes, and where that bound comes from."""
    base = te_version.split("+")[0]
    if base in NCCL_EP_BUILD_NCCL:
        return NCCL_EP_BUILD_NCCL[base], f"the NCCL Transformer Engine {base}'s libnccl_ep.so was built with"
    return NCCL_EP_MIN_NCCL, f"Transformer Engine's ep.py minimum (build NCCL of TE {te_version or '?'} not known)"


def nccl_ep_problems(nccl: LoadedNccl, te_version: str, env: dict[str, str],
                     capability: tuple[int, int] | None) -> list[str]:
    """What would stop NCCL EP's bootstrap, one sentence each naming the value and the fix (empty: nothing seen)."""
    problems = []
    need, why = required_nccl(te_version)
    if nccl.version is None:
        problems.append(f"the NCCL this process loaded cannot be identified ({nccl.describe()}); NCCL EP needs NCCL "
                        f">= {text(need)} ({why})")
    elif nccl.version < need:
        problems.append(
            f"runtime NCCL {text(nccl.version)} ({nccl.path}) is older than {text(need)}, {why}; load a newer "
            f"libnccl.so.2 first (e.g. pip's nvidia-nccl-cu13=={text(need)}: LD_PRELOAD=<site>/nvidia/nccl/lib/"
            "libnccl.so.2)"
        )
    source = include_dir_from_env(env)
    if source is None:
        problems.append(
            f"no nccl.h for NCCL EP's kernel build: set NCCL_EP_JIT_BUILD_INCLUDE_DIR to the include folder of NCCL "
            f"{text(nccl.version)} (or NCCL_HOME to its root); a pip nvidia-nccl wheel has it in nvidia/nccl/include"
        )
    else:
        var, folder = source
        found = header_version(folder)
        if found is None:
            problems.append(f"{var} = {env[var]}: no readable nccl.h in {folder}")
        elif nccl.version is not None and found != nccl.version:
            problems.append(f"{var} = {env[var]}: {folder}/nccl.h is NCCL {text(found)}, the runtime is "
                            f"{text(nccl.version)}; point it at the headers of the NCCL that is loaded")
    if nvcc_path(env) is None:
        problems.append("NCCL EP compiles its kernels with nvcc at bootstrap and none was found (NCCL_EP_JIT_NVCC, "
                        "$CUDA_HOME/bin, PATH, /usr/local/cuda/bin); install the CUDA toolkit's nvcc or set "
                        "NCCL_EP_JIT_NVCC")
    if capability is not None and capability < NCCL_EP_MIN_SM:
        problems.append(f"compute capability {capability[0]}.{capability[1]}: NCCL EP needs SM 9.0 or newer")
    return problems
