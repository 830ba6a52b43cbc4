"""Secret-looking values, found by name and by shape, and replaced before anything can print or write them.

By name: a key whose name ends in a credential word (``HF_TOKEN``, ``HF_TKN``, ``WANDB_API_KEY``,
``AWS_SECRET_ACCESS_KEY``, ``*_PASSWORD``, ``*_PASSWD``, ``*_PASSPHRASE``, ``*_SECRET``, ``*_PRIVATE_KEY``,
``*_AUTH_KEY``; SECRET_NAME) followed by ``=`` or ``:`` and a value, as TOML, shell, JSON or a Python dict repr writes
it (CloudAI's validation errors echo a whole ``global_env_vars`` table as a dict repr), also inside free text such as
srun arguments (``--export=ALL,AWS_SECRET_ACCESS_KEY=...``). A value that refers to a variable (``$HF_TOKEN``) is
not a secret. What the terminal and logs show is also redacted after ``CREDENTIALS`` (the Kubernetes credentials
setting). By shape, whatever the name: Hugging Face tokens (``hf_`` + 30 or more letters/digits), NGC keys
(``nvapi-``), GitHub tokens, AWS access key ids, W&B API keys (40 hex digits, or ``local-`` + 40 hex: a git commit id
has the same shape and is redacted too in what the terminal and debug.log show, unless the text says it is a
commit: right after ``@`` as in pip's ``git+https://...@<commit>``, or after the word ``commit``; generated files are
never rewritten, a value of that shape is refused there only under a W&B / key name), and the password of a URL
(``https://user:password@host``). An environment variable's value is also refused when it looks random
(``looks_random``: 24 or more letters, digits, ``+``, ``/``, ``=`` without a separator, letters and digits mixed, not
hex only, about 4 bits of entropy per character), whatever its name. Plus the values of the secret-named variables of
this process's environment, wherever they turn up.

``install()`` puts the redaction in front of the terminal (sys.stdout / sys.stderr) and every logging handler (CloudAI's
debug.log included) for the rest of the process.
"""

from __future__ import annotations

import errno
import io
import logging
import math
import os
import re
import sys
from collections import Counter
from typing import Any

REDACTED = "<redacted by cloudai-mbridge>"

# A name that ends in a credential word: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY,
# DB_PASSWORD; not TOKENIZERS_PARALLELISM or num_tokens.
_WORD_LIST = r"TOKEN|TKN|SECRET|SECRET_KEY|PASSWORD|PASSWD|PASS_?PHRASE|API_?KEY|ACCESS_KEY|PRIVATE_KEY|AUTH_KEY"
_WORDS = rf"(?:{_WORD_LIST})"
# Also glued to the word before it (PGPASSWORD, SMTPPASSWORD, WANDBAPIKEY, HFTOKEN, LOGIN_CREDENTIAL), and the short
# ones only as a whole word (MYSQL_PWD, SSH_PASS, PASS; not PWD / OLDPWD, the shell's working folder; not a
# plural CREDENTIALS, which names files and Secrets: GOOGLE_APPLICATION_CREDENTIALS, CLOUDAI_MBRIDGE_K8S_CREDENTIALS).
SECRET_NAME = re.compile(rf"(?:^|[_-]){_WORDS}$|(?:TOKEN|SECRET|PASSWORD|PASSWD|APIKEY|CREDENTIAL)$"
                         r"|(?:^|[_-])(?:CREDS?|PASS)$|[_-]PWD$", re.IGNORECASE)

