"""The versions CloudAI's uv.lock pins for the packages its test suite needs beyond CloudAI's own dependencies.

``python tests/cloudai_guest/lockpins.py <cloudai-src>/uv.lock`` prints them as pip requirements (``.ci/run`` installs
them); tests/cloudai_guest/test_cloudai_suite.py checks that the interpreter has exactly these. pytest matters: 9.2
turns a fixture deprecation into 14 errors through CloudAI's ``filterwarnings = error``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

SUITE_NEEDS = ("pytest", "gymnasium")


def lock_pins(uv_lock: Path, names: tuple[str, ...] = SUITE_NEEDS) -> dict[str, str]:
    packages = tomllib.loads(uv_lock.read_text()).get("package", [])
    pins = {p["name"]: p["version"] for p in packages if p.get("name") in names}
    missing = sorted(set(names) - set(pins))
    if missing:
        raise SystemExit(f"{uv_lock}: no version pinned for {', '.join(missing)}")
    return pins


if __name__ == "__main__":
    print(" ".join(f"{n}=={v}" for n, v in lock_pins(Path(sys.argv[1])).items()))
