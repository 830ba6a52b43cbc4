"""Issue 46, item 2: every text file the plugin (and its payload) opens names its encoding.

``open()``, ``Path.read_text`` / ``write_text`` / ``Path.open`` and ``subprocess`` in text mode without
``encoding=`` use the locale's encoding: under ISO-8859-1 a UTF-8 TOML or JSON reads as mojibake and a file written
that way is no UTF-8. The CLI starts itself in UTF-8 mode (cli/startup.py), but the payload runs in the job's own
interpreter and locale, and the package's modules are also imported by other programs: each call says UTF-8 itself.
"""

from __future__ import annotations

import ast

from helpers import ROOT

_TEXT_CALLS = {"open", "read_text", "write_text", "fdopen", "TextIOWrapper"}
_SUBPROCESS = {"run", "Popen", "check_output"}


def _mode(call: ast.Call, index: int) -> str | None:
    if len(call.args) > index and isinstance(call.args[index], ast.Constant):
        return str(call.args[index].value)
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    return None


def unnamed_encodings(source: str, name: str) -> list[str]:
    """``name:line: call`` for each text-mode open / read / write / subprocess call in ``source`` without
    ``encoding=``. ``os.open`` is a descriptor, safe_read.read_text(path, limit) decodes UTF-8 itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else None
        called = attr or (func.id if isinstance(func, ast.Name) else None)
        keywords = {kw.arg for kw in node.keywords}
        if "encoding" in keywords or called is None:
            continue
        if called in _SUBPROCESS:
            if not keywords & {"text", "universal_newlines"}:
                continue
        elif called in _TEXT_CALLS:
            if called in ("read_text", "write_text") and attr is None:
                continue  # safe_read.read_text and friends: functions, not Path's methods
            if called == "open" and isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "os":
                continue
            if called in ("open", "fdopen"):
                mode = _mode(node, 0 if attr and called == "open" else 1)
                if mode and "b" in mode:
                    continue
        else:
            continue
        found.append(f"{name}:{node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_every_text_open_names_its_encoding() -> None:
    found = []
    for path in sorted((ROOT / "cloudai_mbridge").rglob("*.py")):
        found += unnamed_encodings(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "text opened in the locale's encoding (add encoding=\"utf-8\"):\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for() -> None:
    """Each kind it must catch, and what it must leave alone."""
    bad = """
open(p)
open(p, "w")
Path(p).read_text()
Path(p).write_text(s)
p.open()
p.open("a", newline="")
subprocess.run(a, text=True)
subprocess.Popen(a, universal_newlines=True)
io.TextIOWrapper(b)
"""
    good = """
open(p, encoding="utf-8")
open(p, "rb")
p.open("wb")
os.open(p, os.O_RDONLY)
read_text(p, LIMIT)
Path(p).read_text(encoding="utf-8", errors="replace")
subprocess.run(a, capture_output=True)
subprocess.run(a, text=True, encoding="utf-8")
"""
    assert len(unnamed_encodings(bad, "bad")) == len(bad.strip().splitlines())
    assert unnamed_encodings(good, "good") == []
