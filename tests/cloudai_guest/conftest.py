"""CloudAI's own source tree at the pinned commit (its tests and its shipped conf/), unpacked once per session.

Where it comes from, first found: ``CLOUDAI_SRC`` (a CloudAI checkout, or a ``git archive`` .tar.gz of one), else the
archive kept beside this checkout (``../shared/cloudai-src/cloudai-<commit>.tar.gz``). Without either, the tests here
skip, saying how to point at a checkout; with ``MBRIDGE_REQUIRE_CLOUDAI_SRC=1`` (CI) they fail instead. The commit
must be the one pyproject.toml pins: another CloudAI is another baseline.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import pytest
from helpers import ROOT


def pinned_commit() -> str:
    m = re.search(r"cloudai\.git@([0-9a-f]{40})", (ROOT / "pyproject.toml").read_text())
    assert m, "pyproject.toml no longer pins CloudAI's commit in its `cloudai` extra"
    return m.group(1)


def _archive() -> Path | None:
    given = os.environ.get("CLOUDAI_SRC")
    if given:
        return Path(given)
    for shared in (ROOT.parent / "shared", Path("/work/shared")):
        found = sorted((shared / "cloudai-src").glob("cloudai-*.tar.gz"))
        if found:
            return found[0]
    return None


@pytest.fixture(scope="session")
def cloudai_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = _archive()
    if src is None or not src.exists():
        message = ("CloudAI's source tree (its tests and conf/) was not found: set CLOUDAI_SRC to a CloudAI checkout "
                   f"at commit {pinned_commit()} (or a git archive .tar.gz of it)")
        if os.environ.get("MBRIDGE_REQUIRE_CLOUDAI_SRC") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    if src.is_dir():
        return src
    commit = pinned_commit()
    assert commit in src.name, f"{src} is not CloudAI at the pinned commit {commit}: another baseline"
    out = tmp_path_factory.mktemp("cloudai-src")
    with tarfile.open(src) as tar:
        tar.extractall(out, filter="data")
    (tree,) = [p for p in out.iterdir() if p.is_dir()]
    return tree
