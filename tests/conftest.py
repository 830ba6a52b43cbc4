"""The quick tier: ``.venv/bin/python -m pytest -m "not slow"`` for the edit-and-test loop (README).

A test module is ``slow`` when its tests took 0.5 s or more each on average, or 20 s or more in all, in a full run on
2 cores (2026-11-29: 3,560 tests in 40 min; the quick tier is the other 65 modules, 1,501 tests). They spawn the CLI,
CloudAI or Slurm, or run the real Megatron-Core payload; the full command runs them all.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

# CloudAI first, as a user's `cloudai` imports it: the plugin registers then (a test module that imports one of our
# modules first would make CloudAI skip it, _autoload.py; the order modules share a worker in is not fixed)
with contextlib.suppress(ImportError):
    import cloudai  # noqa: F401

SLOW = {
    "cloudai_guest/test_cloudai_conf_differential.py", "cloudai_guest/test_cloudai_suite.py",
    "hostile/test_damaged_refit.py", "hostile/test_damaged_results.py", "hostile/test_hostile_inputs.py",
    "hostile/test_issue32.py", "hostile/test_reliability.py", "hostile/test_size_bounds.py", "k8s/test_k8s_dry_run.py",
    "k8s/test_k8s_hostile_and_secrets.py", "metrics/test_benchmark.py", "metrics/test_frames.py",
    "hostile/test_node_names.py", "hostile/test_results_in_conf.py", "hostile/test_terminal_controls.py",
    "payload/test_refit_coalesce.py", "payload/test_refit_coalesce_edges.py", "payload/test_refit_coalesce_pairwise.py",
    "payload/test_refit_payload.py", "rules/test_refit_differential.py", "test_refit_idle_report.py",
    "slurm/test_cluster.py", "slurm/test_e2e.py", "test_ab_starts.py",
    "test_bridge062_recipes.py", "test_dispatch_bench.py", "test_dry_run.py", "test_first_hour.py",
    "test_gpu_dispatcher_ab.py", "test_gpu_scripts_without_gpu.py", "test_hostile_and_secrets.py",
    "test_html_chromium.py", "test_hybridep_compiler_pick.py",
    "test_newcomer_commands.py", "test_no_stray_writes.py", "test_nothing_hidden.py",
    "test_output_folders.py", "test_preflight.py", "test_production_configs.py", "test_properties_models.py",
    "test_redact.py", "test_registration.py", "test_report_demo.py", "test_report_readability.py",
    "test_report_verdicts.py", "test_reports.py", "test_robust_cli.py", "test_standalone.py", "test_system_fit.py",
    "test_toml_files.py", "test_version_lines.py",
}
HERE = Path(__file__).resolve().parent


def xdist_group(rel: str) -> str:
    """The worker group of a test module under ``pytest -n`` (pyproject's addopts, ``--dist loadgroup``).

    A module runs whole on one worker, so its module- and session-scoped fixtures (a dry-run made once, CloudAI's
    source unpacked, the 0.6.2 wheel fetched) run once, not once per worker. Every module under ``slurm/`` shares one
    group: the local cluster is started and stopped by a session fixture, which must live in a single worker.
    """
    return "slurm" if rel.startswith("slurm/") else rel


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path)).resolve()
        if not path.is_relative_to(HERE):
            continue
        rel = path.relative_to(HERE).as_posix()
        if rel in SLOW:
            item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(xdist_group(rel)))
