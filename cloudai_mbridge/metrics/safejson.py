"""JSON from results files and log lines, read without trusting its shape.

``json.loads`` raises ``RecursionError`` (not ``ValueError``) on text nested past the interpreter's limit, and text
nested just below it decodes into a structure that every recursive walker after it (``json.dumps``, a redaction
pass, pydantic) trips over. One damaged ``REFIT_RESULT`` line or golden file nested 100k deep must invalidate that
run, never every report: :func:`loads` refuses nesting deeper than :data:`MAX_DEPTH` with a ``ValueError`` that the
callers already handle as "damaged".
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # our files nest at most 4 deep (the refit result: config -> model -> field)
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def nesting_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting of JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    for token in _TOKENS.finditer(text):
        c = token.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises ``ValueError`` (never ``RecursionError``) on text nested deeper than ``max_depth``."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    # counting brackets is C speed; the exact scan runs only when the count allows a deep nesting
    if text.count("[") + text.count("{") > max_depth and nesting_depth(text) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels (damaged or hostile)")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read (damaged or hostile)") from None
