"""Issue 46: a training log's per-iteration columns past a block live in an unnamed temporary file
(metrics/spill.py), so the parsed run holds a bounded amount of memory whatever the log's length, and reads the
same values."""

from __future__ import annotations

import gc
import os
import pickle
import random
import tempfile
from array import array
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import spill
from cloudai_mbridge.metrics.spill import SpilledArray


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(spill, "BLOCK", 64)
    monkeypatch.setattr(spill, "_READ", 8)
    return 64


@pytest.mark.parametrize("typecode", ["d", "q", "I", "B"])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 200, 1000])
def test_a_spilled_array_reads_as_the_array_it_stands_for(small_blocks: int, typecode: str, n: int) -> None:
    rng = random.Random(n)
    values = [rng.random() * 1e6 if typecode == "d" else rng.randrange(0, 256 if typecode == "B" else 1 << 31)
              for _ in range(n)]
    plain = array(typecode, values)
    spilled = SpilledArray(typecode)
    for k, v in enumerate(values):  # append and extend mixed, as the columns use them
        if k % 3:
            spilled.append(v)
        else:
            spilled.extend([v])
    assert len(spilled) == n and list(spilled) == list(plain)
    as_read = (lambda part: part.tobytes()) if typecode == "B" else (lambda part: part)
    for _ in range(200 if n else 0):
        i = rng.randrange(-n, n)
        assert spilled[i] == plain[i]
    for start, stop, step in [(None, None, None), (0, n // 2, None), (n // 3, n, None), (5, 9, None),
                              (1, n, 3), (n - 1, 0, -2), (-7, None, None), (60, 70, None)]:
        part = spilled[start:stop:step]
        expected = plain[start:stop:step]
        assert list(part) == list(expected), (start, stop, step)
        if isinstance(part, bytes | array):
            assert part == as_read(expected)
    if n:
        assert values[-1] in spilled and (-1 if typecode != "d" else -1.5) not in spilled
    with pytest.raises(IndexError):
        spilled[n]
    assert list(pickle.loads(pickle.dumps(spilled))) == list(plain)


def test_a_spilled_array_holds_one_block_in_memory_and_its_file_has_no_name(
        small_blocks: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a block the values are in the file; the file appears in no folder and goes when its arena does."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a $TMPDIR of its own: other tests write to the shared one
    before = set(os.listdir(tempfile.gettempdir()))
    assert before == set()
    fds_before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    spilled = SpilledArray("d", (float(i) for i in range(10 * small_blocks + 5)))
    assert len(spilled._tail) < small_blocks  # the rest is in the file
    assert spilled[3] == 3.0 and spilled[-1] == 10.0 * small_blocks + 4
    assert set(os.listdir(tempfile.gettempdir())) == before  # no name in $TMPDIR
    del spilled
    gc.collect()
    if fds_before is not None:
        assert len(os.listdir("/proc/self/fd")) == fds_before  # closed with its arena: the space is freed


def test_a_long_parsed_run_holds_no_more_memory_per_iteration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Bridge log (iteration and Step Time lines, as Megatron-Bridge prints them) of 12,000 and of 36,000
    iterations, parsed with 512-value blocks: the second holds under 16 B more per extra iteration (every record
    as objects: ~600 B; the columns in memory: ~60 B), and reads the same records as with no file at all."""
    import sys
    import tracemalloc

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import log_parse_scale

    from cloudai_mbridge.metrics.training import parse_training_run

    for name, n in (("warm", 12_000), ("run12000", 12_000), ("run36000", 36_000)):
        (tmp_path / name).mkdir()
        log_parse_scale.write_training(tmp_path / name, n)
    # the first parse of a process of a log this size fills caches (imports, the scan's scratch): not held
    assert parse_training_run(tmp_path / "warm").status == "ok"
    held = {}
    for n in (12_000, 36_000):
        run = tmp_path / f"run{n}"
        monkeypatch.setattr(spill, "BLOCK", 512)
        monkeypatch.setattr(spill, "_READ", 64)
        gc.collect()
        tracemalloc.start()
        try:
            m = parse_training_run(run)
            gc.collect()
            held[n] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert m.status == "ok" and len(m.iterations) == n and len(m.step_times) == n
        if n == 12_000:
            monkeypatch.setattr(spill, "BLOCK", 1 << 30)  # nothing spilled: the same records, the same numbers
            whole = parse_training_run(run)
            assert whole.iterations == tuple(m.iterations) and whole.step_times == tuple(m.step_times)
            assert whole.iteration_time_ms == m.iteration_time_ms and whole.step_time_s == m.step_time_s
            del whole
        del m
    per_iteration = (held[36_000] - held[12_000]) / 24_000
    assert per_iteration < 16, f"{per_iteration:.1f} B held per extra iteration"


@pytest.mark.parametrize("where", ["create", "write"])
def test_a_temporary_folder_without_room_keeps_the_values_in_memory_and_says_so_once(
        small_blocks: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        where: str) -> None:
    """No usable $TMPDIR, or a disk that fills while a long log is parsed: the parse gives the same numbers (its
    values stay in memory from then on) and one warning that names the fix, never an OSError."""
    import errno
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import log_parse_scale

    from cloudai_mbridge.metrics import training

    log_parse_scale.write_training(tmp_path / "run", 1000)
    reference = training._parse_training_run(tmp_path / "run", 5, 3.0, 1)
    full = OSError(errno.ENOSPC, "No space left on device")
    if where == "create":
        monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: (_ for _ in ()).throw(full))
    else:
        writes = iter(range(5))  # a few blocks go to the file, then the disk is full

        def pwrite(fd: int, data: bytes, offset: int, real=os.pwrite) -> int:
            if next(writes, None) is None:
                raise full
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(spill, "_WARNED", [], raising=False)
    with caplog.at_level("WARNING"):
        m = training._parse_training_run(tmp_path / "run", 5, 3.0, 1)
        again = training._parse_training_run(tmp_path / "run", 5, 3.0, 1)
    assert tuple(m.iterations) == tuple(reference.iterations) == tuple(again.iterations)
    assert m.iteration_time_ms == reference.iteration_time_ms and tuple(m.step_times) == tuple(reference.step_times)
    warnings = [r.getMessage() for r in caplog.records if "TMPDIR" in r.getMessage()]
    assert len(warnings) == 1 and "No space left on device" in warnings[0], warnings
