"""The version of an installed distribution, for the lines that say which code wrote a file or ran a command."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

NOT_INSTALLED = "(not installed: imported from its source tree)"


def installed_version(name: str) -> str:
    """``name``'s version; a package imported from a source tree on PYTHONPATH has no metadata, which is said
    instead of failing (a GPU host runs the plugin that way)."""
    try:
        return version(name)
    except PackageNotFoundError:
        return NOT_INSTALLED
