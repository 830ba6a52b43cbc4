"""benchmarks/payload_overhead.py (the payload against Bridge's own pretrain()): both arms get one config, and its
numbers come from the run folders through the same parser and bootstrap as the A/B. The GPU run itself is recorded
in benchmarks/results when a host ran it; here the plan and the report path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_prints_one_bridge_config_for_both_arms():
    out = subprocess.run([sys.executable, "benchmarks/payload_overhead.py", "--dry-run", "--starts", "2"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    first, second = out.splitlines()[:2]
    assert "2 starts x payload, plain (order rotated by one arm per start)" in first
    cfg = json.loads(second)
    assert (cfg["engine"], cfg["world_size"], cfg["dispatcher"], cfg["data"]) == ("bridge", 1, "alltoall", "mock")


def test_the_plain_runner_is_bridges_pretrain_without_the_payloads_additions():
    text = (ROOT / "benchmarks" / "plain_bridge.py").read_text()
    assert "pretrain(container, forward_step)" in text
    assert "callbacks" not in text.split('"""', 2)[2]


def test_the_recorded_run_reports_both_gc_views_from_its_run_folders(tmp_path):
    """The H100 record re-read: the GC iterations come from the payload's MBRIDGE_GC line and are left out of both
    arms for the second view (the README's -11.4 % [-18.7 .. -2.1])."""
    import shutil

    shutil.copytree(ROOT / "benchmarks" / "results" / "payload_overhead", tmp_path / "rec")
    out = subprocess.run([sys.executable, "benchmarks/payload_overhead.py", "--report", str(tmp_path / "rec")],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "manual-GC iterations (from the payload's MBRIDGE_GC line): [6, 11, 16]" in out
    assert "RESULT payload_overhead_pct=-10.30 %" in out
    assert "RESULT payload_overhead_no_gc_pct=-11.38 %" in out
    assert "RESULT payload_overhead_no_gc_ci95_pct=-18.73..-2.13 %" in out


def test_every_arm_takes_every_place_in_the_order_and_plain_is_always_run():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import payload_overhead as po

    args = po.argparse.Namespace(arms=["payload_nohash", "payload"])
    arms = po.arms_of(args)
    assert arms == ["payload", "plain", "payload_nohash"]
    orders = [po.order_for(arms, k) for k in range(3)]
    for arm in arms:
        assert sorted(order.index(arm) for order in orders) == [0, 1, 2]
    assert po.ARM_ENV["payload_nohash"] == {"MBRIDGE_ROUTING_HASH": "0"}


def test_a_second_call_on_the_same_gpu_numbers_its_starts_on_and_another_gpus_record_is_refused(tmp_path, monkeypatch,
                                                                                                 capsys):
    """The run itself is replaced (no GPU here): what is checked is which starts run and which record is joined."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import payload_overhead as po

    ran: list[tuple[str, int]] = []

    def fake_run(arm, start, args, timeout):
        ran.append((arm, start))
        return {"arm": arm, "start": start, "run_folder": str(tmp_path / "none"), "returncode": 1, "wall_s": 1.0}

    monkeypatch.setattr(po, "gpu_problem", lambda need: None)
    monkeypatch.setattr(po, "run_arm", fake_run)
    monkeypatch.setattr(po, "provenance", lambda argv: {"host": "vm", "gpu_uuids": ["GPU-aaaa"]})
    out = tmp_path / "ovh"
    assert po.main(["--out", str(out), "--starts", "1", "--arms", "payload", "plain", "payload_nohash"]) == 1
    assert ran == [("payload", 0), ("plain", 0), ("payload_nohash", 0)]
    ran.clear()
    po.main(["--out", str(out), "--starts", "1", "--arms", "payload", "plain", "payload_nohash"])
    assert ran == [("plain", 1), ("payload_nohash", 1), ("payload", 1)]
    assert len(json.loads((out / "payload_overhead.json").read_text())["runs"]) == 6

    monkeypatch.setattr(po, "provenance", lambda argv: {"host": "vm", "gpu_uuids": ["GPU-bbbb"]})
    ran.clear()
    assert po.main(["--out", str(out), "--starts", "1"]) == 2
    assert ran == []
    assert "holds starts of another machine" in capsys.readouterr().err
