"""Where a page's numbers came from: the system, the runs (when, on which node, with which software, as their logs
recorded it), who wrote the page (host, date, plugin and CloudAI versions, the command line) and links to the logs.

The runs' software comes from their own rank-0 log: the training payload's ``MBRIDGE_VERSIONS {json}`` line, or the
``versions`` of the refit payload's ``REFIT_CONFIG {json}`` (payload/versions.py writes both). A run from before
that line existed says "not recorded"; a value that is not a plain version string (damaged log) is not shown. The
command line goes through redact.py: no secret reaches the page. Links are relative to the page's folder.
"""

from __future__ import annotations

import html
import os
import platform
import re
import shlex
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from ..metrics import safejson

# (key in the recorded dict, the name a reader knows), in the order the page shows them.
SOFTWARE = (
    ("megatron_bridge", "Megatron-Bridge"),
    ("megatron_core", "Megatron-Core"),
    ("transformer_engine", "Transformer Engine"),
    ("torch", "PyTorch"),
    ("cuda", "CUDA (PyTorch's build)"),
    ("nccl", "NCCL"),
    ("python", "Python"),
)
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_:~-]{0,63}")
HEAD_BYTES = 1 << 20  # the versions line is among the first lines rank 0 prints
_TAGS = (("MBRIDGE_VERSIONS ", None), ("REFIT_CONFIG ", "versions"))
# What the engines use of Megatron-Bridge: the mcore engine and the refit payload never import it.
BRIDGE_UNUSED = {"mcore": "not used (engine mcore)", "refit": "not used (refit: megatron.core.resharding)"}


def recorded_versions(run_dir: Path) -> dict[str, str]:
    """The software a run recorded in its rank-0 log (empty when it recorded none or the line is damaged)."""
    try:
        from ..safe_read import MAX_LOG_BYTES, InputFileError, read_head

        head = read_head(run_dir / "logs" / "rank-0.log", HEAD_BYTES, MAX_LOG_BYTES, "a log")
    except (OSError, InputFileError):
        return {}
    for raw in head.splitlines():
        line = raw.decode("utf-8", "replace")
        for tag, key in _TAGS:
            at = line.find(tag)
            if at < 0:
                continue
            try:
                data = safejson.loads(line[at + len(tag):])
            except ValueError:
                continue
            data = data.get(key) if key and isinstance(data, dict) else data
            if isinstance(data, dict):
                return {k: v for k, v in data.items()
                        if isinstance(k, str) and isinstance(v, str) and _SAFE.fullmatch(v)}
    return {}


