"""The scenario reports on run folders made outside a CloudAI scenario (``mbridge_config.json`` + ``logs/``): the GPU
benchmarks' folders, the recorded runs of tests/fixtures. Each report's own code does the work; only the way it finds
its runs differs.

MBridgeABReport is a CloudAI Reporter: it finds runs via ``load_test_runs`` (a scenario's results tree) and keeps
those whose test is an MBridgeTrainingTestDefinition. Here a real TestScenario holds one real TestRun per run folder
(its test definition carries the folder's settings, its output_path is the folder), and the subclass only replaces
the tree walk with that list. The refit page is built from the same rows the refit reporter makes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..safe_read import MAX_JSON_BYTES, read_text


def ab_report(run_dirs: Sequence[Path], out: Path, warmup: int, name: str = "gpu_dispatcher_ab",
              system: str = "local", elsewhere: Mapping[str, str] | None = None,
              elsewhere_source: str | None = None, note: str | None = None) -> list[dict[str, Any]]:
    """Writes mbridge_ab.csv / .html / *.png (and mbridge_runs.csv) into ``out``; returns the A/B rows. ``note``:
    where the runs come from, in words, shown under the page's title and in its provenance."""
    from cloudai.core import TestRun, TestScenario
    from cloudai.systems.standalone import StandaloneSystem

    from ..workloads.training.test_definition import MBridgeTrainingCmdArgs, MBridgeTrainingTestDefinition
    from .ab import ABReportConfig, MBridgeABReport

    class FolderABReport(MBridgeABReport):
        rows: list[dict[str, Any]]

        def load_test_runs(self) -> None:
            self.trs = list(self.test_scenario.test_runs)

        def _write(self, rows: list[dict[str, Any]], cells: Any) -> None:
            self.rows = rows
            super()._write(rows, cells)

    from ..workloads.dispatch_bench import MBridgeDispatchBenchCmdArgs, MBridgeDispatchBenchTestDefinition

    test_runs = []
    for folder in run_dirs:
        c = json.loads(read_text(folder / "mbridge_config.json", MAX_JSON_BYTES, "the run's config"))
        if c.get("workload") == "dispatch_bench":  # the dispatch microbenchmark: shown beside the A/B
            keys = ("dispatcher", "seq_length", "mbs", "warmup", "iterations", "dtype", "seed")
            bench = MBridgeDispatchBenchTestDefinition(
                name=folder.name, description=f"run folder {folder}", test_template_name="MBridgeDispatchBench",
                cmd_args=MBridgeDispatchBenchCmdArgs(model=c["model"], **{k: c[k] for k in keys if k in c}))
            test_runs.append(TestRun(name=folder.name, test=bench, num_nodes=1, nodes=[], output_path=folder))
            continue
        args = {k: c[k] for k in ("ep", "mbs", "gbs", "seq_length", "train_iters", "dispatcher", "moe_a2a_overlap",
                                  "force_balanced_routing", "engine", "seed") if k in c}
        if c.get("deepep_impl"):
            args["deepep_impl"] = c["deepep_impl"]
        tdef = MBridgeTrainingTestDefinition(
            name=folder.name, description=f"run folder {folder}", test_template_name="MBridgeTraining",
            cmd_args=MBridgeTrainingCmdArgs(model=c["model"]["name"], gpu=c["gpu"], **args))
        test_runs.append(TestRun(name=folder.name, test=tdef, num_nodes=c.get("num_nodes", 1), nodes=[],
                                 output_path=folder))
    out.mkdir(parents=True, exist_ok=True)
    standalone = StandaloneSystem(name=system, install_path=out, output_path=out)
    report = FolderABReport(standalone, TestScenario(name=name, test_runs=test_runs), out,
                            ABReportConfig(warmup=warmup))
    report.provenance_elsewhere = dict(elsewhere) if elsewhere else None
    report.list_skipped = False  # plain run folders: no scenario whose skipped points could be listed
    report.provenance_source = elsewhere_source
    report.provenance_note = note
    report.rows = []
    report.generate()
    return report.rows


def refit_report(run_dirs: Sequence[Path], out: Path, name: str, system: str = "local",
                 elsewhere: Mapping[str, str] | None = None, elsewhere_source: str | None = None) -> list[dict]:
    """Writes mbridge_refit.csv / .html / .png into ``out`` from refit run folders; returns the rows."""
    from ..metrics import parse_refit_run
    from .provenance import RunSource, collect
    from .refit_table import refit_row, write_refit_report

    rows, sources = [], []
    for folder in run_dirs:
        config = json.loads(read_text(folder / "mbridge_config.json", MAX_JSON_BYTES, "the run's config"))
        m = parse_refit_run(folder)
        rows.append(refit_row(folder.name, 0, config, m, str(folder)))
        first = m.failure.first
        sources.append(RunSource(f"{folder.name}: {rows[-1]['mapping']}", folder, engine="refit",
                                 failed_rank=first.rank if first is not None else None))
    out.mkdir(parents=True, exist_ok=True)
    prov = collect(out, sources, system=system, scenario=name, elsewhere=elsewhere, elsewhere_source=elsewhere_source)
    write_refit_report(out, f"Refit: {name}", rows, prov)
    return rows
