"""The one place that checks CloudAI is importable and new enough, with a message that says how to fix it."""

from __future__ import annotations

from importlib import metadata

# The oldest CloudAI whose plugin surface we use (scenario reports, JsonGenStrategy, constraint_check in DSE).
MIN_CLOUDAI = (1, 6)
TESTED_COMMIT = "5b5c0f728858c49724dcd22c46effa7401f52314"
INSTALL_HINT = (
    "Install CloudAI from its repository (it is not on PyPI): "
    f"pip install 'cloudai @ git+https://github.com/NVIDIA/cloudai.git@{TESTED_COMMIT}' "
    "or pip install -e '.[cloudai]' in this checkout."
)


class CloudAIMissingError(RuntimeError):
    pass


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def require_cloudai() -> str:
    """Return CloudAI's version, or raise CloudAIMissingError saying what to install."""
    try:
        version = metadata.version("cloudai")
    except metadata.PackageNotFoundError:
        raise CloudAIMissingError(f"CloudAI is not installed. {INSTALL_HINT}") from None
    if _version_tuple(version) < MIN_CLOUDAI:
        raise CloudAIMissingError(
            f"CloudAI {version} is too old for cloudai-mbridge (needs >= {'.'.join(map(str, MIN_CLOUDAI))}). "
            + INSTALL_HINT
        )
    return version
