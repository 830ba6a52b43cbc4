"""gpu_hybridep_build.sh's compiler pick (issue 43): a library that carries a libstdc++ of its own is recognised from
the library itself, whichever compiler made it, and the pick refuses such a compiler with one line naming it.

On a 2 x H200 host the probe passed /opt/gcc's g++ and the hybrid_ep_cpp it built died in HybridEPBuffer() inside
std::ostream::_M_insert<long>; the script now checks the built library and builds again with the next compiler. These
tests run the script's own shell functions on this machine's g++ (no GPU, no DeepEP).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_hybridep_build.sh"
GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None or shutil.which("nm") is None, reason="needs g++ and nm (binutils)")

SOURCE = ('#include <sstream>\n#include <string>\n'
          'std::string f(long v) { std::ostringstream s; s << v; return s.str(); }\n')


def functions() -> str:
    """The script's shell functions, as the script defines them (not a copy)."""
    text = SCRIPT.read_text()
    out = []
    for name in ("so_carries_libstdcxx", "cxx_links_libstdcxx_dynamically", "pick_compiler"):
        start = text.index(f"{name}() {{")
        end = text.index("\n}\n", start) + 3
        out.append(text[start:end])
    return "\n".join(out)


def bash(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", functions() + "\n" + script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def build(tmp_path: Path, name: str, *flags: str) -> Path:
    src = tmp_path / "f.cpp"
    src.write_text(SOURCE)
    so = tmp_path / name
    subprocess.run([GXX, "-shared", "-fPIC", "-O1", *flags, "-o", str(so), str(src)], check=True, timeout=120)
    return so


def test_a_library_with_its_own_libstdcxx_is_recognised_and_a_normal_one_is_not(tmp_path: Path) -> None:
    dynamic = build(tmp_path, "dyn.so")
    static = build(tmp_path, "static.so", "-static-libstdc++")
    hidden = build(tmp_path, "hidden.so", "-static-libstdc++", "-Wl,--exclude-libs,ALL")  # nothing exported
    rc = {so.name: bash(f'so_carries_libstdcxx "{so}"', tmp_path).returncode for so in (dynamic, static, hidden)}
    assert rc == {"dyn.so": 1, "static.so": 0, "hidden.so": 0}, rc


def test_the_pick_refuses_a_compiler_that_bundles_libstdcxx_with_a_line_naming_it(tmp_path: Path) -> None:
    """A g++ that links libstdc++ statically (a wrapper adding -static-libstdc++, as the GPU image's /opt/gcc does in
    effect) comes first on the PATH: the pick says it is not used and takes the system's g++."""
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec {GXX} -static-libstdc++ "$@"\n')
    wrapper.chmod(0o755)
    proc = bash('unset CXX CC; pick_compiler; echo "PICKED=$CXX"', tmp_path,
                PATH=f"{wrapper_dir}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    assert f"compiler g++ ({wrapper}) links libstdc++ statically into shared libraries: not used" in proc.stdout
    picked = proc.stdout.split("PICKED=")[-1].strip()
    assert picked and picked != str(wrapper), proc.stdout
    assert f"MBRIDGE_HYBRIDEP compiler CXX={picked}" in proc.stdout


def test_a_compiler_already_refused_by_the_built_library_is_skipped_on_the_second_build(tmp_path: Path) -> None:
    real = os.path.realpath(GXX)
    proc = bash(f'unset CXX CC; pick_compiler "{real}"; echo "PICKED=${{CXX:-none}}"', tmp_path)
    assert proc.stdout.split("PICKED=")[-1].strip() != real, proc.stdout
