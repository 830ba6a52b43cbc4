"""The HTML every page of the plugin shares: the brand line, the style, tables, a headline box. No CloudAI import.

Pages are self-contained: no script, no web font, no CDN; images are inline PNGs. They fit a 1,400 px window. The
brand line at the top says the page is cloudai-mbridge's, so it cannot be mistaken for one of CloudAI's own reports
written into the same folder (``<scenario>.html``, ``*-dse-report.html``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .provenance import Provenance

BRAND = "cloudai-mbridge"
BRAND_TAGLINE = "Megatron-Bridge MoE plugin for CloudAI"

STYLE = (
    "body{font-family:sans-serif;margin:0 auto 2em;max-width:1400px;padding:0 1em;color:#111}"
    ".brand{display:flex;gap:1em;align-items:baseline;flex-wrap:wrap;background:#1a1a1a;color:#fff;"
    "padding:8px 14px;margin:0 -1em 0;border-bottom:5px solid #76b900}"
    ".brand b{color:#76b900;font-size:18px;letter-spacing:.02em}.brand .what{font-size:14px}"
    ".brand .not{margin-left:auto;font-size:12px;color:#ccc}"
    "h1{margin:.6em 0 .2em;font-size:26px}h2{margin:1.2em 0 .4em;font-size:20px}"
    ".ran{color:#333;font-size:14px;margin:.2em 0 1em}"
    "table{border-collapse:collapse;margin:.6em 0 1em;font-size:13px;max-width:100%}"
    "td,th{border:1px solid #bbb;padding:3px 6px;text-align:right;vertical-align:top}"
    "th{background:#eee;font-weight:600;white-space:normal}td.text,th.text{text-align:left;overflow-wrap:anywhere;"
    "max-width:32em}td.short{white-space:nowrap;overflow-wrap:normal}"
    "tr.bad td{background:#fde2e2}tr.warn td{background:#fff4cc}img{max-width:100%}"
    ".facts{color:#333}"
    ".headline{border:1px solid #bbb;border-left:6px solid #76b900;background:#f7f9f2;padding:.5em 1em;"
    "margin:.8em 0;font-size:15px}.headline ul{margin:.3em 0;padding-left:1.2em}.headline li{margin:.25em 0}"
    ".verdict{display:inline-block;padding:1px 7px;border-radius:3px;font-weight:600;white-space:nowrap}"
    ".v-ok{background:#d8f0c8;color:#1d4d00}.v-warn{background:#ffe9a8;color:#5c4400}"
    ".v-bad{background:#f8c9c9;color:#6d0000}.v-none{background:#e4e4e4;color:#333}"
    ".note{color:#444;font-size:13px}.placeholder{color:#666;font-size:13px}"
    "table.kv th{text-align:left;background:#f3f3f3;width:16em}table.kv td{text-align:left}"
    ".prov{margin-top:2em;border-top:2px solid #ddd}.prov code{font-size:12px;overflow-wrap:anywhere}"
    ".prov ul{margin:.2em 0;padding-left:1.2em;columns:2;font-size:13px}"
    "ul.legend{margin:-.4em 0 1.2em;padding-left:1.2em;columns:2;column-gap:2.5em;font-size:12px;color:#333}"
    "ul.legend li{break-inside:avoid;margin:0 0 .15em}"
)


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value else f"{value:,.{digits}f}".rstrip("0").rstrip(".")
    return str(value)


def html_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    classes: Iterable[str] | None = None,
    headers: Mapping[str, str] | None = None,
    definitions: Mapping[str, str] | None = None,
) -> str:
    """A table; ``headers`` maps a column key to the words (with unit) shown above it. Text cells (strings that
    are not numbers) are left-aligned and wrap, so a long failure line cannot widen the table past the page.
    ``definitions`` maps a column key to what the column holds: they become the legend under the table
    (:func:`legend`), one line per column, in the columns' order."""
    head = "".join(f"<th>{html.escape((headers or {}).get(c, c))}</th>" for c in columns)
    body = []
    for row, cls in zip(rows, classes or _forever(""), strict=False):
        cells = "".join(f"<td{_cell_class(v)}>{html.escape(fmt(v))}</td>" for v in row)
        body.append(f'<tr class="{html.escape(cls)}">{cells}</tr>')
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    if definitions is None:
        return table
    return table + legend([((headers or {}).get(c, c), definitions.get(c, "")) for c in columns])


def legend(items: Sequence[tuple[str, str]]) -> str:
    """The legend under a table: each column's header (as shown above it) and its definition, escaped."""
    lis = "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(text)}</li>" for name, text in items)
    return f"<ul class='legend'>{lis}</ul>"


def _cell_class(value: Any) -> str:
    """Numbers right-aligned; a short text (a mode, a status) on one line; a long one (a failure line, a path)
    wraps anywhere, so it cannot widen the table past the page."""
    if not _is_text(value):
        return ""
    return " class='text short'" if len(value) <= SHORT_TEXT else " class='text'"


SHORT_TEXT = 16


def _is_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        float(value.replace(",", ""))
    except ValueError:
        return True
    return False


def _forever(value: str) -> Iterable[str]:
    while True:
        yield value


def verdict_badge(text: str, level: str) -> str:
    """A coloured verdict: ``level`` is ok (green), warn (amber), bad (red) or none (grey)."""
    return f"<span class='verdict v-{html.escape(level)}'>{html.escape(text)}</span>"


def headline(title: str, items: Sequence[str]) -> str:
    """The box a reader sees first: what won, by how much, how sure; ``items`` are HTML (escape what you pass)."""
    lis = "".join(f"<li>{item}</li>" for item in items)
    return f"<div class='headline'><b>{html.escape(title)}</b><ul>{lis}</ul></div>"


def html_page(title: str, sections: Sequence[str], provenance: Provenance | None = None, kind: str = "report") -> str:
    """The page: brand line, title, one line of what ran (from ``provenance``), the sections, then the provenance
    block (system, host, dates, versions, command line, links to the logs)."""
    brand = (f"<header class='brand'><b>{BRAND}</b><span class='what'>{html.escape(kind)} · {BRAND_TAGLINE}</span>"
             "<span class='not'>written by the plugin, not by CloudAI</span></header>")
    ran = provenance.summary_html() if provenance is not None else ""
    block = provenance.block_html() if provenance is not None else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{BRAND}: {html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{brand}<h1>{html.escape(title)}</h1>{ran}{''.join(sections)}{block}"
        "</body></html>\n"
    )