# Shapes of credentials that are secrets wherever they appear.
# No word boundary in front: a token glued to other text ("xhf_...", "run-hf_...") is still a token.
TOKEN_SHAPES = re.compile(
    r"hf_[A-Za-z0-9]{30,}"
    r"|nvapi-[A-Za-z0-9_-]{20,}"
    r"|(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}"
    r"|(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])"
    r"|wandb_v\d+_[A-Za-z0-9_]{20,}"
)
# scheme://user:password@host: the password is a secret wherever the URL appears.
# Anchored on "://" (the scheme before it stays outside the match): a scheme pattern in front would be tried at every
# word start of a long hyphenated text, each try scanning to its end (quadratic).
URL_PASSWORD = re.compile(r"(?P<head>://[^\s/@:'\"]*:)(?P<password>[^\s/@]+)(?=@)")  # a password may hold ' or "
# W&B's API key shape; alone it is also a git commit id, so generated files refuse it only under a key-like name.
WANDB_SHAPE = re.compile(r"\b(?:local-)?[0-9a-f]{40}\b")
_KEYLIKE_NAME = re.compile(r"(WANDB|KEY)", re.IGNORECASE)
# What is shown keeps a commit id where the text says it is one: after "@" (pip's git+https://...@<commit>) or the
# word commit ("commit 5b5c...", "/commit/5b5c..."), so an install hint can be copied (issue 32).
_WANDB_SHOWN = re.compile(r"(?<!@)(?<!commit )(?<!commit/)(?<!commit=)(?<!commit:)" + WANDB_SHAPE.pattern,
                          re.IGNORECASE)

# NAME <sep> VALUE where NAME says credential: HF_TOKEN=x, "HF_TOKEN": "x", 'HF_TOKEN': 'x', HF_TOKEN = "x"; what is
# shown (not what is refused) also hides the value of a ...CREDENTIALS setting (the Kubernetes one names Secrets, but a
# raw token pasted there must not be echoed).
# Linear time on any text (issue 32): the name starts only where a run of name characters starts (the lookbehind), so
# one long run (a 100,000-character name, "ab-ab-ab-...") is tried once, not from each of its word starts; the name's
# prefix is one character class, not nested repeats; a quoted value is [^quote\\] or an escape, never both, and its
# closing quote is optional, so a value that never closes (a line of '"' or '\\') matches to where it stops instead
# of failing after a scan and being tried again from the next name.
_NAME_CHARS = "A-Za-z0-9_-"


def _by_name_pattern(words: str) -> re.Pattern[str]:
    return re.compile(
        rf"""(?<![{_NAME_CHARS}])(?P<key>(?:[{_NAME_CHARS}]*[_-])?{words})(?![A-Za-z0-9_])"""
        r"""(?P<sep>['"]?[ \t]*[:=][ \t]*)"""
        r"""(?:(?P<q>")(?P<dq>(?:[^"\\\n]|\\.)*)(?P<dclose>"?)"""
        r"""|(?P<sq>')(?P<sqv>(?:[^'\\\n]|\\.)*)(?P<sclose>'?)"""
        r"""|(?P<val>[^\s,'"}\])]+))""",
        re.IGNORECASE,
    )


_BY_NAME = _by_name_pattern(_WORDS)
_BY_NAME_SHOWN = _by_name_pattern(rf"(?:{_WORD_LIST}|CREDENTIALS)")

_MIN_ENV_SECRET = 6  # shorter environment values are too likely to be ordinary words


_REMEMBERED: set[str] = set()


def remember(value: Any) -> None:
    """Redact ``value`` verbatim from now on, wherever it turns up: a value read under a credential name that has no
    shape of its own (error messages may quote it cut off from its name, as pydantic's ``input_value=`` does)."""
    if isinstance(value, str) and len(value.strip()) >= _MIN_ENV_SECRET:
        _REMEMBERED.add(value.strip())


def _env_secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= _MIN_ENV_SECRET}
    return sorted(values | _REMEMBERED, key=len, reverse=True)


def _quote(m: re.Match[str]) -> str:
    return m.group("q") or m.group("sq") or ""


def _named_value(m: re.Match[str]) -> str:
    if m.group("q"):
        return m.group("dq")
    return m.group("sqv") if m.group("sq") else m.group("val")


def _is_value(value: str) -> bool:
    """A value worth hiding: not empty, not a placeholder (<redacted ...>, <secret-name>), not a reference to a
    variable ($HF_TOKEN)."""
    return bool(value) and not value.startswith(("<", "$"))


def _by_name(m: re.Match[str]) -> str:
    if not _is_value(_named_value(m)):
        return m.group(0)
    if quote := _quote(m):
        close = m.group("dclose") if m.group("q") else m.group("sclose")
        return f"{m.group('key')}{m.group('sep')}{quote}{REDACTED}{close}"
    return f"{m.group('key')}{m.group('sep')}{REDACTED}"


