"""Issue 44 item 8: every GPU entry script of benchmarks/ (gpu_*.py, gpu_*.sh), started on a host without a GPU, or
without the pieces it needs, with arguments that would otherwise start real work, stops at once: a non-zero exit
status (3, or the code the script documents), exactly one non-empty line naming what is missing and what to do, no
Python traceback, and nothing written, neither outside its temp folder nor inside it. Their CPU modes (--help,
--dry-run, --list) still run.

Each script runs as a subprocess in a temp working folder, with HOME and TMPDIR there, the test's Python first on
PATH (a CPU-only torch here) and no bytecode written. "Outside" is checked where these scripts would write: every
/tmp/<name> their sources name, the checkout's .gpu_stack/ and .whl/, and new entries at the checkout's top and in
benchmarks/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
TIMEOUT_S = 120

# benchmarks/gpu_* files that are no GPU entry script, and why
NOT_ENTRY = {
    "gpu_bridge_env.sh": "sourced by gpu_ab_bridge_run.sh and gpu_dispatch_bench_run.sh",
    "gpu_common.sh": "sourced: the shared checks",
    "gpu_pieces.sh": "sourced by the *_prepare.sh scripts",
    "gpu_stack_prepare.sh": "runs where PyPI is; needs no GPU (it downloads)",
    "gpu_cloudai_prepare.sh": "runs where PyPI is; needs no GPU (it downloads)",
    "gpu_uccl_prepare.sh": "runs where PyPI is; needs no GPU (it downloads)",
    "gpu_hybridep_prepare.sh": "runs where the DeepEP repository is; needs no GPU",
}

# entry script -> (arguments that would start real work, the exit status it documents for "cannot run here")
RUNS: dict[str, tuple[list[str], int]] = {
    "gpu_dispatch_bench.py": (["--out", "{tmp}/out", "--gpus", "2"], 3),
    "gpu_dispatcher_ab.py": (["--out", "{tmp}/out", "--gpus", "2", "--iters", "8"], 2),
    "gpu_fullwidth_memory.py": (["--out", "{tmp}/out"], 3),
    "gpu_fullwidth_parallel.py": (["--out", "{tmp}/out"], 3),
    "gpu_memory.py": (["--out", "{tmp}/out", "--configs", "k2_1gpu"], 3),
    "gpu_refit_nccl.py": (["--out", "{tmp}/out"], 3),
    "gpu_runtime_memory.py": (["--gpus", "1"], 3),
    "gpu_sft.py": (["--out", "{tmp}/out"], 3),
    "gpu_ab_bridge_run.sh": (["120", "--arms", "alltoall", "ncclep", "--iters", "20"], 3),
    "gpu_bridge_run.sh": (["bridge-0.6.2", "smoke"], 3),
    "gpu_cloudai_ab_run.sh": ([], 3),
    "gpu_dispatch_bench_run.sh": (["120"], 3),
    "gpu_dispatcher_run.sh": (["120"], 3),
    "gpu_hybridep_build.sh": ([], 3),
    "gpu_refit_run.sh": (["120"], 3),
    "gpu_run.sh": (["120"], 3),
    "gpu_setup.sh": (["bridge-0.6.2"], 3),
}
PY = sorted(s for s in RUNS if s.endswith(".py"))
SH = sorted(s for s in RUNS if s.endswith(".sh"))

# With a stand-in nvidia-smi (8 GPUs) the shell scripts get past the GPU check: the next missing piece, named
MISSING_PIECE = {
    "gpu_ab_bridge_run.sh": "bridge-0.6.2 stack is missing",
    "gpu_bridge_run.sh": "bridge-0.6.2 stack is missing",
    "gpu_cloudai_ab_run.sh": "bridge-0.6.2 stack is missing",
    "gpu_dispatch_bench_run.sh": "bridge-0.6.2 stack is missing",
    "gpu_dispatcher_run.sh": "megatron_core-0.17.1-*.whl not found",
    "gpu_hybridep_build.sh": "reason=no_source",
    "gpu_refit_run.sh": "no Megatron-Core",
    "gpu_run.sh": "megatron_core-0.17.1-*.whl not found",
    "gpu_setup.sh": "no parts of bridge-0.6.2 te-2.20.2",
}

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None,
                                reason="a host with nvidia-smi: these tests are for hosts without a GPU")


def _watched() -> list[Path]:
    """Where the GPU scripts write outside their working folder: every /tmp/<name> their sources name, and the
    checkout's own folders for wheels and stack parts."""
    names: set[str] = set()
    for f in [*BENCH.glob("gpu_*"), BENCH / "provenance.py"]:
        if f.is_file():
            names.update(n.rstrip(".") for n in re.findall(r"/tmp/([A-Za-z0-9_.-]+)", f.read_text()))
    return [*(Path("/tmp") / n for n in sorted(names)), ROOT / ".gpu_stack", ROOT / ".whl"]


