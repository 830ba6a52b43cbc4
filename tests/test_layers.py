"""Issue 32, item 7: the package's layers import downwards only. The workloads (CloudAI test definitions, their
report strategies) sit below the command line (cli/) and the scenario reports (reports/); a module of theirs that
imports either one, at the top or inside a function, fails here. The rejection count that dry-run reports reaches
the session through a listener the session registers (workloads/base.py), not through an import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cloudai_mbridge"

# layer -> the packages above it, which it must not import
FORBIDDEN = {
    "workloads": ("cli", "reports"),
    "metrics": ("cli", "reports", "workloads"),
    "plots": ("cli", "reports", "workloads"),
}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved), wherever the import statement is."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts[:-1]  # the package of a module, and of an __init__.py its own
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return found


def _modules(layer: str) -> list[Path]:
    folder = PACKAGE / layer
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [PACKAGE / f"{layer}.py"]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    upward = []
    for path in _modules(layer):
        for module in imported_modules(path):
            if any(module == f"cloudai_mbridge.{up}" or module.startswith(f"cloudai_mbridge.{up}.")
                   for up in FORBIDDEN[layer]):
                upward.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert not upward, "\n".join(sorted(set(upward)))


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The scanner resolves a relative import inside a function (the form the old ones took)."""
    module = PACKAGE / "workloads" / "base.py"
    found = imported_modules(module)
    assert "cloudai_mbridge.rules" in found  # `from ..rules import Violation` at the top
    probe = PACKAGE / "workloads" / "_probe_layers.py"
    try:
        probe.write_text("def f():\n    from ..cli.session import current\n")
        assert "cloudai_mbridge.cli.session" in imported_modules(probe)
    finally:
        probe.unlink()
