"""Put the payload and its config into a run's output folder, so the results carry the exact code that ran."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..atomic import failed_write, normal_mode, write_atomic

PAYLOAD_PACKAGE = "mbridge_payload"
CONFIG_NAME = "mbridge_config.json"
PAYLOAD_SRC = Path(__file__).resolve().parent.parent / "payload"


class ResultsExistError(FileExistsError):
    """A run folder already holds a generated job or its results; nothing is overwritten."""


class UnsafeOutputPathError(ValueError):
    """A scenario or test name that would put a job's files outside --output-dir; nothing was written."""


def check_folder_name(kind: str, value: str, source: str) -> None:
    """``value`` becomes one folder name under --output-dir: no separator, no ``..``, not absolute, not empty."""
    text = str(value)
    if text in ("", ".", "..") or any(c in text for c in "/\\\0") or Path(text).is_absolute():
        raise UnsafeOutputPathError(
            f"{source}: {kind} {text!r} cannot name a results folder: it would put files outside --output-dir. "
            "Fix: use a plain name without '/', '\\' or '..' (letters, digits, '-', '_', '.')."
        )


def claim_scenario_root(root: Path) -> Path:
    """Create the scenario's results folder atomically (mkdir fails when it exists): a second run of the scenario
    started in the same second gets ``<name>_2`` instead of sharing the first one's folder."""
    for n in range(1, 1000):
        candidate = root if n == 1 else root.with_name(f"{root.name}_{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise ResultsExistError(f"{root} and 998 numbered siblings exist. Fix: pass another --output-dir.")


def claim_run_dir(output_dir: Path) -> None:
    """Refuse a folder that an earlier generation already used (CloudAI names results by the second, so two runs of
    one scenario started within a second would share a folder)."""
    if (output_dir / CONFIG_NAME).exists() or (output_dir / "logs").exists():
        raise ResultsExistError(
            f"{output_dir} already holds a generated job or its results; refusing to overwrite them. "
            "Fix: start the run again (a new timestamped folder) or pass another --output-dir."
        )


def payload_sources(root: Path) -> list[str]:
    """The payload package's modules under ``root``, subpackages included: POSIX paths relative to it, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def payload_files(payload_dir: Path) -> dict[str, str]:
    """A staged payload as {path relative to mbridge_payload/: text} (what the Kubernetes ConfigMap carries)."""
    return {rel: (payload_dir / rel).read_text(encoding="utf-8") for rel in payload_sources(payload_dir)}


def stage_payload(output_dir: Path) -> Path:
    """Copy payload/**/*.py into <output_dir>/mbridge_payload, subpackages kept (replaced whole, never half-written)."""
    dest = output_dir / PAYLOAD_PACKAGE
    staging = Path(tempfile.mkdtemp(dir=output_dir, prefix=f".{PAYLOAD_PACKAGE}."))
    try:
        for rel in payload_sources(PAYLOAD_SRC):
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PAYLOAD_SRC / rel, staging / rel)
        normal_mode(staging, directory=True)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise failed_write(dest, exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest


def config_text(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def write_config(output_dir: Path, config: dict[str, Any]) -> Path:
    path = output_dir / CONFIG_NAME
    write_atomic(path, config_text(config))
    return path


def payload_argv(python: str, entry: str, config_path: Path) -> tuple[str, ...]:
    return (python, "-m", f"{PAYLOAD_PACKAGE}.{entry}", "--config", str(config_path))