def _snapshot(paths: list[Path]) -> dict[str, object]:
    snap: dict[str, object] = {}
    for path in paths:
        if not path.exists():
            snap[str(path)] = None
        elif path.is_file():
            st = path.stat()
            snap[str(path)] = (st.st_size, st.st_mtime_ns)
        else:
            entries = [(str(path), path.stat().st_mtime_ns)]
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for n in [*dirnames, *filenames]:
                    p = Path(dirpath) / n
                    try:
                        entries.append((str(p), p.lstat().st_mtime_ns))
                    except OSError:
                        entries.append((str(p), None))
                if len(entries) > 20000:
                    break
            snap[str(path)] = entries
    for top in (ROOT, BENCH):  # a file or folder a script would leave in the checkout
        snap[f"names of {top}"] = sorted(p.name for p in top.iterdir() if p.name != "__pycache__")
    return snap


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, object]:
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for d in (work, home, tmp):
        d.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MBRIDGE_", "PYTHON", "CUDA_", "NCCL_", "HYBRIDEP_", "REFIT_", "AB_"))
           and k not in ("OUT", "VIRTUAL_ENV", "PIP_CONSTRAINT")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(home),
               TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1")
    return {"root": tmp_path, "work": work, "env": env}


def _run(script: str, args: list[str], box: dict[str, object]) -> subprocess.CompletedProcess[str]:
    root, work, env = box["root"], box["work"], box["env"]
    argv = [a.replace("{tmp}", str(root)) for a in args]
    cmd = [sys.executable, str(BENCH / script)] if script.endswith(".py") else ["bash", str(BENCH / script)]
    return subprocess.run([*cmd, *argv], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, text=True, timeout=TIMEOUT_S, check=False)


def _stops_in_one_line(script: str, args: list[str], box: dict[str, object], needle: str | re.Pattern[str]) -> str:
    before = _snapshot(_watched())
    res = _run(script, args, box)
    after = _snapshot(_watched())
    out = res.stdout
    lines = [line for line in out.splitlines() if line.strip()]
    assert "Traceback" not in out, out
    assert res.returncode == RUNS[script][1], f"{script}: exit {res.returncode}, expected {RUNS[script][1]}:\n{out}"
    assert len(lines) == 1, f"{script}: {len(lines)} lines, expected one:\n{out}"
    found = re.search(needle, lines[0]) if isinstance(needle, re.Pattern) else needle in lines[0]
    assert found, f"{script}: the line does not name {needle!r}: {lines[0]}"
    changed = [k for k in before if before[k] != after[k]]
    assert not changed, f"{script} wrote outside its temp folder: {changed}"
    left = [str(p) for d in (box["work"], box["root"] / "home") for p in d.rglob("*")]
    assert not left and not (box["root"] / "out").exists(), f"{script} wrote before it stopped: {left}"
    return lines[0]


def test_every_gpu_entry_script_is_run_here() -> None:
    scripts = {p.name for p in BENCH.glob("gpu_*") if p.suffix in (".py", ".sh")}
    assert scripts - set(NOT_ENTRY) == set(RUNS), "a benchmarks/gpu_* script is neither in RUNS nor in NOT_ENTRY"
    assert set(MISSING_PIECE) == set(SH)


@pytest.mark.parametrize("script", [*PY, *SH])
def test_without_a_gpu_it_says_so_in_one_line(script: str, sandbox: dict[str, object]) -> None:
    line = _stops_in_one_line(script, RUNS[script][0], sandbox, re.compile(r"GPU|nvidia-smi"))
    assert script in line or line.startswith("MBRIDGE_HYBRIDEP built=no"), line


