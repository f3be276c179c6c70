"""The benchmark's inputs are sound (the benchmark itself runs as `python bench/ipc.py --json`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from rekall.thread import ThreadMirror, derive_facts

PATH = Path(__file__).resolve().parents[2] / "bench" / "ipc.py"
spec = importlib.util.spec_from_file_location("bench_ipc", PATH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_generated_threads_have_about_the_requested_size_and_a_sound_layout():
    state = bench.make_state(400_000)
    size = len(json.dumps(state))
    assert 0.8 * 400_000 <= size <= 1.2 * 400_000
    facts = derive_facts(state)
    assert facts.layout_problem is None and facts.idle and facts.latest_user_turn_id == state["turns"][-1]["turnId"]


def test_the_patch_mix_applies_without_a_single_resync_and_agrees_with_the_naive_model():
    state = bench.make_state(200_000)
    mirror = ThreadMirror()
    mirror.load_snapshot(json.loads(json.dumps(state)), 1)
    for step in range(60):
        batch = json.loads(json.dumps(bench.patch_mix(step, len(state["turns"]))))
        mirror.apply_patches(batch, base_revision=mirror.revision, revision=mirror.revision + 1)
    assert mirror.facts == derive_facts(mirror.state)
    assert mirror.patches_applied == 60
