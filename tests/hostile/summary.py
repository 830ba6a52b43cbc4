"""Counts for the hostile-input suite, as issue 14's note reports them: ``python tests/hostile/summary.py [OUT]``.

Runs every row of cases.py (hostile and valid) the way test_hostile_inputs.py does and prints, per class of input
(cases.CLASSES: deep TOML, dependency cycles, secrets in free text, golden files, ...), how many runs were refused
cleanly, then per class of failure how many runs showed it: a traceback on the terminal, a hostile input accepted
(exit 0), files left behind in --output-dir or outside it, a secret printed or written, a message missing the field /
value it should name, a valid input refused. ``--plain-verify`` runs verify-configs without --system-config (as
before it had the option).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from hostile import harness  # noqa: E402
from hostile.cases import CASES, CLASSES, VALID  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--plain-verify" in sys.argv:
        command = harness.command

        def plain(case, verb, p):  # type: ignore[no-untyped-def]
            argv = command(case, verb, p)
            return argv[:2] if verb == "verify-configs" and case.argv is None else argv

        harness.command = plain
    tmp = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="hostile-"))
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    outcomes = harness.run_all([*CASES, *VALID], tmp)
    classes: dict[str, list[str]] = {k: [] for k in ("clean refusal", "traceback", "accepted (exit 0)",
                                                     "left files in --output-dir", "wrote outside --output-dir",
                                                     "secret printed or written", "message misses field/value",
                                                     "valid input refused")}
    for (cid, verb), o in sorted(outcomes.items()):
        name = f"{cid} [{verb}]"
        if o.case.ok:
            if o.returncode != 0:
                classes["valid input refused"].append(name)
            continue
        bad = False
        checks = {
            "traceback": "Traceback" in o.output,
            "accepted (exit 0)": o.returncode == 0,
            "left files in --output-dir": any(o.out_dir in p.parents for p in o.new_files),
            "wrote outside --output-dir": any(
                p not in (o.root / "terminal.txt", o.root / "work" / "debug.log") and o.out_dir not in p.parents
                for p in o.new_files),
            "secret printed or written": bool(harness.leaks(o)),
            "message misses field/value": o.returncode != 0 and any(e not in o.output for e in o.case.expect),
        }
        for label, hit in checks.items():
            if hit:
                classes[label].append(name)
                bad = True
        if not bad:
            classes["clean refusal"].append(name)
    hostile_runs = sum(len(c.verbs) for c in CASES)
    print(f"hostile inputs: {len(CASES)} ({hostile_runs} runs); valid inputs: {len(VALID)}; folders under {tmp}")
    clean = set(classes["clean refusal"])
    print("by class of input: inputs, runs, runs refused cleanly")
    for kind, rows in CLASSES.items():
        runs = [f"{c.id} [{v}]" for c in rows for v in c.verbs]
        print(f"  {kind:30s} {len(rows):4d} {len(runs):5d} {sum(r in clean for r in runs):5d}")
    print("by outcome: runs, first names")
    for label, names in classes.items():
        print(f"{label:32s} {len(names):4d}  {' '.join(names[:12])}{' ...' if len(names) > 12 else ''}")


if __name__ == "__main__":
    main()
