"""Issue 46, items 2 and 3: any locale, closed or unencodable standard streams, memory limits, symlink loops.

Each ends in one line and a documented exit status (cli/exits.py), every file whole or absent:
- under ``LC_ALL=C`` without Python's UTF-8 mode, ISO-8859-1 or EUC-JP, a UTF-8 TOML in a folder with a UTF-8 name
  is read, and the files of the run (test-run.toml) are written as UTF-8 (the CLI starts itself again in UTF-8
  mode, cli/startup.py); where it cannot, one line names the locale and the fix, exit 3;
- stdout and/or stderr closed (``>&-``): preflight.csv and .html are written; what was printed to a closed stream
  is one line on the other (exit 1, as coreutils do), never an AttributeError traceback;
- ``PYTHONIOENCODING=ascii``: a character it lacks is shown escaped, never a "--- Logging error ---" traceback;
- ``ulimit -v`` below what the command needs (200 MiB): one line naming the limit and the fix, exit 3; a
  MemoryError later in the command likewise;
- a symlink loop named as the scenario, the system, the output folder or verify-configs' folder: one line, exit 2.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CONF

pytestmark = pytest.mark.slow  # spawns the CLI

CLI = [sys.executable, "-m", "cloudai_mbridge"]
SYSTEM = "slurm_b300_efa.toml"
TEXT = "für café ü 日本"  # Latin-1 and CJK: neither ASCII, ISO-8859-1 nor EUC-JP holds all of it


@pytest.fixture(scope="module")
def conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """conf/ under a folder whose name is UTF-8, with a test whose description is UTF-8 text."""
    root = tmp_path_factory.mktemp("loc") / "café-ü"
    for sub in ("system", "test", "test_scenario"):
        (root / sub).mkdir(parents=True)
    shutil.copy(CONF / "system" / SYSTEM, root / "system" / SYSTEM)
    text = (CONF / "test" / "dsv3_sft.toml").read_text(encoding="utf-8")
    lines = [f'description = "{TEXT}"' if line.startswith("description") else line for line in text.splitlines()]
    (root / "test" / "dsv3_sft.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.copy(CONF / "test_scenario" / "dsv3_sft.toml", root / "test_scenario" / "dsv3_sft.toml")
    return root


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONUTF8", "PYTHONIOENCODING"))}
    env.pop("LANG", None)
    env.update(extra)
    return env


def _args(conf: Path, verb: str, *extra: str) -> list[str]:
    return [*CLI, verb, "--system-config", str(conf / "system" / SYSTEM),
            "--test-scenario", str(conf / "test_scenario" / "dsv3_sft.toml"), *extra]


def _run(args: list[str], cwd: Path, env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, timeout=300, **kw)


def _one_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace")
    assert "Traceback" not in text and "Logging error" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]



def _locale(name: str, tmp: Path) -> dict[str, str]:
    """The environment for locale ``name`` ('C' without UTF-8 mode, or one built here with localedef)."""
    if name == "C":
        return _env(LC_ALL="C", PYTHONUTF8="0")
    source, charmap = name.split(".")
    locpath = tmp / "locales"
    if not (locpath / name).is_dir():
        if not shutil.which("localedef"):
            pytest.skip("no localedef to build the locale with")
        locpath.mkdir(exist_ok=True)
        made = subprocess.run(["localedef", "-i", source, "-f", charmap, str(locpath / name)], capture_output=True)
        if not (locpath / name).is_dir():
            pytest.skip(f"localedef could not build {name}: {made.stderr.decode(errors='replace')[-200:]}")
    env = _env(LOCPATH=str(locpath), LC_ALL=name)
    probe = subprocess.run([sys.executable, "-c", "import locale; print(locale.getpreferredencoding(False))"],
                           env=env, capture_output=True, text=True)
    if probe.stdout.strip().lower().replace("_", "-") in ("utf-8", "utf8"):
        pytest.skip(f"{name} did not take effect here")
    return env


@pytest.mark.parametrize("name", ["C", "en_US.ISO-8859-1", "ja_JP.EUC-JP"])
def test_utf8_toml_and_path_in_any_locale(conf: Path, tmp_path: Path, name: str) -> None:
    env = _locale(name, tmp_path)
    out = tmp_path / "out-ü"
    proc = _run(_args(conf, "dry-run", "--output-dir", str(out)), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-2000:]
    dumps = list(out.rglob("test-run.toml"))
    assert dumps, "the run's test-run.toml was not written"
    text = dumps[0].read_bytes().decode("utf-8")  # UTF-8, not the locale's encoding
    assert f'description = "{TEXT}"' in text


def test_locale_refusal_names_the_locale_and_the_fix(conf: Path, tmp_path: Path) -> None:
    """Where the CLI cannot start itself again in UTF-8 mode (marked here as already tried), one line, exit 3."""
    env = _locale("C", tmp_path)
    env["_CLOUDAI_MBRIDGE_REEXEC"] = "1"
    out = tmp_path / "out"
    proc = _run(_args(conf, "dry-run", "--output-dir", str(out)), cwd=tmp_path, env=env)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3
    assert "LC_ALL=C" in line and "LC_ALL=C.UTF-8" in line and "PYTHONUTF8=1" in line
    assert not out.exists()


def _closing(*fds: int):
    def close() -> None:
        for fd in fds:
            os.close(fd)
    return close


@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2)], ids=["stdout", "stderr", "both"])
def test_closed_standard_streams(conf: Path, tmp_path: Path, closed: tuple[int, ...]) -> None:
    out = tmp_path / "pf"
    proc = subprocess.run(_args(conf, "preflight", "--output-dir", str(out)), cwd=tmp_path, env=_env(),
                          capture_output=True, preexec_fn=_closing(*closed), timeout=300)
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "AttributeError" not in err, err
    assert sorted(p.name for p in out.iterdir()) == ["preflight.csv", "preflight.html"]
    assert (out / "preflight.csv").read_text(encoding="utf-8").count("\n") >= 2  # whole: header and the point
    if 1 in closed:  # the table was printed to a closed stdout: said on stderr when it is open, never exit 0
        assert proc.returncode == 1
        if 2 not in closed:
            assert "standard output was closed" in _one_line(proc.stderr)
    else:  # nothing was printed to the closed stderr: nothing lost
        assert proc.returncode == 0
        assert b"preflight dsv3_sft" in proc.stdout


def test_ascii_stream_encoding(conf: Path, tmp_path: Path) -> None:
    """preflight's "wrote <path>" names a folder with non-ASCII characters on stdout through PYTHONIOENCODING=ascii
    (stdout's errors are strict there, stderr's are not)."""
    out = tmp_path / "pf-café"
    proc = _run(_args(conf, "preflight", "--output-dir", str(out)), cwd=tmp_path, env=_env(PYTHONIOENCODING="ascii"))
    err = proc.stderr.decode("utf-8", "replace")
    assert "Logging error" not in err and "Traceback" not in err, err
    assert proc.returncode == 0, err
    assert "pf-caf\\xe9/preflight.csv" in proc.stdout.decode("ascii")  # escaped, nothing but ASCII on the stream
    assert (out / "preflight.csv").is_file()


def _address_space(limit: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return set_limit


def test_address_space_limit_too_low(conf: Path, tmp_path: Path) -> None:
    out = tmp_path / "pf"
    proc = _run(_args(conf, "preflight", "--output-dir", str(out)), cwd=tmp_path, env=_env(),
                preexec_fn=_address_space(200 << 20))
    line = _one_line(proc.stderr)
    assert proc.returncode == 3
    assert "ulimit -v" in line and "200 MiB" in line and "Fix: raise it" in line
    assert not out.exists()


@pytest.mark.parametrize("megabytes", [40, 120])
def test_data_segment_limit(conf: Path, tmp_path: Path, megabytes: int) -> None:
    """ulimit -d too low to start (40 MiB: OpenBLAS would end the process with its own line; 120 MiB: the
    libraries run out while they load): one line naming that limit and the fix, exit 3."""
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (megabytes << 20, megabytes << 20))

    out = tmp_path / "pf"
    proc = _run(_args(conf, "preflight", "--output-dir", str(out)), cwd=tmp_path, env=_env(), preexec_fn=set_limit)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3
    assert "ulimit -d" in line and f"{megabytes} MiB" in line and "Fix: raise it" in line
    assert not out.exists()


def test_memory_error_during_the_command(conf: Path, tmp_path: Path) -> None:
    """A MemoryError where the command works (here: while it checks the points) is one line, exit 3."""
    code = ("import sys, cloudai_mbridge.cli.preflight as p\n"
            "def boom(*a, **k):\n    raise MemoryError\n"
            "p.scenario_check = boom\n"
            "from cloudai_mbridge.cli import main\nsys.argv[0] = 'cloudai-mbridge'\nmain()\n")
    out = tmp_path / "pf"
    args = [sys.executable, "-c", code, *_args(conf, "preflight", "--output-dir", str(out))[len(CLI):]]
    proc = _run(args, cwd=tmp_path, env=_env())
    line = _one_line(proc.stderr)
    assert proc.returncode == 3
    assert "ran out of memory" in line and "Fix:" in line
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("where", ["--test-scenario", "--system-config", "--output-dir", "verify-configs"])
def test_symlink_loop(conf: Path, tmp_path: Path, where: str) -> None:
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop.name)
    if where == "verify-configs":
        args = [*CLI, "verify-configs", str(loop)]
    else:
        args = _args(conf, "dry-run", "--output-dir", str(tmp_path / "out"))
        args[args.index(where) + 1] = str(loop)
    proc = _run(args, cwd=tmp_path, env=_env())
    line = _one_line(proc.stderr)
    assert proc.returncode == 2
    assert "symbolic link loop" in line and str(loop) in line and "Fix:" in line


@pytest.mark.parametrize("verb", ["dry-run", "verify-configs"])
def test_symlink_loop_among_the_test_files(conf: Path, tmp_path: Path, verb: str) -> None:
    """A loop named *.toml in the tests folder: named in one line (it stopped the listing of that folder before,
    leaving the files after it unchecked)."""
    copy = tmp_path / "conf"
    shutil.copytree(conf, copy)
    loop = copy / "test" / "loop.toml"
    loop.symlink_to(loop.name)
    if verb == "verify-configs":
        args = [*CLI, "verify-configs", str(copy)]
    else:
        args = _args(copy, "dry-run", "--output-dir", str(tmp_path / "out"))
    proc = _run(args, cwd=tmp_path, env=_env())
    line = _one_line(proc.stderr)
    assert proc.returncode == 2
    assert "symbolic link loop" in line and f"{loop}:" in line and "Fix:" in line
    assert not (tmp_path / "out").exists()
