"""What the scenario reports share: finding our runs in a results tree, writing CSV + HTML without half files."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

from cloudai.core import Reporter, TestRun


def runs_of(reporter: Reporter, tdef_type: type) -> list[tuple[TestRun, dict[str, Any]]]:
    """(test run, the config its payload ran with) for every run of ``tdef_type`` that has a config file."""
    reporter.load_test_runs()
    found = []
    for tr in reporter.trs:
        config_path = tr.output_path / "mbridge_config.json"
        if isinstance(tr.test, tdef_type) and config_path.is_file():
            try:
                found.append((tr, json.loads(config_path.read_text())))
            except (OSError, json.JSONDecodeError):
                continue
    return found


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value else f"{value:,.{digits}f}".rstrip("0").rstrip(".")
    return str(value)


def html_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], classes: Iterable[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row, cls in zip(rows, classes or _forever(""), strict=False):
        cells = "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row)
        body.append(f'<tr class="{html.escape(cls)}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _forever(value: str) -> Iterable[str]:
    while True:
        yield value


def html_page(title: str, sections: Sequence[str]) -> str:
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}th{background:#eee}"
        "tr.bad td{background:#fde2e2}tr.warn td{background:#fff4cc}img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>\n"
    )
