"""The quick tier: ``.venv/bin/python -m pytest -m "not slow"`` for the edit-and-test loop (README).

A test module is ``slow`` when its tests took 0.5 s or more each on average, or 20 s or more in all, in a full run on
2 cores (2026-11-29: 3,560 tests in 40 min; the quick tier is the other 65 modules, 1,501 tests). They spawn the CLI,
CloudAI or Slurm, or run the real Megatron-Core payload; the full command runs them all.
"""

from __future__ import annotations

import contextlib
import inspect
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


def shares_a_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-, package- or session-scoped fixture of this suite's own (a dry-run made once,
    CloudAI's source unpacked, the 0.6.2 wheel fetched, the hostile suite's 1,400 CLI runs): made once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixture in defs:
            if fixture.scope in ("module", "package", "session"):
                with contextlib.suppress(TypeError, ValueError):
                    if Path(inspect.getfile(fixture.func)).resolve().is_relative_to(HERE):
                        return True
    return False


def xdist_group(rel: str, shared: bool) -> str | None:
    """The worker group of a test module under ``pytest -n`` (pyproject's addopts, ``--dist loadgroup``), or None.

    A module whose tests share a fixture of ours (``shared``) runs whole on one worker, so that fixture runs once, not
    once per worker. Every module under ``slurm/`` shares one group: the local cluster is started and stopped by a
    session fixture, which must live in a single worker. The other tests are spread one by one (None), so that a long
    module of independent tests (the refit payload's worlds, verify-configs on every system) is not one worker's alone.
    """
    return "slurm" if rel.startswith("slurm/") else rel if shared else None


# tryfirst: xdist's own hook reads the xdist_group marks into the node ids (``@group``) that loadgroup schedules by;
# run after it, the marks came too late and every test was scheduled alone (a module's tests on both workers, its
# module fixtures made once per worker: the hostile suite's 213 s twice)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    shared = set()
    for item in items:
        if shares_a_fixture(item):
            shared.add(Path(str(item.path)).resolve())
    for item in items:
        path = Path(str(item.path)).resolve()
        if not path.is_relative_to(HERE):
            continue
        rel = path.relative_to(HERE).as_posix()
        if rel in SLOW:
            item.add_marker(pytest.mark.slow)
        group = xdist_group(rel, path in shared)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
