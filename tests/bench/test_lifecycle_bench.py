"""The lifecycle bench's owner process works (the benchmark itself runs as `python bench/lifecycle.py --json`)."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_lifecycle", ROOT / "bench" / "lifecycle.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench
spec.loader.exec_module(bench)


def test_one_bench_job_runs_end_to_end_against_the_owner_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    figures = bench.run_jobs(1, 50)
    for name in ("dispatch_overhead_ms_p50", "resume_overhead_ms_p50", "schedule_to_following_ms_p50",
                 "schedule_to_connected_ms_p50"):
        assert math.isfinite(figures[name]), name
    # The worker follows first, then claims the job and reads the snapshot.
    assert figures["schedule_to_following_ms_p50"] <= figures["schedule_to_connected_ms_p50"]


def test_the_owner_process_refuses_an_unknown_command_by_name():
    with bench.OwnerProcess() as owner:
        assert owner.call("follow_count") == {"value": 0}
        with pytest.raises(RuntimeError, match="could not reboot: ValueError: unknown command 'reboot'"):
            owner.call("reboot")
        assert owner.call("marks") == {"marks": {}}  # it answers on after a refusal


def test_the_mcp_server_serves_two_whole_jobs_as_an_agent_makes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    whole = bench.mcp_whole_jobs(50)  # raises unless each job ended resumed
    assert [c["call"] for c in whole["calls"]] == ["opening"] + 2 * [
        "compaction_status", "probe_compaction", "schedule_compaction", "compaction_status"]
    assert len(whole["rss_mb_after_each_job"]) == 2
    assert set(whole["first_call_excess_ms"]) == {"compaction_status", "probe_compaction", "schedule_compaction"}
    assert math.isfinite(whole["mcp_first_call_excess_ms_max"])


def test_a_target_below_the_sdks_own_floor_is_said_to_be_out_of_reach_and_one_above_it_is_not():
    reach = bench.out_of_reach({"sdk_server_built_rss_mb": 70.0, "sdk_load_ms": 20.0})
    assert list(reach) == ["mcp_whole_job_rss_mb"] and "70.0" in reach["mcp_whole_job_rss_mb"]


def test_the_mcp_start_up_figures_see_a_status_answered_during_the_warm_up_and_the_memory_it_costs(tmp_path):
    env = {**os.environ, "REKALL_JOBS_DIR": str(tmp_path / "jobs"), "HOME": str(tmp_path)}
    busy = bench.make_history(env, 1, 2)[0]
    figures = bench.mcp_ready(env, busy)
    assert figures["mcp_status_answered_during_warmup"] == 1.0  # the warm-up thread was still loading the SDK
    assert figures["mcp_rss_after_warmup_mb"] > figures["mcp_rss_before_call_mb"]  # the trade, in memory
    assert all(math.isfinite(value) for value in figures.values())
