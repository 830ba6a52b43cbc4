"""Characters a terminal does not show, or shows as another (the one check for names, #SBATCH fields and Kubernetes
names and labels): control and format characters (bidi controls U+202A-U+202E, U+2066-U+2069, U+200E/U+200F,
U+061C; zero-width U+200B-U+200D, U+2060, the byte-order mark U+FEFF; soft hyphen), private-use and unassigned code
points, line and paragraph separators, and every space but ' '."""

from __future__ import annotations

import unicodedata

_CATEGORIES = ("Cc", "Cf", "Co", "Cn", "Zl", "Zp")


def invisible(text: str) -> list[tuple[int, str]]:
    """(index, character) of each such character of ``text``."""
    return [(i, ch) for i, ch in enumerate(text)
            if unicodedata.category(ch) in _CATEGORIES or (ch != " " and (ch.isspace() or unicodedata.category(ch) ==
                                                                          "Zs"))]


def describe_invisible(text: str, most: int = 3) -> str:
    """The first ``most`` such characters as "U+202E RIGHT-TO-LEFT OVERRIDE at position 5" (1-based), '' if none."""
    found = invisible(text)
    shown = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, 'control character')} at position {i + 1}"
                      for i, ch in found[:most])
    return shown + (f" and {len(found) - most} more" if len(found) > most else "")
