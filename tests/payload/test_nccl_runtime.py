"""payload/nccl_runtime.py: the NCCL a process really loaded (not torch's build-time one), and NCCL EP's bootstrap
needs checked before a model is built. A real shared library stands in for libnccl.so.2 (built here with the C
compiler, exporting ncclGetVersion as NCCL does), so the ctypes path runs for real; the nccl.h files are written with
the three #define lines NCCL's own header carries."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cloudai_mbridge.payload import nccl_runtime as nr


def fake_nccl(root: Path, code: int, version: tuple[int, int, int] | None = None) -> Path:
    """A pip-wheel-shaped NCCL: nvidia/nccl/lib/libnccl.so.2 answering ncclGetVersion with ``code``, and
    nvidia/nccl/include/nccl.h of ``version`` (None: no header)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    lib = root / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    src = root / "fake.c"
    src.write_text(f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libnccl.so.2"), str(src)], check=True)
    if version is not None:
        write_header(root / "nvidia" / "nccl" / "include", version)
    return lib / "libnccl.so.2"


def write_header(folder: Path, version: tuple[int, int, int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    major, minor, patch = version
    (folder / "nccl.h").write_text(f"#ifndef NCCL_H_\n#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                                   f"#define NCCL_PATCH {patch}\n#define NCCL_SUFFIX \"\"\n#endif\n")


def maps_with(path: Path | str) -> str:
    return ("7f0000000000-7f0000001000 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            f"7f1000000000-7f1000100000 r-xp 00000000 08:01 2 {path}\n")


@pytest.mark.parametrize(("code", "version"), [(23102, (2, 31, 2)), (23203, (2, 32, 3)), (22809, (2, 28, 9)),
                                               (2708, (2, 7, 8))])
def test_decode_matches_nccl_get_version_packing(code, version):
    assert nr.decode(code) == version


def test_the_loaded_library_is_read_from_the_process_maps_and_asked_its_version(tmp_path):
    lib = fake_nccl(tmp_path, 23203)
    found = nr.loaded(maps_with(lib))
    assert found.path == str(lib)
    assert found.version == (2, 32, 3)
    assert "2.32.3" in found.describe()
    assert nr.loaded("7f-7f r--p 0 0:0 0 /usr/lib/libc.so.6\n") == nr.LoadedNccl(None, None)


def test_ncclep_headers_are_pointed_at_the_wheels_own_include_folder(tmp_path):
    lib = fake_nccl(tmp_path, 23203, (2, 32, 3))
    env: dict[str, str] = {}
    done = nr.nccl_ep_headers(nr.loaded(maps_with(lib)), env)
    assert env["NCCL_EP_JIT_BUILD_INCLUDE_DIR"] == str(tmp_path / "nvidia" / "nccl" / "include")
    assert done == f"NCCL_EP_JIT_BUILD_INCLUDE_DIR={env['NCCL_EP_JIT_BUILD_INCLUDE_DIR']}"
    # a user's own choice is never replaced
    env = {"NCCL_HOME": "/opt/nccl"}
    assert nr.nccl_ep_headers(nr.loaded(maps_with(lib)), env) is None
    assert env == {"NCCL_HOME": "/opt/nccl"}


def test_headers_of_another_nccl_are_not_taken(tmp_path):
    lib = fake_nccl(tmp_path, 23203, (2, 31, 2))
    env: dict[str, str] = {}
    assert nr.nccl_ep_headers(nr.loaded(maps_with(lib)), env) is None
    assert env == {}


def _nvcc(tmp_path: Path) -> dict[str, str]:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return {"CUDA_HOME": str(tmp_path / "cuda"), "PATH": ""}


def test_what_the_hosts_hit_is_refused_before_the_model_is_built(tmp_path):
    """2026-11-27, 4 x H100: TE 2.20.2 with NCCL 2.31.2 preloaded, then with its headers given."""
    lib = fake_nccl(tmp_path, 23102, (2, 31, 2))
    nccl = nr.loaded(maps_with(lib))
    env = _nvcc(tmp_path)
    problems = nr.nccl_ep_problems(nccl, "2.20.2", env, (9, 0))
    assert any("runtime NCCL 2.31.2" in p and "older than 2.32.3" in p and "nvidia-nccl-cu13==2.32.3" in p
               for p in problems), problems
    assert any("NCCL_EP_JIT_BUILD_INCLUDE_DIR" in p and "no nccl.h" in p for p in problems), problems
    env["NCCL_EP_JIT_BUILD_INCLUDE_DIR"] = str(tmp_path / "nvidia" / "nccl" / "include")
    problems = nr.nccl_ep_problems(nccl, "2.20.2", env, (9, 0))
    assert len(problems) == 1 and "older than 2.32.3" in problems[0]


def test_a_matching_setup_passes_and_each_missing_piece_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(nr, "DEFAULT_NVCC", str(tmp_path / "no-nvcc"))
    lib = fake_nccl(tmp_path, 23203, (2, 32, 3))
    nccl = nr.loaded(maps_with(lib))
    env = {**_nvcc(tmp_path), "NCCL_HOME": str(tmp_path / "nvidia" / "nccl")}
    assert nr.nccl_ep_problems(nccl, "2.20.2", env, (9, 0)) == []
    assert nr.nccl_ep_problems(nccl, "2.20.2+cu13", env, (10, 0)) == []
    (only,) = nr.nccl_ep_problems(nccl, "2.20.2", env, (8, 0))
    assert "compute capability 8.0" in only and "SM 9.0" in only
    write_header(tmp_path / "other" / "include", (2, 30, 4))
    (only,) = nr.nccl_ep_problems(nccl, "2.20.2", {**env, "NCCL_HOME": str(tmp_path / "other")}, (9, 0))
    assert "nccl.h is NCCL 2.30.4" in only and "runtime is 2.32.3" in only
    (only,) = nr.nccl_ep_problems(nccl, "2.20.2", {**env, "CUDA_HOME": str(tmp_path / "none")}, (9, 0))
    assert "nvcc" in only
    unknown = nr.nccl_ep_problems(nr.LoadedNccl(None, None), "2.20.2", env, (9, 0))
    assert any("cannot be identified" in p for p in unknown)


def test_an_unknown_te_release_falls_back_to_tes_own_floor(tmp_path):
    lib = fake_nccl(tmp_path, 23100, (2, 31, 0))
    env = {**_nvcc(tmp_path), "NCCL_HOME": str(tmp_path / "nvidia" / "nccl")}
    assert nr.nccl_ep_problems(nr.loaded(maps_with(lib)), "2.99.0", env, (9, 0)) == []
    need, why = nr.required_nccl("2.99.0")
    assert need == (2, 30, 4) and "not known" in why


def test_versions_line_reports_the_loaded_nccl_not_torchs_build(tmp_path, monkeypatch):
    """MBRIDGE_VERSIONS' nccl: the library the process mapped (here: the fake one, dlopen'ed for real)."""
    from cloudai_mbridge.payload import versions

    lib = fake_nccl(tmp_path, 23203)
    monkeypatch.setattr(nr, "loaded_library", lambda maps=None: str(lib))
    out = versions.software_versions()
    assert out["nccl"] == "2.32.3"
    assert out["nccl_library"] == str(lib)


def test_this_process_without_nccl_reports_none():
    if "libnccl" in Path("/proc/self/maps").read_text():
        pytest.skip("this process has an NCCL mapped")
    assert nr.loaded() == nr.LoadedNccl(None, None)
