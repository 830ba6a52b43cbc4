"""The one way the plugin writes a file: whole or not at all, never through a link, never half-written by a signal.

``write_atomic(path, data)`` writes ``data`` (text or bytes) to a temporary file in the destination's own folder,
flushes it to the disk (fsync), gives it the mode open() would have, then renames it over ``path``. A symlink at
``path`` is replaced, its target left untouched; an earlier file at ``path`` stays as it was until the rename, so a
full disk, a file size limit or a signal in the middle leaves the earlier file intact and no temporary file behind.
``write_together({path: data, ...})`` does the same for files that belong together (preflight.csv and .html, the
files of one run's per-test report): every temporary file is written first, then each is synced, then all are
renamed and their folder synced once; a failure renames none.

A failure of the operating system becomes a :class:`WriteError` whose message names the file, what went wrong in
words and the fix (:func:`os_problem`); the CLI prints it as one line. Signals that would stop the command
(interrupts.py) are held while a file is written and delivered right after it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from . import interrupts

# errno -> (what happened, in words; the fix)
_FREE = "free space on that filesystem (or its quota) or pass an --output-dir on another one"
_PROBLEMS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", _FREE),
    errno.EDQUOT: ("the disk quota is used up", _FREE),
    errno.EFBIG: ("the file is larger than this filesystem or the file size limit (ulimit -f) allows",
                  "raise the limit (ulimit -f unlimited) or pass an --output-dir on another filesystem"),
    errno.ENAMETOOLONG: ("the file name is too long for the filesystem (255 bytes a component)",
                         "use a shorter --output-dir, scenario name or test id"),
    errno.EROFS: ("the filesystem is mounted read-only",
                  "pass an --output-dir (and --log-file) on a writable filesystem"),
    errno.EACCES: ("permission denied", "make the folder writable for this user or pass another --output-dir"),
    errno.EPERM: ("operation not permitted", "make the folder writable for this user or pass another --output-dir"),
    errno.ENOENT: ("a folder on the way does not exist (removed while the command ran?)",
                   "create it again or pass another --output-dir"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "remove that file or pass another --output-dir"),
    errno.EISDIR: ("a folder is where the file should be", "move that folder away or pass another --output-dir"),
    errno.EIO: ("the device reported an I/O error", "check the filesystem (dmesg) or pass another --output-dir"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n) and run the command again"),
}
KNOWN_ERRNOS = frozenset(_PROBLEMS)


def os_reason(exc: OSError) -> tuple[str, str]:
    """(what happened, in words, with the errno name; the fix) for a failure of the operating system."""
    what, fix = _PROBLEMS.get(exc.errno or 0, (exc.strerror or str(exc), "check that path and run the command again"))
    return f"{what} [{errno.errorcode.get(exc.errno or 0, exc.errno)}]", fix


def os_problem(exc: OSError, path: Path | str | None = None, action: str = "write", folder: Path | None = None) -> str:
    """One line for a failure of the operating system: 'cannot <action> <path>: <what>. Fix: <fix>'. The path is
    ``path``, else the one the error names (the destination of a copy or a rename), else 'a file under
    <folder>'."""
    where = path if path is not None else (exc.filename2 if exc.filename2 is not None else exc.filename)
    what, fix = os_reason(exc)
    unnamed = f" a file under {folder}" if folder is not None else " a file (the system did not say which)"
    target = f" {where}" if where is not None else unnamed
    return f"cannot {action}{target}: {what}. Fix: {fix}"


def os_message(exc: OSError) -> str:
    """:func:`os_problem` of an error, or the message a :class:`WriteError` already has; 'write' for the errors
    that only writing meets, 'use' for the others."""
    if isinstance(exc, WriteError):
        return exc.message
    writing = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
    return os_problem(exc, action="write" if writing else "use")


