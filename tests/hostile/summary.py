"""Counts for the hostile-input suite, as issue 14's note reports them: ``python tests/hostile/summary.py [OUT]``.

Runs every row of cases.py (hostile and valid) the way test_hostile_inputs.py does and prints, per class of input
(cases.CLASSES: deep TOML, dependency cycles, secrets in free text, golden files, ...), how many runs were refused
cleanly, then per class of failure how many runs showed it: a traceback on the terminal, a hostile input accepted
(exit 0), files left behind in --output-dir or outside it, a secret printed or written, a message missing the field /
value it should name, a valid input refused, a valid input whose Kubernetes manifests a YAML 1.1 reader (kubectl's
go-yaml v2) reads back otherwise than objects.json (issue 32). ``--plain-verify`` runs verify-configs without
--system-config (as before it had the option).

Then the classes of issue 26 (reliability.py: the operating system refusing a write, planted symlinks, signals, a
log shrinking under the reader), one line per class: rows, handled right, skipped (mount / chattr not permitted),
and the checks that failed with the rows that failed them. ``--inputs-only`` / ``--reliability-only`` run one part.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from hostile import harness  # noqa: E402
from hostile.cases import CASES, CLASSES, VALID  # noqa: E402
from hostile.reliability import CLASSES as RELIABILITY_CLASSES  # noqa: E402
from hostile.reliability import build_ab, run_class  # noqa: E402


def reliability(tmp: Path) -> None:
    tree = build_ab(tmp / "ab")
    print("reliability classes (issue 26): rows, handled right, skipped, failed checks")
    for cls in RELIABILITY_CLASSES:
        trials = run_class(cls, tmp / cls.replace(" ", "-"), tree)
        ran = [t for t in trials if not t.skipped]
        clean = [t for t in ran if not t.problems]
        failed: dict[str, list[str]] = {}
        for t in ran:
            for problem in t.problems:
                failed.setdefault(problem.split(":")[0][:40], []).append(t.id)
        failures = "; ".join(f"{k}: {' '.join(v)}" for k, v in failed.items())
        print(f"{cls:32s} {len(trials):4d} rows  {len(clean):4d} handled right  {len(trials) - len(ran):4d} skipped"
              f"  {failures}".rstrip())
        for t in trials:
            verdict = f"skipped: {t.skipped}" if t.skipped else "ok" if not t.problems else "; ".join(t.problems)
            print(f"    {t.id:44s} {verdict}")


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
    if "--inputs-only" not in sys.argv:
        reliability(tmp / "reliability")
    if "--reliability-only" in sys.argv:
        return
    outcomes = harness.run_all([*CASES, *VALID], tmp)
    classes: dict[str, list[str]] = {k: [] for k in ("clean refusal", "traceback", "accepted (exit 0)",
                                                     "left files in --output-dir", "wrote outside --output-dir",
                                                     "secret printed or written", "message misses field/value",
                                                     "valid input refused", "manifest reads back otherwise")}
    for (cid, verb), o in sorted(outcomes.items()):
        name = f"{cid} [{verb}]"
        if o.case.ok:
            if o.returncode != 0:
                classes["valid input refused"].append(name)
            elif verb == "dry-run" and harness.manifest_mismatches(o):
                classes["manifest reads back otherwise"].append(name)
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
