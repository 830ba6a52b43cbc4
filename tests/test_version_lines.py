"""The lines that say which plugin and CloudAI wrote a file or ran a command work when the plugin is imported from its
source tree without installed metadata (how a GPU host runs it: PYTHONPATH=<checkout>). Seen on 4 x H200: every
plugin command died in importlib.metadata.version("cloudai-mbridge") with a traceback before doing anything."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError

import pytest

from cloudai_mbridge import _version
from cloudai_mbridge.cli import commands
from cloudai_mbridge.systems import common


def _no_metadata(name: str) -> str:
    raise PackageNotFoundError(name)


def test_installed_version_of_an_installed_package() -> None:
    assert _version.installed_version("pytest") == pytest.__version__


def test_version_lines_without_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_version, "version", _no_metadata)
    common.generated_by.cache_clear()
    try:
        line = commands.version_message()
        assert line.startswith(f"cloudai-mbridge {_version.NOT_INSTALLED} (")
        assert line.endswith(f"with CloudAI {_version.NOT_INSTALLED}")
        assert common.generated_by() == (f"cloudai-mbridge {_version.NOT_INSTALLED} with CloudAI "
                                         f"{_version.NOT_INSTALLED}")
    finally:
        common.generated_by.cache_clear()
