"""Issue 46 (6): text that came from input (a file name, a field value, a scenario name) reaches the terminal and
debug.log without acting on them: every escape sequence (CSI such as ESC [ 2 J, OSC, 8-bit C1), every other control
character but line feed and tab, shown as text (\\x1b[2J). On a terminal only colour (SGR) sequences pass, which is
what rich's tables write; into a pipe or a file nothing passes (redact.py neutralize, on the console streams and on
every log record)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from helpers import CONF, run_cli

from cloudai_mbridge.redact import RedactingFilter, neutralize

HOSTILE = ["\x1b[2J", "\x1b[1;1H", "\x1b]0;title\x07", "\x1b]52;c;ZWNobw==\x1b\\", "\x9b2J", "\x9d0;t\x9c", "\x1bc",
           "\x1bP1$r\x1b\\", "\x07", "\x08\x08\x08", "x\ry", "\x00", "\x7f", "\x1b[31m"]


@pytest.mark.parametrize("seq", HOSTILE, ids=[repr(s) for s in HOSTILE])
def test_control_sequences_are_shown_as_text(seq: str) -> None:
    out = neutralize(f"file {seq} name")
    assert not any(ord(c) < 32 or 0x7f <= ord(c) <= 0x9f for c in out), repr(out)
    assert out.startswith("file ") and out.endswith(" name")


def test_line_breaks_tabs_and_colours_on_a_terminal_pass() -> None:
    assert neutralize("a\nb\tc\r\nd") == "a\nb\tc\r\nd"
    assert neutralize("\x1b[1;31mred\x1b[0m", colours=True) == "\x1b[1;31mred\x1b[0m"
    assert neutralize("\x1b[2J\x1b[31m", colours=True) == "\\x1b[2J\x1b[31m", "only colours pass on a terminal"
    assert "\x1b" not in neutralize("\x1b[31mred\x1b[0m"), "into a pipe or a file no colour either"


def test_every_log_record_is_neutralized() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "could not read %s", ("a\x1b]0;pwn\x07.toml",), None)
    RedactingFilter().filter(record)
    assert record.getMessage() == "could not read a\\x1b]0;pwn\\x07.toml"


def test_a_refusal_naming_a_hostile_file_name_shows_it_as_text(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    for kind in ("system", "test", "test_scenario"):
        (conf / kind).mkdir(parents=True)
    shutil.copy(CONF / "system" / "local_slurm.toml", conf / "system")
    shutil.copy(CONF / "test" / "refit_cpu_smoke.toml", conf / "test")
    bad_toml = conf / "test_scenario" / "a\x1b[2J\x1b]0;pwned\x07\x9b31m.toml"
    bad_toml.write_text("this is = = not toml")
    bad_field = conf / "test_scenario" / "b\x1b[1;1H.toml"
    bad_field.write_text('name = "s\\u001b[2J"\n[[Tests]]\nid = "t\\u001b]0;x\\u0007"\ntest_name = "refit_cpu_smoke"\n'
                         'num_nodes = 2\nnodes = ["n\\u001b[2J"]\n')
    for scenario in (bad_toml, bad_field):
        res = run_cli("dry-run", "--system-config", str(conf / "system" / "local_slurm.toml"), "--tests-dir",
                      str(conf / "test"), "--test-scenario", str(scenario), "--output-dir", str(tmp_path / "out"),
                      cwd=tmp_path)
        out = res.stdout + res.stderr
        assert res.returncode != 0 and "Fix" in out, out[-2000:]
        assert not any((ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f for c in out), repr(out[-2000:])
        assert "\\x1b[" in out, out[-2000:]
        log = tmp_path / "debug.log"  # absent when the file was refused before logging started
        assert not log.exists() or "\x1b" not in log.read_text(errors="replace")
    res = run_cli("verify-configs", str(conf), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "\x1b" not in out and "\\x1b[2J" in out, out[-2000:]
