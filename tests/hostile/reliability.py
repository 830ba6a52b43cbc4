"""Issue 26: the machine under the plugin misbehaves. Four classes, each row run through the real CLI in a child
process and judged by the same checks as the hostile-input table (no traceback, a clear message, nothing partial,
nothing written outside, no data lost):

- ``os failure``: a full disk (a small tmpfs), a file size limit (ulimit -f), a name too long, a read-only filesystem,
  an immutable folder (EPERM: the tests run as root, so a mode bit cannot refuse), an unwritable --log-file;
- ``planted symlink``: every file the plugin writes into a results or output folder is, beforehand, a symlink to a
  file elsewhere: the link must be replaced, its target left as it was;
- ``signal``: SIGINT / SIGTERM / SIGHUP sent to a 40-point dry-run mid-sweep, and SIGTERM sent to preflight while
  it writes its files (an earlier preflight.csv exists);
- ``shrinking log``: generate-report while another process truncates and rewrites a rank log.

Rows that need mount(2) or chattr are skipped where the system refuses them. :func:`run_class` returns one
:class:`Trial` per row with the list of checks it failed (empty: handled right); tests and summary.py share it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from helpers import CONF, reap

from hostile.harness import Case, lay_out

CLASSES = ("os failure", "planted symlink", "signal", "shrinking log")
TEMP = re.compile(r"^\..*\.tmp$|^\.mbridge_(payload|inputs)\.")  # the writers' temporary files and folders


@dataclass
class Trial:
    cls: str
    id: str
    returncode: int | None = None
    output: str = ""
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None


# --------------------------------------------------------------------------------------------------------------
# the real CLI, and the system facilities the rows need
# --------------------------------------------------------------------------------------------------------------


def cli_argv(*args: str, log_file: Path | None) -> list[str]:
    return [sys.executable, "-m", "cloudai_mbridge", *(["--log-file", str(log_file)] if log_file else []), *args]


def cli(*args: str, cwd: Path, log_file: Path | None = None, fsize: int | None = None,
        timeout: int = 600) -> subprocess.CompletedProcess:
    """``cloudai-mbridge ARGS`` in a child process; ``fsize``: its file size limit in bytes (ulimit -f)."""

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(cli_argv(*args, log_file=log_file if log_file else cwd / "debug.log"), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limit)


def _sh(*argv: str) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "64k") -> Iterator[bool]:
    """A tmpfs of ``size`` mounted at ``path`` (False: mount is not permitted here)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = _sh("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield mounted
    finally:
        if mounted:
            _sh("umount", "-l", str(path))


def read_only(path: Path) -> bool:
    return _sh("mount", "-o", "remount,ro", str(path))


def fill(folder: Path) -> None:
    """Use up the filesystem's free space (a file written until ENOSPC)."""
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[bool]:
    ok = _sh("chattr", "+i", str(path))
    try:
        yield ok
    finally:
        if ok:
            _sh("chattr", "-i", str(path))


# --------------------------------------------------------------------------------------------------------------
# the shared checks
# --------------------------------------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """{relative path: sha1 of the bytes, '->target' for a link, '/' for a folder} of everything under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "->" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "/"
        elif p.is_file():
            out[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def temp_leftovers(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if TEMP.match(p.name)]


def message_problems(output: str, fragments: tuple[str, ...]) -> list[str]:
    """The error is said in one line that names the path (``fragments``) and the fix, without a traceback."""
    problems = []
    if "Traceback" in output:
        problems.append("traceback")
    if "unexpected: please report" in output:
        problems.append("'unexpected' message")
    lines = [ln for ln in output.splitlines() if all(f in ln for f in fragments)]
    if not any("Fix" in ln or "Try '" in ln for ln in lines):
        problems.append(f"no one-line message naming {fragments} with a fix")
    return problems


def _changed(before: dict[str, str], after: dict[str, str], keep: Callable[[str], bool] = lambda _: True) -> list[str]:
    return sorted(k for k in set(before) | set(after) if keep(k) and before.get(k) != after.get(k))


# --------------------------------------------------------------------------------------------------------------
# the trees the rows work on
# --------------------------------------------------------------------------------------------------------------


@dataclass
class AbTree:
    """A real dry-run of a 2 x 2 A/B with logs in Megatron's format and its reports (test_reports.py)."""

    base: Path
    root: Path  # the scenario's results folder
    scenario: Path
    system: Path = CONF / "system" / "slurm_h100_ib.toml"

    def copy(self, dest: Path) -> AbTree:
        shutil.copytree(self.base, dest, symlinks=True, dirs_exist_ok=True)
        return AbTree(dest, dest / self.root.relative_to(self.base), dest / self.scenario.relative_to(self.base))

    def report(self, cwd: Path, **kw: object) -> subprocess.CompletedProcess:
        return cli("generate-report", "--system-config", str(self.system), "--test-scenario", str(self.scenario),
                   "--result-dir", str(self.root), cwd=cwd, **kw)  # type: ignore[arg-type]

    def runs(self) -> list[Path]:
        return sorted(p.parent for p in self.root.rglob("mbridge_config.json"))


def build_ab(tmp: Path) -> AbTree:
    from test_reports import build_ab_results

    root, _ = build_ab_results(tmp)
    return AbTree(tmp, root, next((tmp / "test_scenario").glob("*.toml")))


def trio(root: Path, edits: dict | None = None, base: str = "ab") -> dict[str, Path]:
    """A conf/ trio (harness.lay_out) of ``base`` with ``edits``: system, test, scenario, work, out."""
    return lay_out(Case("reliability", base, edits or {}), root)


SWEEP_40 = {"test.cmd_args.mbs": [1, 2, 3, 4, 6], "test.cmd_args.gbs": 768,
            "test.cmd_args.seq_length": [4096, 2048]}  # x dispatcher x moe_a2a_overlap: 40 points, all accepted


def scenario_args(p: dict[str, Path]) -> list[str]:
    return ["--system-config", str(p["system"]), "--test-scenario", str(p["scenario"])]


# --------------------------------------------------------------------------------------------------------------
# class 1: the operating system refuses
# --------------------------------------------------------------------------------------------------------------

ERRNO_WORDS = {"ENOSPC": "no space left", "EFBIG": "file size limit", "ENAMETOOLONG": "too long",
               "EROFS": "read-only", "EPERM": "not permitted"}  # what the message says about the reason


def _judge(trial: Trial, proc: subprocess.CompletedProcess, fragments: tuple[str, ...], errno_name: str | None,
           zero_ok: bool = False) -> None:
    trial.returncode, trial.output = proc.returncode, proc.stdout + proc.stderr
    if proc.returncode == 0 and not zero_ok:
        trial.problems.append("exit 0")
    if proc.returncode < 0 or proc.returncode > 128:
        trial.problems.append(f"killed by a signal (exit {proc.returncode})")
    trial.problems += message_problems(trial.output, fragments)
    if errno_name and ERRNO_WORDS[errno_name] not in trial.output:
        trial.problems.append(f"the reason ({ERRNO_WORDS[errno_name]}) is not said")


def cloudai_own(rel: str) -> bool:
    """Report files CloudAI itself writes with open('w') (its tarball of a results folder with failed runs, its DSE
    report page): outside the plugin's writer, they are left out of the checks. CloudAI truncates and rewrites them;
    on a full disk that frees the space they need, under a file size limit they end up cut (CloudAI's to fix)."""
    return rel.endswith((".tgz", "-dse-report.html"))


def _out_clean(trial: Trial, out: Path, before: dict[str, str], ignore: tuple[str, ...] = ("filler",)) -> None:
    """Nothing partial, nothing new, nothing lost in ``out`` (its snapshot ``before``), CloudAI's own report files
    aside (cloudai_own)."""
    changed = _changed(before, snapshot(out), keep=lambda k: k not in ignore and not cloudai_own(k))
    if changed:
        trial.problems.append(f"--output-dir changed: {changed[:5]}")
    if temp_leftovers(out):
        trial.problems.append(f"temporary files left: {temp_leftovers(out)[:3]}")


def os_dry_run_full_disk(tmp: Path) -> Trial:
    t = Trial("os failure", "dry-run-full-disk")
    p = trio(tmp)
    with tmpfs(p["out"]) as ok:
        if not ok:
            t.skipped = "mount not permitted"
            return t
        proc = cli("dry-run", *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"])
        _judge(t, proc, (str(p["out"]), "Fix:"), "ENOSPC")
        _out_clean(t, p["out"], {})
    return t


def os_preflight_full_disk(tmp: Path) -> Trial:
    """An earlier preflight.csv / .html exists; the disk is full: both stay byte for byte as they were."""
    t = Trial("os failure", "preflight-full-disk-keeps-earlier")
    p = trio(tmp)
    with tmpfs(p["out"]) as ok:
        if not ok:
            t.skipped = "mount not permitted"
            return t
        first = cli("preflight", *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"])
        if first.returncode != 0 or not (p["out"] / "preflight.csv").is_file():
            t.problems.append(f"the first preflight failed: {first.stderr[-500:]}")
            return t
        (p["out"] / "preflight.csv").write_text("earlier,csv\n1,2\n")
        fill(p["out"])
        before = snapshot(p["out"])
        proc = cli("preflight", *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"])
        _judge(t, proc, (str(p["out"] / "preflight."), "Fix:"), "ENOSPC")
        _out_clean(t, p["out"], before, ignore=())
    return t


def os_report_full_disk(tmp: Path, tree: AbTree) -> Trial:
    """The results folder's disk is full: generate-report exits non-zero, names the file, keeps every earlier one."""
    t = Trial("os failure", "generate-report-full-disk")
    mnt = tmp / "mnt"
    size = sum(f.stat().st_size for f in tree.base.rglob("*") if f.is_file())
    with tmpfs(mnt, size=f"{size // 1024 + 2048}k") as ok:
        if not ok:
            t.skipped = "mount not permitted"
            return t
        ab = tree.copy(mnt / "case")
        fill(mnt)
        before = snapshot(mnt)
        proc = ab.report(tmp)
        _judge(t, proc, (str(ab.root), "Fix:"), "ENOSPC")
        _out_clean(t, mnt, before, ignore=())
    return t


def os_file_size_limit(tmp: Path, tree: AbTree, verb: str) -> Trial:
    """ulimit -f: the first file over the limit fails with EFBIG (Python ignores SIGXFSZ)."""
    t = Trial("os failure", f"{verb}-file-size-limit")
    if verb == "generate-report":
        ab = tree.copy(tmp / "case")
        limit = 20_000  # the PNG plots and the HTML page are larger, the CSV and JSON files smaller
        big = {str(f.relative_to(ab.base)) for f in ab.base.rglob("*") if f.is_file() and f.stat().st_size > limit}
        before = snapshot(ab.base)
        proc = ab.report(tmp, fsize=limit)
        _judge(t, proc, (str(ab.root), "Fix:"), "EFBIG")
        after = snapshot(ab.base)
        cut = [k for k in big if after.get(k) != before[k] and not cloudai_own(k)]  # must be the earlier file
        if cut:
            t.problems.append(f"files over the limit changed: {cut[:3]}")
        if temp_leftovers(ab.base):
            t.problems.append(f"temporary files left: {temp_leftovers(ab.base)[:3]}")
        return t
    p = trio(tmp)
    args = [*scenario_args(p), "--output-dir", str(p["out"])]
    proc = cli(verb, *args, cwd=p["work"], fsize=4_000)  # the payload's modules, the preflight page are larger
    _judge(t, proc, (str(p["out"]), "Fix:"), "EFBIG")
    if p["out"].exists():
        _out_clean(t, p["out"], {})
    return t


def os_name_too_long(tmp: Path, verb: str) -> Trial:
    """A scenario name of 250 characters: its results folder (name + _<timestamp>) exceeds 255 bytes."""
    t = Trial("os failure", f"{verb}-name-too-long")
    p = trio(tmp, {"scenario.name": "n" * 250})
    proc = cli(verb, *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"])
    _judge(t, proc, ("n" * 250, "Fix:"), "ENAMETOOLONG")
    if p["out"].exists():
        _out_clean(t, p["out"], {})
    return t


def os_read_only(tmp: Path, tree: AbTree, what: str) -> Trial:
    t = Trial("os failure", f"read-only-{what}")
    mnt = tmp / "ro"
    with tmpfs(mnt, size="16m") as ok:
        if not ok:
            t.skipped = "mount not permitted"
            return t
        if what == "results":
            ab = tree.copy(mnt / "case")
            before = snapshot(mnt)
            if not read_only(mnt):
                t.skipped = "remount read-only not permitted"
                return t
            proc = ab.report(tmp)
            _judge(t, proc, (str(ab.root), "Fix:"), "EROFS")
            _out_clean(t, mnt, before, ignore=())
            return t
        p = trio(tmp / "case")
        if not read_only(mnt):
            t.skipped = "remount read-only not permitted"
            return t
        if what == "log-file":
            proc = cli("dry-run", *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"],
                       log_file=mnt / "debug.log")
            _judge(t, proc, (str(mnt / "debug.log"), "Fix:"), "EROFS")
        else:  # the working folder, where debug.log goes by default
            proc = subprocess.run(cli_argv("dry-run", *scenario_args(p), "--output-dir", str(p["out"]),
                                           log_file=None), cwd=mnt, capture_output=True, text=True, timeout=600)
            _judge(t, proc, (str(mnt / "debug.log"), "Fix:"), "EROFS")
        if p["out"].exists():
            t.problems.append("--output-dir created although the command could not start")
    return t


def os_immutable_results(tmp: Path, tree: AbTree) -> Trial:
    """EPERM: a results folder nobody may add a file to (chattr +i; root ignores mode bits): the scenario reports
    cannot be written, the earlier ones stay."""
    t = Trial("os failure", "generate-report-results-folder-immutable")
    ab = tree.copy(tmp / "case")
    before = snapshot(ab.root)
    with immutable(ab.root) as ok:
        if not ok:
            t.skipped = "chattr +i not permitted"
            return t
        proc = ab.report(tmp)
    _judge(t, proc, (str(ab.root), "Fix:"), "EPERM")
    top = {k: v for k, v in before.items() if "/" not in k}  # the folder's own files: it refused every change
    changed = _changed(top, {k: v for k, v in snapshot(ab.root).items() if "/" not in k})
    if changed or temp_leftovers(ab.root):
        t.problems.append(f"the results folder changed: {changed[:3]} {temp_leftovers(ab.root)[:3]}")
    return t


def os_failures(tmp: Path, tree: AbTree) -> dict[str, Callable[[], Trial]]:
    return {
        "dry-run-full-disk": lambda: os_dry_run_full_disk(tmp / "dry-full"),
        "preflight-full-disk-keeps-earlier": lambda: os_preflight_full_disk(tmp / "pre-full"),
        "generate-report-full-disk": lambda: os_report_full_disk(tmp / "rep-full", tree),
        "dry-run-file-size-limit": lambda: os_file_size_limit(tmp / "dry-fsize", tree, "dry-run"),
        "preflight-file-size-limit": lambda: os_file_size_limit(tmp / "pre-fsize", tree, "preflight"),
        "generate-report-file-size-limit": lambda: os_file_size_limit(tmp / "rep-fsize", tree, "generate-report"),
        "dry-run-name-too-long": lambda: os_name_too_long(tmp / "dry-long", "dry-run"),
        "read-only-results": lambda: os_read_only(tmp / "ro-results", tree, "results"),
        "read-only-log-file": lambda: os_read_only(tmp / "ro-log", tree, "log-file"),
        "read-only-working-folder": lambda: os_read_only(tmp / "ro-cwd", tree, "working-folder"),
        "generate-report-results-folder-immutable": lambda: os_immutable_results(tmp / "imm", tree),
    }


# --------------------------------------------------------------------------------------------------------------
# class 2: a symlink planted where the plugin writes
# --------------------------------------------------------------------------------------------------------------

RUN_FILES = ("mbridge_summary.json", "mbridge_iterations.csv", "golden_values.json", "mbridge_iterations.png")
SCENARIO_FILES = ("mbridge_ab.csv", "mbridge_runs.csv", "mbridge_ab.html")
PREFLIGHT_FILES = ("preflight.csv", "preflight.html")


def _plant(dest: Path, outside: Path) -> bytes:
    """``dest`` becomes a symlink to a file in ``outside``, which holds a user's data; returns that data."""
    target = outside / f"precious-{dest.name}"
    data = f"a file of the user's, not the plugin's ({dest.name})\n".encode()
    target.write_bytes(data)
    dest.unlink(missing_ok=True)
    dest.symlink_to(target)
    return data


def symlink_trial(tmp: Path, tree: AbTree, name: str) -> Trial:
    t = Trial("planted symlink", name)
    outside = tmp / "outside"
    outside.mkdir(parents=True)
    if name in PREFLIGHT_FILES:
        p = trio(tmp / "case")
        p["out"].mkdir()
        dest = p["out"] / name
        data = _plant(dest, outside)
        proc = cli("preflight", *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"])
    else:
        ab = tree.copy(tmp / "case")
        dest = (ab.runs()[0] / name) if name in RUN_FILES else ab.root / name
        data = _plant(dest, outside)
        proc = ab.report(tmp)
    t.returncode, t.output = proc.returncode, proc.stdout + proc.stderr
    if proc.returncode != 0:
        t.problems.append(f"exit {proc.returncode}")
    if "Traceback" in t.output:
        t.problems.append("traceback")
    target = outside / f"precious-{name}"
    if target.read_bytes() != data:
        t.problems.append("wrote through the link: the file it points to was overwritten")
    if dest.is_symlink() or not dest.is_file():
        t.problems.append("the link was left in place of the report")
    if temp_leftovers(tmp):
        t.problems.append("temporary files left")
    return t


def symlinks(tmp: Path, tree: AbTree) -> dict[str, Callable[[], Trial]]:
    return {n: lambda n=n: symlink_trial(tmp / f"link-{n}", tree, n)
            for n in (*RUN_FILES, *SCENARIO_FILES, *PREFLIGHT_FILES)}


# --------------------------------------------------------------------------------------------------------------
# class 3: signals
# --------------------------------------------------------------------------------------------------------------

JOB_FILES = ("cloudai_sbatch_script.sh", "mbridge_config.json", "test-run.toml", "mbridge_payload")


def job_dirs(out: Path) -> list[Path]:
    """The job folders written so far. Walked with ``os.walk``, which skips a folder that vanishes mid-walk: the
    CLI renames its staging folders into place while this polls (``Path.rglob`` raised FileNotFoundError there)."""
    return [Path(d) for d, _, files in os.walk(out) if "cloudai_sbatch_script.sh" in files]


def sweep_signal_trial(tmp: Path, sig: signal.Signals) -> Trial:
    """A real ``dry-run`` of a 40-point sweep gets ``sig`` once a few jobs are written: it stops before the next
    point, keeps the whole jobs it wrote, says how many of the 40, and exits 128 + the signal."""
    t = Trial("signal", f"dry-run-40-points-{sig.name}")
    p = trio(tmp, SWEEP_40)
    proc = subprocess.Popen(cli_argv("dry-run", *scenario_args(p), "--output-dir", str(p["out"]),
                                     log_file=p["work"] / "debug.log"), cwd=p["work"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(job_dirs(p["out"])) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=300)
    finally:  # a failure above must not leave the CLI running for a later test to trip over
        reap(proc)
    t.returncode, t.output = proc.returncode, output
    dirs = job_dirs(p["out"])
    if proc.returncode != 128 + sig:
        t.problems.append(f"exit {proc.returncode}, not {128 + sig}")
    if not 0 < len(dirs) < 40:
        t.problems.append(f"{len(dirs)} job folders: the sweep did not stop")
    if f"stopped by {sig.name}" not in output or f"after {len(dirs)} of 40 point(s)" not in output:
        t.problems.append("the message does not say how many of the 40 points were written")
    if "Traceback" in output:
        t.problems.append("traceback")
    for d in dirs:
        missing = [f for f in JOB_FILES if not (d / f).exists()]
        if missing:
            t.problems.append(f"{d.name}: half-written job (no {missing})")
    empty = [str(d) for d in p["out"].rglob("*") if d.is_dir() and not any(d.iterdir())]
    if empty or temp_leftovers(p["out"]):
        t.problems.append(f"left behind: {empty[:3]} {temp_leftovers(p['out'])[:3]}")
    return t


def preflight_signal_trial(tmp: Path, attempts: int = 6) -> Trial:
    """SIGTERM sent to preflight at the moment its files are being written (its temporary file is seen), an earlier
    preflight.csv / .html present: afterwards each file is either the earlier one or the whole new one."""
    t = Trial("signal", "preflight-SIGTERM-while-writing")
    p = trio(tmp, SWEEP_40)
    p["out"].mkdir()
    ref = cli("preflight", *scenario_args(p), "--output-dir", str(p["out"]), cwd=p["work"])
    if ref.returncode != 0:
        t.problems.append(f"the reference preflight failed: {ref.stderr[-300:]}")
        return t
    new = {n: (p["out"] / n).read_bytes() for n in PREFLIGHT_FILES}
    earlier = {"preflight.csv": b"test,point\nearlier,1\n", "preflight.html": b"<p>earlier</p>\n"}
    hits = 0
    for _ in range(attempts):
        for n, data in earlier.items():
            (p["out"] / n).write_bytes(data)
        proc = subprocess.Popen(cli_argv("preflight", *scenario_args(p), "--output-dir", str(p["out"]),
                                         log_file=None), cwd=p["work"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 300
            while (proc.poll() is None and time.monotonic() < deadline
                   and not any(TEMP.match(n) for n in os.listdir(p["out"]))):
                pass  # no sleep: the moment the temporary file appears is what the signal must hit
            if proc.poll() is None:
                hits += 1
                proc.send_signal(signal.SIGTERM)
            output, _ = proc.communicate(timeout=300)
        finally:
            reap(proc)
        t.returncode, t.output = proc.returncode, output
        # -SIGTERM: it came after the exit status was taken (interrupts.release): killed by it, a shell sees 143
        if proc.returncode not in (0, 128 + signal.SIGTERM, -signal.SIGTERM) or "Traceback" in output:
            t.problems.append(f"exit {proc.returncode}: {output[-300:]}")
        for n in PREFLIGHT_FILES:
            data = (p["out"] / n).read_bytes()
            html_new = n.endswith(".html") and data.startswith(b"<!doctype html>") and data.endswith(b"</html>\n")
            if data not in (earlier[n], new[n]) and not html_new:  # the page carries a time stamp
                t.problems.append(f"{n}: neither the earlier nor the whole new file ({len(data)} bytes)")
        if temp_leftovers(p["out"]):
            t.problems.append("temporary files left")
    t.output += f"\n[{hits} of {attempts} signals arrived while a file was being written]"
    return t


def signals(tmp: Path, tree: AbTree) -> dict[str, Callable[[], Trial]]:
    rows: dict[str, Callable[[], Trial]] = {
        f"dry-run-40-points-{s.name}": lambda s=s: sweep_signal_trial(tmp / f"sweep-{s.name}", s)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    rows["preflight-SIGTERM-while-writing"] = lambda: preflight_signal_trial(tmp / "preflight-term")
    return rows


# --------------------------------------------------------------------------------------------------------------
# class 4: a log that shrinks while it is read
# --------------------------------------------------------------------------------------------------------------


def shrinking_log_trial(tmp: Path, tree: AbTree, tries: int = 5) -> Trial:
    """generate-report ``tries`` times while another thread truncates the iteration log of one run to a few bytes
    and writes it back whole, over and over (a 48 MB log, so that the scan and the truncation overlap)."""
    t = Trial("shrinking log", "generate-report-while-a-rank-log-shrinks")
    ab = tree.copy(tmp / "case")
    run = ab.runs()[0]
    log = max((run / "logs").glob("rank-*.log"), key=lambda q: int(q.stem.split("-")[1]))
    noise = b"host:4242:4300 [0] NCCL INFO Channel 03/0 : 3[3] -> 77[5] [send] via NET/Libfabric/3/GDRDMA\n"
    whole = noise * (48_000_000 // len(noise)) + log.read_bytes()
    log.write_bytes(whole)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with open(log, "r+b") as f:
                f.truncate(100)
            time.sleep(0.002)
            with open(log, "r+b") as f:
                f.seek(0)
                f.write(whole)
            time.sleep(0.002)

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(tries):
            (ab.root / "mbridge_ab.csv").unlink(missing_ok=True)
            proc = ab.report(tmp)
            t.returncode, t.output = proc.returncode, proc.stdout + proc.stderr
            # CloudAI's tarball of the results may fail on a file that changed while it was packed: generate-report
            # then says so and exits 1 (the one acceptable non-zero exit here); never a crash, never SIGBUS
            tarball_only = "1 report(s) could not be written: tarball" in t.output
            if proc.returncode != 0 and not (proc.returncode == 1 and tarball_only):
                t.problems.append(f"exit {proc.returncode}" + (" (SIGBUS)" if proc.returncode in (-7, 135) else ""))
            if "Traceback" in t.output:
                t.problems.append("traceback")
            if not (ab.root / "mbridge_ab.csv").is_file():
                t.problems.append("no A/B table")
    finally:
        stop.set()
        worker.join()
    return t


def shrinking(tmp: Path, tree: AbTree) -> dict[str, Callable[[], Trial]]:
    return {"generate-report-while-a-rank-log-shrinks": lambda: shrinking_log_trial(tmp / "shrink", tree)}


ROWS: dict[str, Callable[[Path, AbTree], dict[str, Callable[[], Trial]]]] = {
    "os failure": os_failures, "planted symlink": symlinks, "signal": signals, "shrinking log": shrinking,
}


def row_ids(cls: str) -> list[str]:
    return list(ROWS[cls](Path("/nonexistent"), None))  # type: ignore[arg-type]


def run_row(cls: str, row: str, tmp: Path, tree: AbTree) -> Trial:
    tmp.mkdir(parents=True, exist_ok=True)
    trial = ROWS[cls](tmp, tree)[row]()
    trial.id = row
    return trial


def run_class(cls: str, tmp: Path, tree: AbTree) -> list[Trial]:
    return [run_row(cls, row, tmp, tree) for row in row_ids(cls)]
