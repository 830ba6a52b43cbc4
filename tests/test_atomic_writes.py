"""The plugin's one writer (cloudai_mbridge/atomic.py): whole or nothing, never through a symlink, never cut by a
signal, and a failure of the operating system said in one line with the path and the fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import reap

from cloudai_mbridge.atomic import WriteError, write_atomic, write_together


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_symlink_at_the_destination_is_replaced_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("the user's file\n")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "report.csv"
    link.symlink_to(target)
    write_atomic(link, "a,b\n1,2\n")
    assert target.read_text() == "the user's file\n"
    assert not link.is_symlink() and link.read_text() == "a,b\n1,2\n"
    assert oct(link.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # what open() would give, not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_files_written_together_are_all_or_none(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("earlier a\n")
    (tmp_path / "b.html").mkdir()  # cannot be replaced by a file
    with pytest.raises(WriteError) as info:
        write_together({tmp_path / "a.csv": "new a\n", tmp_path / "b.html": "<p>new</p>"})
    assert (tmp_path / "a.csv").read_text() == "earlier a\n"
    assert _names(tmp_path) == ["a.csv", "b.html"]  # no temporary file left
    assert str(tmp_path / "b.html") in str(info.value) and "Fix:" in str(info.value)


def test_a_file_size_limit_leaves_the_earlier_file_and_says_so(tmp_path: Path) -> None:
    """A child process under ulimit -f 4 KiB writes 64 KiB over an earlier file: EFBIG, one line, nothing cut."""
    (tmp_path / "report.csv").write_text("earlier\n")
    code = textwrap.dedent(f"""
        import resource
        from pathlib import Path
        from cloudai_mbridge.atomic import WriteError, write_atomic
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_atomic(Path({str(tmp_path / 'report.csv')!r}), "x" * 65536)
        except WriteError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"cannot write {tmp_path / 'report.csv'}: " in out.stdout and "ulimit -f" in out.stdout
    assert (tmp_path / "report.csv").read_text() == "earlier\n"
    assert _names(tmp_path) == ["report.csv"]


def test_a_signal_during_a_write_waits_for_it(tmp_path: Path) -> None:
    """SIGTERM sent to a real process while write_atomic writes 256 MB over an earlier file (its temporary file is
    there): the process stops (exit 143) only once the file is whole; no temporary file is left."""
    dest = tmp_path / "big.bin"
    dest.write_bytes(b"earlier")
    code = textwrap.dedent(f"""
        from pathlib import Path
        from cloudai_mbridge import interrupts
        from cloudai_mbridge.atomic import write_atomic
        interrupts.install()
        data = b"y" * (256 << 20)
        try:
            while True:
                write_atomic(Path({str(dest)!r}), data)
        except interrupts.Interrupted as e:
            raise SystemExit(e.code)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not any(
                n.endswith(".tmp") for n in os.listdir(tmp_path)):
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        reap(proc)  # a failure above must not leave it rewriting 256 MB for the rest of the session
    assert _names(tmp_path) == ["big.bin"]
    assert dest.stat().st_size in (7, 256 << 20)
    dest.unlink()  # pytest keeps the last sessions' temporary folders: not 256 MB of them


def test_a_deferred_folder_sync_still_writes_whole_files_and_syncs_later(tmp_path: Path, monkeypatch) -> None:
    """The per-test reports defer the sync of their run folder (one journal commit per run, not two): the files are
    in place at once, the folder is synced by sync_folders() (the command's end, or at exit), once."""
    from cloudai_mbridge import atomic

    synced: list[Path] = []
    monkeypatch.setattr(atomic, "_sync_folder", synced.append)
    # a report written by an earlier test in this worker may still wait for its folder sync (until the process
    # exits): this test watches only its own
    monkeypatch.setattr(atomic, "_unsynced_folders", {})
    run = tmp_path / "run"
    run.mkdir()
    write_together({run / "a.csv": "a\n", run / "b.json": "{}\n"}, defer_folder_sync=True)
    write_together({run / "c.json": "{}\n"}, defer_folder_sync=True)
    assert (run / "a.csv").read_text() == "a\n" and _names(run) == ["a.csv", "b.json", "c.json"]
    assert synced == []
    atomic.sync_folders()
    assert synced == [run]
    atomic.sync_folders()
    assert synced == [run]