# What each pattern cannot match without (ASCII text only: under IGNORECASE ``re`` also folds non-ASCII letters, the
# Kelvin sign to k, the long s to s): a report's text of numbers (a 10^6-step training_report.json is ~200 MB) skips
# the patterns' scans, at ~0.4 s a MB, for a few ``in`` checks. The result is the same either way
# (tests/test_redact_prefilter.py compares it with every pattern run on random texts).
_TOKEN_PREFIXES = ("hf_", "nvapi-", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "AKIA", "wandb_v")
_NAME_WORDS = ("token", "tkn", "secret", "pass", "api", "_key", "credentials")  # each of _WORD_LIST's has one
_HEX_TABLE = bytes(0x78 if chr(i) in "0123456789abcdefABCDEF" else 0x20 for i in range(256))
_HEX_RUN = b"x" * 40  # WANDB_SHAPE's 40 hex digits in a row


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by REDACTED."""
    if not text:
        return text
    for secret in _env_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _redact_shapes(text, prefilter=text.isascii())


def _redact_shapes(text: str, prefilter: bool) -> str:
    """The shape and name patterns over ``text``; ``prefilter`` (ASCII text): a pattern runs only where the text
    holds what it needs (the replacement, REDACTED, holds none of it, so the checks of the text as given decide)."""
    lower = text.lower() if prefilter else ""
    if not prefilter or any(prefix in text for prefix in _TOKEN_PREFIXES):
        text = TOKEN_SHAPES.sub(REDACTED, text)
    if not prefilter or _HEX_RUN in text.encode("ascii", "replace").translate(_HEX_TABLE):
        text = _WANDB_SHOWN.sub(REDACTED, text)
    if not prefilter or "://" in text:
        text = URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    if not prefilter or any(word in lower for word in _NAME_WORDS):
        text = _BY_NAME_SHOWN.sub(_by_name, text)
    return text


def redact_report(text: str) -> str:
    """A report file's whole text (CSV, HTML page, summary JSON) as written: ``redact``, so that a secret a log line
    carried (a failure line, a warning, an error) never lands in a file that is shared, whatever column, cell or key
    took it there (issue 32). The writers also redact each log line where it is read (metrics/signals.py)."""
    return redact(text)


def text_secret_problem(text: Any) -> str | None:
    """Why free text (srun arguments, a mount, a description, a name) holds a secret (None if it does not): a token's
    shape, a URL with a password, or NAME=value where NAME says credential."""
    if not isinstance(text, str):
        return None
    if TOKEN_SHAPES.search(text):
        return "has the shape of an access token"
    if URL_PASSWORD.search(text):
        return "holds a URL with a password (user:password@host)"
    if any(_assigned(m) for m in _BY_NAME.finditer(text)):
        return "sets a credential by name (NAME=value where NAME ends in TOKEN, SECRET, PASSWORD, API_KEY, ...)"
    return None


def _assigned(m: re.Match[str]) -> bool:
    """NAME=value, or "NAME": "value" as JSON / a dict writes it, with a value that is no placeholder, variable or
    path; not a bare ``name:x`` (a mount's src:dst, a Secret's name:key)."""
    value, sep = _named_value(m), m.group("sep")
    return _is_value(value) and not value.startswith("/") and ("=" in sep or sep[0] in "'\"")


_RANDOM = re.compile(r"[A-Za-z0-9+/=]{24,}")


def looks_random(value: str) -> bool:
    """A long run of letters and digits without a separator that reads like a generated key (what an API token
    under an innocent name looks like): 24+ of ``[A-Za-z0-9+/=]``, not a path, letters and digits mixed, not hex
    only (a commit id), at least 4 bits of entropy per character. Names, paths, numbers, lists and host names have
    separators or fail one of these."""
    if not _RANDOM.fullmatch(value) or value.startswith("/"):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", value):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 4.0


def secret_value_problem(name: str, value: Any, environment: bool = False) -> str | None:
    """Why the string ``value`` of field/variable ``name`` must not be written into a generated file (None if fine).
    ``environment``: the value of an environment variable, also refused when it ``looks_random``."""
    if not isinstance(value, str):
        return None
    why = text_secret_problem(value)
    if why:
        return why
    if _KEYLIKE_NAME.search(name) and WANDB_SHAPE.search(value):
        return "has the shape of a W&B API key"
    if environment and looks_random(value.strip()):
        return "looks like a generated key or token (a long random string)"
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
    """A text stream that redacts what is written, then passes it on. A write the operating system refuses (stdout
    redirected to a full disk, /dev/full, a closed pipe) is kept in ``error``, not raised: the command goes on and
    says so once at its end (cli/app.py), instead of a logging traceback per line."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner if inner is not None else _ClosedStream()  # started with the stream closed (>&-)
        self.error: OSError | None = None
        try:
            self._colours = bool(self._inner.isatty())
        except (OSError, ValueError, AttributeError):
            self._colours = False
        if getattr(inner, "errors", None) == "strict":  # PYTHONIOENCODING=ascii: a character it lacks is \xe9
            import contextlib

            with contextlib.suppress(AttributeError, ValueError, OSError):
                inner.reconfigure(errors="backslashreplace")

    def write(self, s: str) -> int:
        if self.error is None:
            try:
                self._inner.write(neutralize(redact(s), colours=self._colours))
            except OSError as exc:
                self._failed(exc)
        return len(s)

    def flush(self) -> None:
        if self.error is None:
            try:
                self._inner.flush()
            except OSError as exc:
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        """Keep the first error; what is still buffered goes to the null device, so the interpreter's own flush at
        exit does not print another traceback."""
        import contextlib

        self.error = exc
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._inner.fileno())
            os.close(null)

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
        return _RedactingBuffer(self)  # through write(): a refused or closed stream is noted, not raised