@pytest.mark.parametrize("script", PY)
def test_without_torch_it_says_so_in_one_line(script: str, sandbox: dict[str, object]) -> None:
    hide = sandbox["root"] / "tmp" / "hide"
    (hide / "torch").mkdir(parents=True)
    (hide / "torch" / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    sandbox["env"]["PYTHONPATH"] = str(hide)
    _stops_in_one_line(script, RUNS[script][0], sandbox, "torch")
    shutil.rmtree(hide)


@pytest.mark.skipif(any(p.exists() for p in (Path("/tmp/mbridge_stack"), ROOT / ".gpu_stack", ROOT / ".whl")),
                    reason="a stack or wheels are installed or prepared here: the scripts would start real work")
@pytest.mark.parametrize("script", SH)
def test_with_a_gpu_but_without_its_pieces_it_names_them_in_one_line(script: str, sandbox: dict[str, object]) -> None:
    fake = sandbox["root"] / "tmp" / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: NVIDIA H100 (UUID: GPU-$i)\"; done\n")
    smi.chmod(0o755)
    hide = sandbox["root"] / "tmp" / "hide"  # megatron without megatron.core: this Python's own stays out of it
    (hide / "megatron").mkdir(parents=True)
    (hide / "megatron" / "__init__.py").write_text("")
    env = sandbox["env"]
    env.update(PATH=f"{fake}{os.pathsep}{env['PATH']}", PYTHONPATH=str(hide))
    _stops_in_one_line(script, RUNS[script][0], sandbox, MISSING_PIECE[script])
    shutil.rmtree(fake)
    shutil.rmtree(hide)


CPU_MODES = [
    ("gpu_fullwidth_memory.py", ["--list"], "settings"),
    ("gpu_fullwidth_parallel.py", ["--list"], "settings"),
    ("gpu_refit_nccl.py", ["--dry-run", "--out", "{tmp}/out"], "p2p plan"),
    ("gpu_memory.py", ["--dry-run", "--out", "{tmp}/out", "--configs", "k2_1gpu"], "k2_1gpu: world 1"),
    ("gpu_dispatch_bench.py", ["--dry-run", "--gpus", "2", "--out", "{tmp}/out", "--models", "deepseek_v3_proxy",
                               "--mbs", "1"], "grid:"),
    *((s, ["--help"], "usage") for s in SH),
]


@pytest.mark.parametrize(("script", "args", "needle"), CPU_MODES, ids=lambda v: v if isinstance(v, str) else None)
def test_its_cpu_modes_still_run(script: str, args: list[str], needle: str, sandbox: dict[str, object]) -> None:
    res = _run(script, args, sandbox)
    assert res.returncode == 0, res.stdout
    assert "Traceback" not in res.stdout and needle in res.stdout, res.stdout


# --- issue 43 item 4: SIGPIPE under pipefail, and CloudAI's bundle without what the image has ---
# A reader that stops before the end of its input (head, grep -q / -m, sed Nq) ends the writer with SIGPIPE once the
# input outgrows a pipe's buffer; under `set -o pipefail` the pipeline then fails (141), which killed
# gpu_cloudai_prepare.sh after a complete bundle (`ls -S -l ... | head -5`, 2 x H200, 2026-11-29) and turns a found
# `nm ... | grep -q` match into "not found". Read to the end instead: sed -n '1,Np', awk 'NR <= N', grep ... >/dev/null.
EARLY_EXIT = re.compile(r"\|\s*(head\b|grep\s+(-[A-Za-z]*[qm]|--quiet|--max-count)|sed\s+(-n\s+)?'?\d+q)")


