"""Issue 32, robustness of the command line itself: a full standard output, a signal while CloudAI is imported,
a tests folder that is the whole disk, invisible characters in names, an absurd time limit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CONF, ROOT, dry_run, reap, run_cli

LOCAL = CONF / "system" / "local_slurm.toml"
SMOKE = CONF / "test_scenario" / "refit_cpu_smoke.toml"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_dry_run_into_a_full_standard_output_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(tmp_path / "debug.log"), "dry-run",
             "--system-config", str(LOCAL), "--test-scenario", str(SMOKE), "--output-dir", str(tmp_path / "r")],
            cwd=tmp_path, env=_env(), stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr
    assert len(lines) == 1 and "could not write to standard output" in lines[0] and "[ENOSPC]" in lines[0], lines


def _catches_sighup(pid: int) -> bool:
    """Whether the process has a handler for SIGHUP (the last one interrupts.install sets), from /proc's SigCgt."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    found = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)", status, re.M)
    return bool(found and int(found.group(1), 16) & 1)  # bit 0: signal 1, SIGHUP


@pytest.mark.parametrize("signum", [2, 15], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.3, 0.9])
def test_a_signal_while_cloudai_is_imported_is_one_line_not_a_traceback(tmp_path: Path, signum: int,
                                                                        delay: float) -> None:
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(tmp_path / "debug.log"), "dry-run",
         "--system-config", str(LOCAL), "--test-scenario", str(SMOKE), "--output-dir", str(tmp_path / "r")],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the handlers are installed first thing (cli/__init__.py); before that the interpreter itself starts (its
        # site import), which a loaded machine can stretch past the delay: count the delay from the handlers
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and not _catches_sighup(proc.pid):
            time.sleep(0.005)
        time.sleep(delay)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 128 + signum, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "stopped by SIG" in out


def test_tests_dir_of_the_whole_disk_is_refused_at_once(tmp_path: Path) -> None:
    import time

    res = dry_run(LOCAL, SMOKE, tmp_path, "--tests-dir", "/")
    assert res.returncode == 2, res.output[-2000:]
    assert "--tests-dir / holds no .toml file" in res.output and "Fix: name the folder" in res.output
    assert not res.output_dir.exists()
    start = time.monotonic()
    proc = run_cli("verify-configs", "/", cwd=tmp_path, timeout=120)
    elapsed = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "/ holds more than 20,000 files and folders" in out, out[-2000:]
    assert elapsed < 60 and "Traceback" not in out


def test_a_large_folder_of_configs_is_still_read(tmp_path: Path) -> None:
    """The bound is on entries looked at, far above a real conf/: the shipped conf/ with 2,000 unrelated files."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    extra = conf / "notes"
    extra.mkdir()
    for i in range(2000):
        (extra / f"n{i}.txt").write_text("x")
    proc = run_cli("verify-configs", str(conf / "test_scenario"), cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def test_a_test_name_with_a_zero_width_space_is_refused_showing_the_character(tmp_path: Path) -> None:
    """A test file names its test 't\\u200b', the scenario asks for 't': CloudAI said "Test 't' is not defined",
    which shows no difference. The refusal names the file and shows the character as its escape."""
    import shutil

    shutil.copytree(CONF / "test", tmp_path / "conf" / "test")
    (tmp_path / "conf" / "test_scenario").mkdir()
    test_file = tmp_path / "conf" / "test" / "zw.toml"
    text = (CONF / "test" / "refit_cpu_smoke.toml").read_text()
    test_file.write_text(text.replace('name = "refit_cpu_smoke"', 'name = "t\u200b"', 1))
    scenario = tmp_path / "conf" / "test_scenario" / "zw.toml"
    scenario.write_text((CONF / "test_scenario" / "refit_cpu_smoke.toml").read_text()
                        .replace('test_name = "refit_cpu_smoke"', 'test_name = "t"'))
    res = dry_run(LOCAL, scenario, tmp_path)
    assert res.returncode == 2, res.output[-2000:]
    assert f"{test_file}: test name = 't\\u200b' holds a character that does not show (U+200B ZERO WIDTH SPACE" \
        in res.output, res.output[-2000:]
    assert "is not defined" not in res.output and not res.output_dir.exists()


@pytest.mark.parametrize("limit", ["0:99999999999999999999", "99999999999999999999d"])
def test_a_time_limit_too_large_for_any_duration_is_refused_naming_the_field(tmp_path: Path, limit: str) -> None:
    import shutil

    shutil.copytree(CONF / "test", tmp_path / "conf" / "test")
    (tmp_path / "conf" / "test_scenario").mkdir()
    scenario = tmp_path / "conf" / "test_scenario" / "tl.toml"
    text = SMOKE.read_text()
    assert 'time_limit = "00:10:00"' in text
    scenario.write_text(text.replace('time_limit = "00:10:00"', f'time_limit = "{limit}"'))
    for verb in ("dry-run", "preflight"):
        proc = run_cli(verb, "--system-config", str(LOCAL), "--test-scenario", str(scenario), "--output-dir",
                       str(tmp_path / verb), cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, f"{verb}: {out[-2000:]}"
        assert f"time_limit = '{limit}' holds a number too large for any duration. Fix:" in out, out[-2000:]
        assert "unexpected" not in out and not (tmp_path / verb).exists()


def test_a_sweep_past_the_limit_says_what_it_will_spend_before_the_first_point() -> None:
    """A 10^6-point dry-run grew past 1.4 GB with no word. Past LARGE_SWEEP points dry-run and run say, before
    anything is written: the count, the time at the measured rate, and the command that checks the same points
    without writing jobs. CloudAI's grid is the product of every swept list, summed over the scenario's tests."""
    from types import SimpleNamespace

    from cloudai_mbridge.cli.session import LARGE_SWEEP, large_sweep_warning

    def tr(**space: list) -> SimpleNamespace:
        return SimpleNamespace(is_dse_job=bool(space), param_space=space)

    million = [tr(**{f"f{i}": list(range(10)) for i in range(6)})]
    text = large_sweep_warning("dry-run", million)
    assert text is not None and "1,000,000 points" in text and "about 305.6 h" in text
    assert "cloudai-mbridge preflight" in text and "Ctrl-C" in text
    assert large_sweep_warning("run", [tr(a=list(range(LARGE_SWEEP)))]) is None  # at the limit: quiet
    # a test without a sweep counts as one point
    assert large_sweep_warning("run", [tr(a=list(range(LARGE_SWEEP))), tr()]) is not None
    assert large_sweep_warning("dry-run", [tr(), tr(a=[1, 2])]) is None


def test_a_signal_python_swallows_in_a_callback_still_stops_the_command_quietly(tmp_path: Path) -> None:
    """A signal that lands in a callback whose exceptions Python ignores (a weakref callback of the import locks,
    a __del__) printed "Exception ignored in ..." with a traceback and was lost: the command ran on. Now it is
    remembered and delivered at the next checkpoint, without the traceback."""
    code = (
        "from cloudai_mbridge import interrupts\n"
        "interrupts.install()\n"
        "class Dropped:\n"
        "    def __del__(self):\n"
        "        raise interrupts.Interrupted(15)\n"
        "Dropped()\n"
        "print('ran on')\n"
        "try:\n"
        "    interrupts.raise_swallowed()\n"
        "except interrupts.Interrupted as e:\n"
        "    raise SystemExit(e.code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + 15, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# A real signal sent by the process to itself at one chosen place of a real dry-run (the console entry point, as
# `python -m cloudai_mbridge` calls it): where a timed signal lands only now and then, this lands every time.
_SELF_SIGNAL = """
import atexit, os, signal, sys, time
SIG = signal.SIGTERM

def send():
    os.kill(os.getpid(), SIG)  # the handler runs at the next Python instruction, the sleep's return at the latest
    time.sleep(0.05)

def swallowing(fn):
    def wrapped(*a, **k):
        try:
            send()
        except:  # noqa: E722  as a library's bare except does (uuid.getnode, fsspec's version lookup)
            pass
        return fn(*a, **k)
    return wrapped

def before(fn):
    def wrapped(*a, **k):
        send()
        return fn(*a, **k)
    return wrapped

where = sys.argv.pop(1)
if where == "atexit":
    atexit.register(lambda: (send(), time.sleep(1)))  # registered first: the last one Python runs
import cloudai_mbridge.registration as registration, cloudai_mbridge.redact as redact
import cloudai_mbridge.cli.field_check as field_check
if where == "start-swallowed":  # CloudAI imported, the plugin registering itself
    registration.register = swallowing(registration.register)
elif where == "inputs-swallowed":  # the inputs read, before the sweep
    field_check.typo_problems = swallowing(field_check.typo_problems)
elif where == "last-flush":  # the command's work done, its output flushed
    redact.output_errors = before(redact.output_errors)
sys.argv[0] = "cloudai-mbridge"
from cloudai_mbridge.cli import main
main()
"""


@pytest.mark.parametrize(("where", "said"), [
    ("start-swallowed", "stopped by SIGTERM while starting"),
    ("inputs-swallowed", "stopped by SIGTERM after 0 of 4 point(s)"),
    ("last-flush", "SIGTERM arrived while the command was finishing"),
])
def test_a_signal_is_never_lost_or_a_traceback_wherever_it_lands(tmp_path: Path, where: str, said: str) -> None:
    """A signal's exception lands wherever the main thread is. A library's bare ``except:`` swallowed it and the
    command ran to its end with exit 0 (starting, or reading the inputs); one during the last flush escaped as a
    traceback. Each now stops the command (or, once its work is done, sets its exit status) with one line."""
    proc = subprocess.run(
        [sys.executable, "-c", _SELF_SIGNAL, where, "--log-file", str(tmp_path / "debug.log"), "dry-run",
         "--system-config", str(LOCAL), "--test-scenario", str(SMOKE), "--output-dir", str(tmp_path / "r")],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "Traceback" not in out and "Exception ignored" not in out, out[-3000:]
    assert said in out, out[-3000:]
    if where != "last-flush":  # stopped before any point: no job was written
        assert not list((tmp_path / "r").rglob("cloudai_sbatch_script.sh")), out[-3000:]


def test_a_signal_while_python_exits_ends_the_process_as_killed_not_exit_0(tmp_path: Path) -> None:
    """After the exit status is taken the handlers are the system's again: a signal while Python runs its exit
    functions ended the process with exit 0 (Python swallowed the Interrupted there); now it is killed by it."""
    proc = subprocess.run(
        [sys.executable, "-c", _SELF_SIGNAL, "atexit", "--log-file", str(tmp_path / "debug.log"), "dry-run",
         "--system-config", str(LOCAL), "--test-scenario", str(SMOKE), "--output-dir", str(tmp_path / "r")],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == -signal.SIGTERM, out[-3000:]  # a shell sees 143
    assert "Traceback" not in out and "Exception ignored" not in out, out[-3000:]
    assert "dry-run: 4 point(s): 4 job(s) written" in out  # the work itself was done


def test_a_terminal_control_string_from_a_toml_reaches_the_console_as_text(tmp_path: Path) -> None:
    """CloudAI prints a test's description; an OSC 52 string there wrote the terminal's clipboard (OSC 0 its title).
    The console shows it as text; colours (CSI) still pass."""
    from helpers import write_case

    text = (CONF / "test" / "refit_cpu_smoke.toml").read_text()
    toml_value = r'"refit \u001b]52;c;ZWNobyBwd25lZA==\u0007 smoke \u009d0;title\u0007"'
    text = re.sub(r"(?m)^description = .*$", lambda _: f"description = {toml_value}", text)
    _, scenario = write_case(tmp_path, text, 'name = "case"\n[[Tests]]\nid = "case"\ntest_name = '
                             '"refit_cpu_smoke"\nnum_nodes = 2\ntime_limit = "00:10:00"\n')
    res = dry_run(LOCAL, scenario, tmp_path)
    assert res.returncode == 0, res.output[-2000:]
    assert "\\x1b]52" in res.output and "\x1b]" not in res.output and "\x9d" not in res.output


def test_a_log_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Opening a FIFO for writing waits for a reader: every command hung on --log-file <fifo> (or a FIFO debug.log)."""
    fifo = tmp_path / "debug.log"
    os.mkfifo(fifo)
    proc = run_cli("verify-configs", str(SMOKE), "--system-config", str(LOCAL), cwd=tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "it is a FIFO, not a regular file" in out and "Fix:" in out, out[-2000:]


def test_an_output_dir_that_is_no_utf8_is_one_line_naming_the_option(tmp_path: Path) -> None:
    res = dry_run(LOCAL, SMOKE, tmp_path, "--output-dir", os.fsdecode(b"out_\xff"))
    assert res.returncode == 2, res.output[-2000:]
    assert "--output-dir 'out_\\udcff' is not valid UTF-8" in res.output and "Fix:" in res.output
    assert "unexpected" not in res.output and not (tmp_path / os.fsdecode(b"out_\xff")).exists()