class _ClosedStream:
    """Standard output or error the process started without (``>&-``): the first text written to it is an error
    (EBADF), said once at the end (cli/app.py); an empty write is none."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, s: str) -> int:
        if s:
            raise OSError(errno.EBADF, "the stream was closed when the command started")
        return 0

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("the stream was closed when the command started")


# What a text from a file (a file name, a field, a scenario name, a log line) can carry to the console and the
# terminal would act on: every escape sequence (ESC [ 2 J clears the screen, OSC 52 writes the clipboard, OSC 0 the
# window title), every other C0 control but line feed and tab (a CR not before LF rewrites the line, BS erases), DEL
# and the C1 controls (8-bit CSI, OSC, DCS...). Shown as text (\x1b[2J). On a terminal, colours (SGR: ESC [ ... m,
# what rich's tables write) pass; into a pipe or a file nothing passes.
_SGR = r"\x1b\[[0-9;:]*m"
_CONTROLS = re.compile(rf"({_SGR})|\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def neutralize(text: str, colours: bool = False) -> str:
    """``text`` with control characters and escape sequences shown as escapes (\\x1b[2J) instead of acted on by the
    terminal; ``colours``: SGR colour sequences pass (the console is a terminal)."""
    if colours:
        return _CONTROLS.sub(lambda m: m.group(0) if m.group(1) else _escaped(m.group(0)), text)
    return _CONTROLS.sub(lambda m: _escaped(m.group(0)), text)


def _escaped(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")


class _RedactingBuffer(io.RawIOBase):
    def __init__(self, text_stream: Any) -> None:
        self._text = text_stream

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._text.write(data.decode(getattr(self._text, "encoding", None) or "utf-8", "replace"))
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
        # no log line carries a control sequence on purpose: whatever a file put into it is shown as text, in the
        # console and in debug.log alike
        record.msg, record.args = neutralize(redact(message)), ()
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, neutralize(redact(text))
        elif record.exc_text:
            record.exc_text = neutralize(redact(record.exc_text))
        record._mbridge_redacted = True
        return True


_FILTER = RedactingFilter()


def protect_logging() -> None:
    """Put the redaction on every handler the root logger has now (call again after handlers are added)."""
    for handler in logging.getLogger().handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)


def output_errors() -> list[tuple[str, OSError]]:
    """(stream name, error) for standard output / error that the operating system refused to write (install())."""
    found = []
    for name, stream in (("standard output", sys.stdout), ("standard error", sys.stderr)):
        error = getattr(stream, "error", None) if isinstance(stream, RedactingStream) else None
        if error is not None:
            found.append((name, error))
    return found


def install() -> None:
    """Redact the terminal and the logging handlers of this process."""
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)  # type: ignore[assignment]
    protect_logging()