class WriteError(OSError):
    """A file could not be written; ``str()`` is the one-line message (path, what, fix). Nothing was left behind:
    the earlier file at the path, if any, is unchanged."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror, str(path))
        self.path = path
        self.message = os_problem(cause, path)

    def __str__(self) -> str:
        return self.message


_failures: list[list[str]] = []  # open failures() collectors


def failed_write(path: Path, cause: OSError) -> WriteError:
    """The :class:`WriteError` for ``path`` (a file, or a folder written whole), noted by every open failures()."""
    error = WriteError(path, cause)
    for found in _failures:
        found.append(error.message)
    return error


@contextmanager
def failures() -> Iterator[list[str]]:
    """The messages of every write that failed inside the block, even where a caller (CloudAI's report loop)
    swallowed the error."""
    found: list[str] = []
    _failures.append(found)
    try:
        yield found
    finally:
        _failures.remove(found)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def normal_mode(path: Path, directory: bool = False) -> None:
    """What open() / mkdir() would have given (0644 / 0755 under the usual umask): mkstemp / mkdtemp create 0600 /
    0700, which would keep reports and staged payloads from the rest of a team sharing the results folder."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def _temp(path: Path, data: str | bytes, sync: bool = True) -> Path:
    """``data`` in a temporary file beside ``path`` (normal mode; flushed to the disk unless ``sync`` is False, when
    the caller syncs it with :func:`_sync_file`); removed again on failure."""
    raw = data.encode() if isinstance(data, str) else data
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:80]}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        normal_mode(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _sync_file(tmp: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # not every filesystem syncs a folder; the rename itself is atomic
    finally:
        os.close(fd)


class Staged:
    """A file too large to hold in memory (preflight.csv of a 100k-point sweep), written piece by piece into a
    temporary file beside ``path`` and placed by :func:`write_together` with the others, all or none. ``discard()``
    removes the temporary file (the caller's cleanup when it stops before placing it); a failure to write is a
    :class:`WriteError` naming ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            fd, name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name[:80]}.", suffix=".tmp")
        except OSError as exc:
            raise failed_write(self.path, exc) from None
        self.tmp: Path | None = Path(name)
        self._file = os.fdopen(fd, "w", encoding="utf-8", newline="")

    def write(self, text: str) -> None:
        try:
            self._file.write(text)
        except OSError as exc:
            self.discard()
            raise failed_write(self.path, exc) from None

    def finish(self) -> Path:
        """The temporary file, flushed to the disk, closed and in its normal mode."""
        if self.tmp is None:
            raise ValueError(f"{self.path}: staged file already placed or discarded")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        normal_mode(self.tmp)
        return self.tmp

    def discard(self) -> None:
        with interrupts.deferred():  # a second signal does not stop the cleanup half-way
            if self.tmp is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self.tmp.unlink(missing_ok=True)
                self.tmp = None


# Folders renamed into whose sync was deferred (write_together(..., defer_folder_sync=True)); synced by
# sync_folders(), at the latest when the process exits.
_unsynced_folders: dict[Path, None] = {}


def sync_folders() -> None:
    """Sync every folder whose sync a write deferred: the renames into them are then on the disk."""
    while _unsynced_folders:
        folder = next(iter(_unsynced_folders))
        del _unsynced_folders[folder]
        _sync_folder(folder)


atexit.register(sync_folders)


def write_together(files: Mapping[Path, str | bytes | Staged], defer_folder_sync: bool = False) -> list[Path]:
    """Write every file of ``files`` ({path: text, bytes or a :class:`Staged` file}) atomically, all or none: the
    temporary files are written first, then renamed. Raises :class:`WriteError` (nothing renamed, no temporary file
    left) when one cannot be.

    ``defer_folder_sync``: the folders are synced by :func:`sync_folders` (or at exit), not before this returns. The
    files are as whole either way (each is synced before its rename); only the renames reach the disk later, with
    the next write's journal commit, so many small reports in many folders cost one commit each instead of two."""
    paths = [Path(p) for p in files]
    temps: dict[Path, Path] = {}
    staged: set[Path] = set()
    with interrupts.deferred():
        current = paths[0] if paths else Path()
        try:
            for path, data in zip(paths, files.values(), strict=True):
                current = path
                if path.is_dir() and not path.is_symlink():  # before anything is renamed: all or none
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
                if isinstance(data, Staged):
                    temps[path] = data.finish()  # synced by finish()
                    data.tmp = None  # ours now: renamed below or removed on failure
                    staged.add(path)
                else:
                    temps[path] = _temp(path, data, sync=len(paths) == 1)
            # Several files: every one written before the first is synced, so one journal commit (ext4, xfs) carries
            # them all and the syncs after the first find little left to do; each is still synced before any rename.
            for path in paths if len(paths) > 1 else ():
                current = path
                if path not in staged:
                    _sync_file(temps[path])
            for path in paths:
                current = path
                os.replace(temps.pop(path), path)  # a symlink at ``path`` is replaced, never followed
        except OSError as exc:
            for tmp in temps.values():
                tmp.unlink(missing_ok=True)
            raise failed_write(current, exc) from None
        except BaseException:
            for tmp in temps.values():
                tmp.unlink(missing_ok=True)
            raise
        for folder in {p.parent for p in paths}:
            if defer_folder_sync:
                _unsynced_folders[folder] = None
            else:
                _unsynced_folders.pop(folder, None)
                _sync_folder(folder)
    return paths


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write one file atomically (see the module's docstring); raises :class:`WriteError`."""
    return write_together({Path(path): data})[0]
