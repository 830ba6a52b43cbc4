"""Run a list of plain ``cloudai`` commands in one interpreter and record each one's exit status and console output.

``python cli_driver.py <cases.json> <results.json>``; each case: ``{"id", "args", "cwd"}``. The plugin is loaded or not
as the interpreter's ``CLOUDAI_MBRIDGE_AUTOLOAD`` says (test_cloudai_conf_differential.py starts one driver each way).
One interpreter for every case, as CloudAI's import and registration take about 2 s: between cases the working
folder changes and the Registry's runners are put back (``--single-sbatch`` replaces the Slurm runner for the rest of
a process). ``time.sleep`` returns at once in both drivers alike: CloudAI's runners wait between polls and before a
dependent test (1-5 s each) for jobs that a dry-run does not have, which made some commands take 20 s.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path


def main() -> int:
    cases = json.loads(Path(sys.argv[1]).read_text())
    time.sleep = lambda _seconds: None  # see the module's docstring
    import cloudai  # noqa: F401 (the plugin registers here, when autoloaded)
    from cloudai.cli import main as cloudai_main
    from cloudai.core import Registry

    runners = dict(Registry().runners_map)
    results = {}
    for case in cases:
        os.chdir(case["cwd"])
        started = time.monotonic()
        console = io.StringIO()
        with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
            try:
                cloudai_main.main(args=case["args"], prog_name="cloudai", standalone_mode=False)
                rc: int | str = 0
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception as exc:  # recorded, compared like an exit status
                rc = f"{type(exc).__name__}: {exc}"
                console.write(traceback.format_exc(limit=-3))
        import logging

        for handler in logging.getLogger().handlers:  # the next case's dictConfig opens its own debug.log
            handler.close()
        Registry().runners_map.clear()
        Registry().runners_map.update(runners)
        results[case["id"]] = {"rc": rc, "console": console.getvalue(), "seconds": time.monotonic() - started}
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