def package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except Exception:
        return None


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that wrote the page, as a user would type it (``python3 -m <module>`` for a module entry point),
    with secret-looking values redacted."""
    from ..redact import redact

    args = list(sys.argv if argv is None else argv)
    if not args:
        return ""
    first = Path(args[0])
    package = Path(__file__).resolve().parents[1]  # cloudai_mbridge/
    if first.suffix == ".py" and first.resolve().is_relative_to(package):
        module = first.resolve().relative_to(package.parent).with_suffix("").parts
        words = ["python3", "-m", ".".join(module[:-1] if module[-1] == "__main__" else module)]
    elif first.suffix == ".py":
        words = ["python3", args[0]]
    else:
        words = [first.name]
    return redact(shlex.join([*words, *args[1:]]))


@dataclass
class RunSource:
    """One run behind the page: its name on the page, its folder and what the reporter already knows of it."""

    label: str
    run_dir: Path
    engine: str | None = None  # bridge / mcore / refit: whether Megatron-Bridge took part
    started: str | None = None  # first and last timestamps its logs carry ("YYYY-MM-DD HH:MM:SS", UTC as logged)
    ended: str | None = None
    failed_rank: int | None = None  # the rank whose log holds the first error: linked too


@dataclass
class Provenance:
    page_dir: Path
    system: str | None
    scenario: str | None
    runs: list[RunSource]
    command: str
    written_utc: str
    host: str
    plugin: str | None
    cloudai: str | None
    recorded: list[dict[str, str]] = field(default_factory=list)
    elsewhere: dict[str, str] = field(default_factory=dict)  # software recorded outside the logs
    elsewhere_source: str | None = None
    note: str | None = None

    # ---- what the runs recorded -------------------------------------------------------------------------------
    def software(self) -> list[tuple[str, str]]:
        """(name, what the runs recorded): one value, or each value with its count of runs when they differ."""
        out = []
        for key, name in SOFTWARE:
            values: Counter[str] = Counter()
            for run, rec in zip(self.runs, self.recorded, strict=True):
                if key in rec:
                    values[rec[key]] += 1
                elif key == "megatron_bridge" and run.engine in BRIDGE_UNUSED:
                    values[BRIDGE_UNUSED[run.engine]] += 1
                else:
                    values["not recorded"] += 1
            if not values or set(values) == {"not recorded"}:
                continue
            out.append((name, _counted(values, len(self.runs))))
        return out

    def hosts(self) -> str | None:
        hosts = Counter(rec["host"] for rec in self.recorded if "host" in rec)
        return _counted(hosts, len(self.runs)) if hosts else None

    def dates(self) -> str | None:
        """First start to last end among the runs' logged timestamps (recorded payload start as a fallback)."""
        starts = [r.started or rec.get("date_utc") for r, rec in zip(self.runs, self.recorded, strict=True)]
        ends = [r.ended or r.started or rec.get("date_utc") for r, rec in zip(self.runs, self.recorded, strict=True)]
        starts = sorted(_short(s) for s in starts if s)
        ends = sorted(_short(e) for e in ends if e)
        if not starts:
            return None
        first, last = starts[0], ends[-1] if ends else starts[0]
        if first[:10] == last[:10]:
            last = last[11:]
        return first if first == last else f"{first} to {last}"

    # ---- HTML --------------------------------------------------------------------------------------------------
    def summary_html(self) -> str:
        """One line under the title: what ran, where, when, with what, and who wrote the page."""
        e = html.escape
        n = len(self.runs)
        parts = [f"{n} run{'s' if n != 1 else ''}" if n else "nothing ran (checked only)"]
        if self.system:
            parts[0] += f" on system <b>{e(self.system)}</b>"
        if dates := self.dates():
            parts.append(e(dates) + " (UTC as logged)")
        software = self.software()
        named = {name for name, _ in software}
        software += [(_label(k), v) for k, v in self.elsewhere.items()
                     if k in dict(SOFTWARE) and _label(k) not in named]
        order = [name for _, name in SOFTWARE]
        software.sort(key=lambda nv: order.index(nv[0]) if nv[0] in order else len(order))
        parts += [f"{e(name)} {e(value)}" for name, value in software[:3]]
        parts.append(f"page written {e(self.written_utc)} by cloudai-mbridge {e(self.plugin or '?')}"
                     + (f" with CloudAI {e(self.cloudai)}" if self.cloudai else ""))
        return f"<p class='ran'>{' · '.join(parts)} · <a href='#provenance'>provenance and logs</a></p>"

    def block_html(self) -> str:
        e = html.escape
        rows: list[tuple[str, str]] = []
        if self.system:
            rows.append(("system", e(self.system)))
        if self.scenario:
            rows.append(("scenario", e(self.scenario)))
        if self.runs:
            rows.append(("runs", f"{len(self.runs)}" + (f", {e(self.dates() or '')} (UTC as logged)"
                                                         if self.dates() else ", dates not in their logs")))
            rows.append(("node of rank 0", e(self.hosts() or "not recorded in the logs")))
            software = self.software()
            recorded = any(self.recorded)
            listed = "; ".join(f"{e(name)} {e(value)}" for name, value in software)
            if not recorded:
                listed += ("; " if listed else "") + ("versions not recorded in their logs (runs from before the "
                                                      "payload's MBRIDGE_VERSIONS line)")
            rows.append(("software of the runs (their logs)", listed))
        if self.elsewhere:
            source = e(self.elsewhere_source or "another record")
            rows.append(("", f"<i>not in the logs; recorded by {source}:</i>"))
            rows += [(_label(k), e(v)) for k, v in self.elsewhere.items()]
        rows.append(("page written", f"{e(self.written_utc)} on host {e(self.host)} by cloudai-mbridge "
                     f"{e(self.plugin or 'unknown')}, CloudAI {e(self.cloudai or 'not installed')}"))
        rows.append(("command line", f"<code>{e(self.command)}</code>"))
        body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" if k else f"<tr><td colspan='2'>{v}</td></tr>"
                       for k, v in rows)
        note = f"<p class='note'>{e(self.note)}</p>" if self.note else ""
        return (f"<section class='prov' id='provenance'><h2>Provenance</h2>{note}<table class='kv'>{body}</table>"
                f"{self.logs_html()}</section>")

    def logs_html(self) -> str:
        if not self.runs:
            return ""
        items = []
        for run in self.runs:
            links = [_link(self.page_dir, run.run_dir, "folder")]
            for rank, log in _rank_logs(run.run_dir, run.failed_rank):
                links.append(_link(self.page_dir, log, f"rank {rank}" + (" (first error)"
                                                                         if rank == run.failed_rank else "")))
            for name in ("stdout.txt", "stderr.txt"):  # CloudAI's Slurm job output, where it exists
                if (run.run_dir / name).is_file():
                    links.append(_link(self.page_dir, run.run_dir / name, name))
            items.append(f"<li><b>{html.escape(run.label)}</b>: {' · '.join(links)}</li>")
        return f"<h3>Logs</h3><ul>{''.join(items)}</ul>"


