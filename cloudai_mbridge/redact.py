"""Secret-looking values, found by name and by shape, and replaced before anything can print or write them.

By name: a key whose name says credential (``HF_TOKEN``, ``WANDB_API_KEY``, ``*_PASSWORD``, ...) followed by ``=`` or
``:`` and a value, as TOML, shell, JSON or a Python dict repr writes it (CloudAI's validation errors echo a whole
``global_env_vars`` table as a dict repr). By shape: Hugging Face tokens (``hf_`` + 30 or more letters/digits), NGC
keys (``nvapi-``), GitHub tokens, AWS access key ids, and W&B API keys (40 hex digits, or ``local-`` + 40 hex: a git
commit id has the same shape and is redacted too in what the terminal and debug.log show; generated files are never
rewritten, a value of that shape is refused there only under a W&B / key name). Plus the values of the secret-named
variables of this process's environment, wherever they turn up.

``install()`` puts the redaction in front of the terminal (sys.stdout / sys.stderr) and every logging handler (CloudAI's
debug.log included) for the rest of the process.
"""

from __future__ import annotations

import io
import logging
import os
import re
import sys
from typing import Any

REDACTED = "<redacted by cloudai-mbridge>"

# A name that ends in a credential word: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY,
# DB_PASSWORD; not TOKENIZERS_PARALLELISM or num_tokens.
_WORDS = r"(?:TOKEN|SECRET|SECRET_KEY|PASSWORD|PASSWD|PASS_?PHRASE|API_?KEY|ACCESS_KEY|PRIVATE_KEY|AUTH_KEY)"
SECRET_NAME = re.compile(rf"(?:^|[_-]){_WORDS}$", re.IGNORECASE)

# Shapes of credentials that are secrets wherever they appear.
TOKEN_SHAPES = re.compile(
    r"\bhf_[A-Za-z0-9]{30,}"
    r"|\bnvapi-[A-Za-z0-9_-]{20,}"
    r"|\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bwandb_v\d+_[A-Za-z0-9_]{20,}"
)
# W&B's API key shape; alone it is also a git commit id, so generated files refuse it only under a key-like name.
WANDB_SHAPE = re.compile(r"\b(?:local-)?[0-9a-f]{40}\b")
_KEYLIKE_NAME = re.compile(r"(WANDB|KEY)", re.IGNORECASE)

# NAME <sep> VALUE where NAME says credential: HF_TOKEN=x, "HF_TOKEN": "x", 'HF_TOKEN': 'x', HF_TOKEN = "x"
_BY_NAME = re.compile(
    rf"""(?P<key>\b(?:[A-Za-z0-9]+[_-])*{_WORDS})(?![A-Za-z0-9_])(?P<sep>['"]?[ \t]*(?::|=)[ \t]*)"""
    r"""(?:(?P<q>['"])(?P<qval>(?:\\.|(?!(?P=q)).)*)(?P=q)|(?P<val>[^\s,'"}\])]+))""",
    re.IGNORECASE,
)

_MIN_ENV_SECRET = 6  # shorter environment values are too likely to be ordinary words


def _env_secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= _MIN_ENV_SECRET}
    return sorted(values, key=len, reverse=True)


def _by_name(m: re.Match[str]) -> str:
    value = m.group("qval") if m.group("q") else m.group("val")
    if not value or value == REDACTED or value.startswith("<redacted"):
        return m.group(0)
    if m.group("q"):
        return f"{m.group('key')}{m.group('sep')}{m.group('q')}{REDACTED}{m.group('q')}"
    return f"{m.group('key')}{m.group('sep')}{REDACTED}"


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by REDACTED."""
    if not text:
        return text
    for secret in _env_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = TOKEN_SHAPES.sub(REDACTED, text)
    text = WANDB_SHAPE.sub(REDACTED, text)
    return _BY_NAME.sub(_by_name, text)


def secret_value_problem(name: str, value: Any) -> str | None:
    """Why the string ``value`` of field/variable ``name`` must not be written into a generated file (None if fine)."""
    if not isinstance(value, str):
        return None
    if TOKEN_SHAPES.search(value):
        return "has the shape of an access token"
    if _KEYLIKE_NAME.search(name) and WANDB_SHAPE.search(value):
        return "has the shape of a W&B API key"
    return None


def string_leaves(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every (dotted path, string) inside nested dicts / lists / pydantic models."""
    if hasattr(data, "model_dump"):
        data = data.model_dump()
    if isinstance(data, str):
        return [(prefix, data)]
    if isinstance(data, dict):
        return [leaf for k, v in data.items() for leaf in string_leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(data, (list, tuple)):
        return [leaf for i, v in enumerate(data) for leaf in string_leaves(v, f"{prefix}[{i}]")]
    return []


class RedactingStream(io.TextIOBase):
    """A text stream that redacts what is written, then passes it on."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(redact(s))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    @property
    def buffer(self) -> Any:
        # binary writes would bypass the redaction: hand out a text-redacting adapter over the real buffer
        return _RedactingBuffer(self._inner)


class _RedactingBuffer(io.RawIOBase):
    def __init__(self, text_stream: Any) -> None:
        self._text = text_stream

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._text.write(redact(data.decode(getattr(self._text, "encoding", None) or "utf-8", "replace")))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


class RedactingFilter(logging.Filter):
    """Renders a record's message (and traceback) once, redacted, so no handler can print the original."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_mbridge_redacted", False):
            return True
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg, record.args = redact(message), ()
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, redact(text)
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        record._mbridge_redacted = True
        return True


_FILTER = RedactingFilter()


def protect_logging() -> None:
    """Put the redaction on every handler the root logger has now (call again after handlers are added)."""
    for handler in logging.getLogger().handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)


def install() -> None:
    """Redact the terminal and the logging handlers of this process."""
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]
    protect_logging()