def _shell_sources() -> dict[str, str]:
    """Every shell script of the checkout (tracked, not a recorded run's copy) and the job scripts the plugin writes
    (their Python sources), by path."""
    tracked = subprocess.run(["git", "ls-files", "*.sh", "scripts/*"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    found = {p: (ROOT / p).read_text(errors="replace") for p in tracked
             if not p.startswith("benchmarks/results/") and (ROOT / p).is_file()}
    for p in sorted((ROOT / "cloudai_mbridge").rglob("*.py")):
        text = p.read_text()
        if "pipefail" in text:
            found[str(p.relative_to(ROOT))] = text
    return found


def test_no_pipeline_stops_reading_early_under_pipefail() -> None:
    sources = _shell_sources()
    assert "benchmarks/gpu_cloudai_prepare.sh" in sources and "cloudai_mbridge/launch/slurm.py" in sources
    bad = [f"{path}:{n}: {line.strip()}" for path, text in sources.items() if "pipefail" in text
           for n, line in enumerate(text.splitlines(), 1)
           if EARLY_EXIT.search(line.split(" # ")[0]) and not line.lstrip().startswith("#")]
    assert not bad, "a reader that stops early under pipefail (SIGPIPE, 141):\n" + "\n".join(bad)


def test_the_early_exit_pattern_is_the_one_that_fails() -> None:
    """What the check above forbids fails under pipefail, and what it asks for instead does not."""
    listing = "seq 1 200000"  # far more than a pipe holds
    for reader, rc in (("head -5", 141), ("grep -q 7", 141), ("sed -n '1,5p'", 0), ("awk 'NR <= 5'", 0),
                       ("grep 7 >/dev/null", 0)):
        proc = subprocess.run(["bash", "-c", f"set -o pipefail; {listing} | {reader} >/dev/null; echo $?"],
                              capture_output=True, text=True, check=True)
        assert proc.stdout.strip() == str(rc), (reader, proc.stdout)
        assert bool(EARLY_EXIT.search(f"x | {reader}")) == (rc != 0), reader


def test_cloudai_bundle_leaves_out_what_the_image_has_and_exits_0(tmp_path: Path) -> None:
    """gpu_cloudai_prepare.sh with pip's download replaced by a stand-in that writes what PyPI gave on 2026-11-29 (and
    enough wheels that its closing listing outgrows a pipe): exit 0, the image's packages left out and named in
    FROM_IMAGE.txt with CloudAI's own range, the stack's left out, the rest split into p0 / p1."""
    import zipfile

    root = tmp_path / "checkout"
    (root / "benchmarks" / "gpu_stack").mkdir(parents=True)
    for name in ("gpu_cloudai_prepare.sh", "gpu_stack/bridge-0.6.2.txt", "gpu_stack/image-cuda-has.txt"):
        shutil.copy(BENCH / name, root / "benchmarks" / name)
    wheel = tmp_path / "cloudai-1.6.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("cloudai-1.6.0.dist-info/METADATA",
                    "Name: cloudai\nRequires-Dist: bokeh~=3.8\nRequires-Dist: pandas~=2.3\n"
                    "Requires-Dist: toml~=0.10.2\nRequires-Dist: numpy>=2.4.6; python_version >= \"3.14\"\n"
                    "Requires-Dist: ruff~=0.15; extra == \"dev\"\n")
    pip = tmp_path / "fakepython"
    pip.write_text("#!/bin/bash\n# stands in for `python -m pip download ... -d DEST`; anything else: the real one\n"
                   f"if [ \"$2\" != pip ]; then exec {sys.executable} \"$@\"; fi\n"
                   "while [ \"$1\" != -d ]; do shift; done; d=$2\n"
                   "for w in bokeh-3.9.0 matplotlib-3.10.8 grpcio-1.80.0 pillow-13.0.0 tensorboard-2.21.0 "
                   "pydantic-2.14.4 numpy-2.3.5 toml-0.10.2 tbparse-0.0.9; do\n"
                   "  head -c 2000 /dev/zero >\"$d/$w-py3-none-any.whl\"; done\n"
                   "for i in $(seq 1 400); do : >\"$d/padding_package_with_long_name_$i-1.0-py3-none-any.whl\"; done\n")
    pip.chmod(0o755)
    env = {**os.environ, "PYTHON": str(pip), "CLOUDAI_WHEEL": str(wheel)}
    proc = subprocess.run(["bash", "benchmarks/gpu_cloudai_prepare.sh"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    dest = root / ".whl" / "cloudai"
    kept = sorted(p.name.split("-")[0] for p in dest.glob("p*/*.whl"))
    # bokeh is carried: the H200 image lacks it (2 x H200, 2026-11-29: the run stopped on "this image lacks ... bokeh")
    assert {"cloudai", "toml", "tbparse", "bokeh"} <= set(kept)
    assert not {"matplotlib", "grpcio", "pillow", "tensorboard", "pydantic", "numpy"} & set(kept)
    image = (dest / "FROM_IMAGE.txt").read_text().splitlines()
    assert sorted(image) == ["grpcio", "matplotlib >=3.7", "numpy", "pillow", "tensorboard"]
    assert "left out for the image: 5; largest:" in proc.stdout
    carry = subprocess.run(["bash", "benchmarks/gpu_cloudai_prepare.sh"], cwd=root, capture_output=True, text=True,
                           env={**env, "MBRIDGE_IMAGE_PACKAGES": "/dev/null"}, timeout=TIMEOUT_S)
    assert carry.returncode == 0, carry.stdout[-2000:] + carry.stderr[-2000:]
    assert {"bokeh", "matplotlib", "grpcio"} <= {p.name.split("-")[0] for p in dest.glob("p*/*.whl")}
    assert (dest / "FROM_IMAGE.txt").read_text().split() == ["numpy"]  # the host image's, always (datasets imports it)
