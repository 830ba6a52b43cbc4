"""The byte-level scanner on damaged files."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from cloudai_mbridge.metrics import parse_iteration_line, signals
from cloudai_mbridge.metrics import scan as scan_mod
from cloudai_mbridge.metrics.scan import (
    BLOCK,
    MAX_SEGMENT,
    WINDOW_AFTER,
    WINDOW_BEFORE,
    Marker,
    clean_text,
    scan_file,
)
from cloudai_mbridge.metrics.training import ITERATION

CLEAN_TIMES = [5630.1, 5410.6, 5444.9, 5533.8, 5718.6]


def times(scan) -> list[float | None]:
    return [r.elapsed_ms for line in scan.lines(ITERATION.name) for r in parse_iteration_line(line)]


def test_clean_file(fixtures: Path) -> None:
    scan = scan_file(fixtures / "megatron_lm_756_mixtral_moe.log", [ITERATION])
    assert (scan.status, scan.truncated) == ("ok", False)
    assert times(scan) == CLEAN_TIMES


def test_carriage_returns_and_crlf(fixtures: Path) -> None:
    scan = scan_file(fixtures / "damaged_cr.log", [ITERATION])
    assert times(scan) == CLEAN_TIMES
    texts = [line.text for line in scan.lines(ITERATION.name)]
    assert all(t.startswith(" [2024-04-06") for t in texts)
    assert all(line.terminated for line in scan.lines(ITERATION.name))


def test_ansi_colour_codes_even_inside_a_value(fixtures: Path) -> None:
    scan = scan_file(fixtures / "damaged_ansi.log", [ITERATION])
    assert times(scan) == CLEAN_TIMES
    assert not any("\x1b" in line.text for line in scan.lines(ITERATION.name))


def test_non_utf8_bytes_are_replaced_and_only_spoil_their_own_field(fixtures: Path) -> None:
    scan = scan_file(fixtures / "damaged_non_utf8.log", [ITERATION])
    records = [r for line in scan.lines(ITERATION.name) for r in parse_iteration_line(line)]
    assert [r.elapsed_ms for r in records] == CLEAN_TIMES
    assert records[3].iteration == 44 and records[3].learning_rate is None
    assert "\ufffd" in scan.lines(ITERATION.name)[3].text
    assert records[2].learning_rate == pytest.approx(8.6e-6)


def test_truncated_file_marks_its_last_line(fixtures: Path) -> None:
    scan = scan_file(fixtures / "damaged_truncated.log", [ITERATION])
    assert scan.truncated
    found = scan.lines(ITERATION.name)
    assert [line.terminated for line in found] == [True, True, True, True, False]
    assert times(scan) == [*CLEAN_TIMES[:4], None]


def test_empty_missing_and_unreadable(fixtures: Path, tmp_path: Path) -> None:
    assert scan_file(fixtures / "damaged_empty.log", [ITERATION]).status == "empty"
    assert scan_file(tmp_path / "nope.log", [ITERATION]).status == "missing"
    unreadable = scan_file(tmp_path, [ITERATION])
    assert unreadable.status == "unreadable" and unreadable.error


@pytest.mark.parametrize(
    ("raw", "rank", "text"),
    [
        (b" 3: [rank3]:     expert_output, mlp_bias = x", 3, "    expert_output, mlp_bias = x"),
        (
            b"[1,10]<stdout>:nccl-tests-efa-worker-1:27:27 [2] NCCL INFO",
            10,
            "nccl-tests-efa-worker-1:27:27 [2] NCCL INFO",
        ),
        (b"[rank7]:[E816 01:45:40.18 ProcessGroupNCCL.cpp:607]", 7, "[E816 01:45:40.18 ProcessGroupNCCL.cpp:607]"),
        (b"12: Step Time : 5.53s", 12, "Step Time : 5.53s"),
        (b"12:34:56 INFO not a label", None, "12:34:56 INFO not a label"),
        (b"\x1b[32m0: colour\x1b[0m\r", 0, "colour"),
    ],
)
def test_rank_labels(raw: bytes, rank: int | None, text: str) -> None:
    assert clean_text(raw) == (text, rank)


def test_labels_in_a_real_srun_log(fixtures: Path) -> None:
    scan = scan_file(fixtures / "nemo_14857_srun_label_traceback.log", [Marker("any", (b"expert",))])
    assert [line.label_rank for line in scan.lines("any")] == [3, 3, 3]


def test_a_runaway_line_is_windowed_and_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * (MAX_SEGMENT + 10) + b" MARK " + b"y" * 100000 + b"\n")
    (line,) = scan_file(path, [Marker("m", (b"MARK",))]).lines("m")
    assert not line.terminated
    assert len(line.text) <= WINDOW_BEFORE + WINDOW_AFTER


def test_first_only_requires_and_requires_absent(tmp_path: Path) -> None:
    path = tmp_path / "r.log"
    path.write_text("alpha 1\nalpha 2\nbeta\n")
    plan = [
        Marker("a", (b"alpha",), first_only=True),
        Marker("needs_a", (b"beta",), requires="a"),
        Marker("needs_no_a", (b"beta",), requires_absent="a"),
        Marker("needs_z", (b"beta",), requires="z"),
    ]
    scan = scan_file(path, plan)
    assert [line.text for line in scan.lines("a")] == ["alpha 1"]
    assert [line.text for line in scan.lines("needs_a")] == ["beta"]
    assert scan.searched == frozenset({"a", "needs_a"})


def test_a_warning_that_mentions_error_does_not_open_the_full_failure_search(tmp_path: Path) -> None:
    path = tmp_path / "rank.log"
    path.write_text(
        "UserWarning: barrier(): using the device under current context; on error, check NCCL_DEBUG output\n"
        "ip-10-1-0-5:4005:4043 [5] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
    )
    scan = scan_file(path, signals.FAILURE_MARKERS)
    assert scan.lines("error") == ()
    assert "segfault" not in scan.searched


def test_a_real_failure_line_opens_the_full_failure_search(fixtures: Path) -> None:
    scan = scan_file(fixtures / "megatron_lm_1509_nccl_cuda_oom.log", signals.FAILURE_MARKERS)
    assert [line.text for line in scan.lines("error")] == [
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    ]
    assert len(scan.lines("oom")) == 2


def test_two_carriage_return_segments_of_one_line_are_two_lines(fixtures: Path, tmp_path: Path) -> None:
    first, second = (fixtures / "megatron_lm_756_mixtral_moe.log").read_text().splitlines()[3:5]
    path = tmp_path / "cr.log"
    path.write_text(first + "\r" + second + "\n")
    assert times(scan_file(path, [ITERATION])) == [5444.9, 5533.8]


# --- the reused buffer and the pair filter (files of several BLOCKs) -----------------------------------------------
def _offsets(scan, name: str) -> list[int]:
    return [line.offset for line in scan.lines(name)]


def _expected(data: bytes, needle: bytes) -> list[int]:
    """Offsets of the lines (segments) holding ``needle``, the slow and obvious way."""
    found: dict[int, None] = {}
    pos = data.find(needle)
    while pos != -1:
        line_start = data.rfind(b"\n", 0, pos) + 1
        start = max(line_start, data.rfind(b"\r", line_start, pos) + 1)
        found[start] = None
        end = data.find(b"\n", pos)
        pos = -1 if end == -1 else data.find(needle, end + 1)
    return list(found)


QUIET = b"NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC\n"


@pytest.mark.parametrize(("noise", "block"), [(QUIET, BLOCK), (QUIET, 4096), (b"error carries rr\n", 4096)])
def test_short_needles_across_block_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, noise: bytes, block: int
) -> None:
    """Hits right before, across and right after every block edge, in a quiet log (the filter skips blocks) and in
    one where the pair is everywhere (the filter turns itself off): the same lines as a plain search."""
    monkeypatch.setattr(scan_mod, "BLOCK", block)
    data = bytearray(noise * (12 * block // len(noise) + 1))
    for i, edge in enumerate(range(block, len(data) - block, block)):
        at = edge + (-9, -3, -2, -1, 0, 1)[i % 6]  # the needle ends before, spans or starts at the edge
        data[at - 1] = 0x0A
        data[at : at + 5] = b"rror\n"
    data = bytes(data)
    path = tmp_path / "rank-0.log"
    path.write_bytes(data)
    scan = scan_file(path, [Marker("e", (b"rror",)), Marker("rr", (b"rr",))])
    assert _offsets(scan, "e") == _expected(data, b"rror")
    assert _offsets(scan, "rr") == _expected(data, b"rr")


def test_a_smaller_file_after_a_bigger_one_sees_only_its_own_bytes(tmp_path: Path) -> None:
    """The thread's buffer still holds the bigger file after the smaller one's end: no hit, newline or line from it."""
    big, small = tmp_path / "big.log", tmp_path / "small.log"
    big.write_bytes(b"a" * (3 * BLOCK) + b"\nrror tail\nMARK\n")
    small.write_bytes(b"a" * (3 * BLOCK) + b"\nrror cut")
    assert _offsets(scan_file(big, [Marker("m", (b"MARK",))]), "m") == [3 * BLOCK + 11]
    scan = scan_file(small, [Marker("e", (b"rror",)), Marker("m", (b"MARK",))])
    assert scan.size == 3 * BLOCK + 9 and scan.truncated
    (line,) = scan.lines("e")
    assert line.text == "rror cut" and not line.terminated
    assert scan.lines("m") == ()


def test_a_file_that_grows_past_the_buffer_is_read_to_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The buffer is sized from fstat; bytes written after that are still read (the buffer grows)."""
    path = tmp_path / "rank-0.log"
    path.write_bytes(b"x\n" * 10)
    real = scan_mod.os.fstat
    monkeypatch.setattr(scan_mod, "_LOCAL", threading.local())  # no buffer kept from an earlier test
    # a regular file (the reader checks that on the descriptor first) that fstat says is 15 bytes shorter
    monkeypatch.setattr(scan_mod.os, "fstat", lambda fd: SimpleNamespace(st_size=real(fd).st_size - 15,
                                                                         st_mode=real(fd).st_mode))
    monkeypatch.setattr(scan_mod, "_capacity", lambda size: size + 1)
    scan = scan_file(path, [Marker("x", (b"x",))])
    assert scan.size == 20 and len(scan.lines("x")) == 10


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_fifo_or_a_device_is_never_read(tmp_path: Path, kind: str) -> None:
    """Issue 32: a FIFO would block the open forever, /dev/zero fill memory: unreadable, said what it is, at once."""
    path = tmp_path / "rank-0.log"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    scan = scan_file(path, [Marker("x", (b"x",))])
    assert scan.status == "unreadable"
    assert ("FIFO" if kind == "fifo" else "character device") in scan.error and str(path) in scan.error