def collect(page_dir: Path, runs: Sequence[RunSource], *, system: str | None = None, scenario: str | None = None,
            elsewhere: Mapping[str, str] | None = None, elsewhere_source: str | None = None,
            note: str | None = None, argv: Sequence[str] | None = None) -> Provenance:
    return Provenance(
        page_dir=page_dir,
        system=system,
        scenario=scenario,
        runs=list(runs),
        command=command_line(argv),
        written_utc=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        host=platform.node() or "unknown",
        plugin=package_version("cloudai-mbridge") or _plugin_version(),
        cloudai=package_version("cloudai"),
        recorded=[recorded_versions(r.run_dir) for r in runs],
        elsewhere=dict(elsewhere or {}),
        elsewhere_source=elsewhere_source,
        note=note,
    )


def _plugin_version() -> str:
    from .. import __version__

    return __version__


def _counted(values: Counter[str], total: int) -> str:
    if len(values) == 1:
        return next(iter(values))
    return ", ".join(f"{v} ({n} of {total} runs)" for v, n in values.most_common())


def _short(stamp: str) -> str:
    """'2026-11-22 15:47:38.160101' / '2026-11-22T15:47:15+00:00' -> '2026-11-22 15:47:38'."""
    return stamp.replace("T", " ")[:19]


def _label(key: str) -> str:
    names = {**dict(SOFTWARE), "date_utc": "date (UTC)", "command": "command line of the runs"}
    return names.get(key, key.replace("_", " "))


def _rank_logs(run_dir: Path, failed_rank: int | None) -> list[tuple[int, Path]]:
    """Rank 0, the last rank (Megatron prints the iteration lines there) and the failing rank's log."""
    logs = {}
    for path in (run_dir / "logs").glob("rank-*.log"):
        number = path.stem.removeprefix("rank-")
        if number.isdecimal() and len(number) <= 9:
            logs[int(number)] = path
    if not logs:
        return []
    wanted = {min(logs), max(logs)} | ({failed_rank} if failed_rank in logs else set())
    return [(rank, logs[rank]) for rank in sorted(wanted)]


def _link(page_dir: Path, target: Path, text: str) -> str:
    try:
        rel = os.path.relpath(target, page_dir)
    except ValueError:  # another drive: no relative path
        rel = str(target)
    href = quote(Path(rel).as_posix() + ("/" if target.is_dir() else ""))
    return f"<a href='{html.escape(href)}'>{html.escape(text)}</a>"
