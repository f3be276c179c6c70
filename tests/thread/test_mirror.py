"""ThreadMirror: the incremental facts always equal the naive recomputation."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rekall.kernel import events as ev
from rekall.thread import V11, FieldNames, PatchError, RevisionGap, ThreadMirror, derive_facts
from rekall.thread import facts as f
from rekall.thread.patches import MISSING, apply_patches

def fresh(value):
    """A copy as the wire would deliver it: no object appears twice (hypothesis reuses them)."""
    return json.loads(json.dumps(value))


# --- strategies: thread-shaped states and patches that mostly apply -------------------

ids = st.sampled_from(["a", "b", "c", "old", "new"])
texts = st.sampled_from(["hello", "steer", "more", ""])
text_input = st.builds(lambda t, cosmetic: {"type": "text", "text": t, **({"text_elements": []} if cosmetic else {})},
                       texts, st.booleans())
items = st.one_of(
    st.builds(lambda i, c: {"type": "userMessage", "id": i, "content": c}, ids, st.lists(text_input, max_size=2)),
    st.builds(lambda i, c: {"type": "contextCompaction", "id": i, "completed": c}, ids, st.booleans()),
    st.builds(lambda i: {"type": "contextCompaction", "id": i}, ids),
    st.builds(lambda c: {"type": "contextCompaction", "id": "", "completed": c}, st.just(True)),
    st.builds(lambda c: {"type": "contextCompaction", "id": "x", "completed": c}, st.just("true")),
    st.builds(lambda i, t: {"type": "agentMessage", "id": i, "text": t}, ids, texts),
    st.just("not-an-item"),
)
turns = st.builds(
    lambda turn_id, status, started, inputs, its: {
        "turnId": turn_id, "turnStartedAtMs": started, "status": status,
        "params": {"input": inputs, "clientUserMessageId": "job"}, "items": its},
    st.one_of(st.none(), ids), st.sampled_from(["inProgress", "completed", "interrupted", "failed"]),
    st.integers(0, 5), st.lists(text_input, max_size=2), st.lists(items, max_size=4),
) | st.just("not-a-turn") | st.just({"turnId": "weird", "items": {"not": "a list"}})
# The real paginated history (AA's model): islands of `{key, value}` entries whose `value` names
# an entity; which `kind` values exist is not published, so any kind (or none) carries turns.
entries = st.builds(lambda k, tagged: {"key": f"entry-{k}", "value": k} if tagged else {"value": k}, ids, st.booleans())
islands = st.builds(lambda i, es, boundaries: {"id": f"island-{i}", "entries": es,
                                              **({"olderBoundary": None, "newerBoundary": None} if boundaries else {})},
                    st.integers(0, 3), st.lists(entries, max_size=3), st.booleans())
history_kinds = st.sampled_from(["canonical", "canonical", "paginated", "paged", None])
histories = st.one_of(
    st.builds(
        lambda kind, entities, isles, complete: {
            **({} if kind is None else {"kind": kind}),
            "history": {"islands": isles, "entitiesByKey": entities, "generation": 1, "isComplete": complete}},
        history_kinds, st.dictionaries(ids, turns, max_size=3), st.lists(islands, max_size=3), st.booleans()),
    st.builds(lambda kind: {"kind": kind, "history": None}, history_kinds),
    st.builds(lambda kind: {"kind": kind}, history_kinds),
)
runtime_statuses = st.sampled_from([{"type": "idle"}, {"type": "idle", "activeFlags": []}, {"type": "active"}, {},
                                    None, {"type": "notLoaded"}, {"type": "systemError", "activeFlags": []}])
requests = st.builds(lambda i, completed: {"id": i, "method": "item/commandExecution/requestApproval", "params": {},
                                           **({} if completed is None else {"completed": completed})},
                     ids, st.one_of(st.none(), st.booleans()))
# Real submissions carry no `terminal` flag (`stage` says how far they got); older bridges' do.
submissions = st.one_of(
    st.builds(lambda t: {"terminal": t}, st.booleans()),
    st.builds(lambda i, stage: {"requestId": i, "method": "thread-follower-start-turn", "stage": stage,
                                "clientUserMessageId": "job"}, ids, st.sampled_from(["sent", "outcome-unknown"])),
)
states = st.fixed_dictionaries(
    {
        "threadRuntimeStatus": runtime_statuses,
        "requests": st.one_of(st.lists(requests, max_size=3), st.just(None)),
        "turns": st.lists(turns, max_size=4),
        "latestTokenUsageInfo": st.one_of(
            st.none(),
            st.builds(lambda t, w: {"last": {"totalTokens": t}, "modelContextWindow": w},
                      st.one_of(st.none(), st.integers(-5, 100000)), st.one_of(st.none(), st.integers(0, 100000)))),
    },
    optional={
        "unconfirmedTurnSubmissions": st.lists(submissions, max_size=2),
        "turnHistory": histories,
        "historyMode": st.sampled_from(["paginated", "full"]),
    },
)
# With historyMode "paginated" the live `turns` is always empty: every turn is in the history.
paginated_states = st.builds(lambda state, history: {**state, "historyMode": "paginated", "turns": [],
                                                     "turnHistory": history},
                             states, histories)
any_states = st.one_of(states, paginated_states)
leaf_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), texts,
                        st.sampled_from(["idle", "active", "userMessage", "contextCompaction", "canonical"]))
values = st.one_of(leaf_values, items, turns, text_input, st.lists(items, max_size=3), st.lists(turns, max_size=2),
                   histories, islands, entries, requests, submissions, runtime_statuses, st.just([]), st.just({}))

# Keys the walk prefers, so that patches land where facts live.
INTERESTING = ["turns", "items", "params", "input", "completed", "type", "id", "status", "turnHistory", "history",
               "entitiesByKey", "islands", "entries", "value", "requests", "threadRuntimeStatus", "content",
               "latestTokenUsageInfo", "last", "totalTokens", "unconfirmedTurnSubmissions", "terminal", "kind",
               "stage"]


def draw_path(data, state) -> list:
    path, node = [], state
    while True:
        stop = data.draw(st.integers(0, 5)) == 0
        if isinstance(node, dict) and node and not stop:
            keys = sorted(node, key=lambda k: (k not in INTERESTING, k))
            key = data.draw(st.sampled_from(keys))
        elif isinstance(node, list) and node and not stop:
            key = data.draw(st.integers(0, len(node) - 1))
        else:
            break
        path.append(key)
        node = node[key]
    return path


def item_lists(state) -> list[list]:
    """Paths of every items array, live and in history: where compaction and user facts live."""
    found = []
    turns = state.get("turns") if isinstance(state, dict) else None
    for i, turn in enumerate(turns if isinstance(turns, list) else []):
        if isinstance(turn, dict) and isinstance(turn.get("items"), list):
            found.append(["turns", i, "items"])
    history = state.get("turnHistory") if isinstance(state, dict) else None
    inner = history.get("history") if isinstance(history, dict) else None
    entities = inner.get("entitiesByKey") if isinstance(inner, dict) else None
    for key, turn in (entities.items() if isinstance(entities, dict) else []):
        if isinstance(turn, dict) and isinstance(turn.get("items"), list):
            found.append(["turnHistory", "history", "entitiesByKey", key, "items"])
    return found


def draw_targeted_patch(data, state) -> dict | None:
    lists = item_lists(state)
    if not lists:
        return None
    path = data.draw(st.sampled_from(lists))
    node = state
    for key in path:
        node = node[key]
    compactions = [i for i, item in enumerate(node) if isinstance(item, dict) and item.get("type") == "contextCompaction"]
    choice = data.draw(st.integers(0, 3))
    if compactions and choice <= 1:
        index = data.draw(st.sampled_from(compactions))
        if choice == 0:
            return {"op": "add", "path": [*path, index, "completed"], "value": data.draw(st.booleans())}
        return {"op": "remove", "path": [*path, index]}
    if choice == 2:
        return {"op": "add", "path": [*path, "-"],
                "value": {"type": "contextCompaction", "id": data.draw(ids), "completed": data.draw(st.booleans())}}
    return {"op": "add", "path": [*path, "-"], "value": data.draw(items)}


def draw_extension_patch(data, state) -> dict | None:
    """What the real extension does: answer a request, change the runtime status (null, stuck in
    systemError), finish a submission by deleting the key, start or end a turn, add a turn to the
    paginated history."""
    if not isinstance(state, dict):
        return None
    choice = data.draw(st.integers(0, 3))
    requests = state.get("requests")
    if choice == 0 and isinstance(requests, list) and requests:
        index = data.draw(st.integers(0, len(requests) - 1))
        if isinstance(requests[index], dict):
            return {"op": "add", "path": ["requests", index, "completed"], "value": data.draw(st.booleans())}
    if choice == 1:
        return {"op": "replace" if "threadRuntimeStatus" in state else "add", "path": ["threadRuntimeStatus"],
                "value": data.draw(runtime_statuses)}
    if choice == 2 and "unconfirmedTurnSubmissions" in state:
        return {"op": "remove", "path": ["unconfirmedTurnSubmissions"]}
    turn_paths = [path[:-1] for path in item_lists(state)]
    if choice == 3 and turn_paths and data.draw(st.booleans()):  # a turn starts, ends, fails
        return {"op": "add", "path": [*data.draw(st.sampled_from(turn_paths)), "status"],
                "value": data.draw(st.sampled_from(["inProgress", "completed", "failed"]))}
    history = state.get("turnHistory")
    inner = history.get("history") if isinstance(history, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("entitiesByKey"), dict):
        key = data.draw(ids)
        if data.draw(st.booleans()) and isinstance(inner.get("islands"), list) and inner["islands"]:
            island = data.draw(st.integers(0, len(inner["islands"]) - 1))
            if isinstance(inner["islands"][island], dict) and isinstance(inner["islands"][island].get("entries"), list):
                return {"op": "add", "path": ["turnHistory", "history", "islands", island, "entries", "-"],
                        "value": {"key": f"entry-{key}", "value": key}}
        return {"op": "add", "path": ["turnHistory", "history", "entitiesByKey", key], "value": data.draw(turns)}
    return None


def draw_patch(data, state) -> dict:
    if data.draw(st.integers(0, 2)) == 0 and (targeted := draw_targeted_patch(data, state)) is not None:
        return targeted
    if data.draw(st.integers(0, 3)) == 0 and (shaped := draw_extension_patch(data, state)) is not None:
        return shaped
    path = draw_path(data, state)
    op = data.draw(st.sampled_from(["add", "replace", "remove", "add"]))
    twist = data.draw(st.integers(0, 9))
    if twist == 0 and path:  # aim beside the path: a new key, an append, an index past the end
        parent = state
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, list):
            path[-1] = data.draw(st.sampled_from(["-", len(parent), len(parent) + 1, "01", -1]))
        else:
            path[-1] = data.draw(st.sampled_from(["fresh", "turns", "__proto__"]))
    elif twist == 1 and path:
        path = [*path, data.draw(st.sampled_from([0, "-", "completed", "missing"]))]
    patch = {"op": op, "path": path}
    if op != "remove":
        patch["value"] = data.draw(values)
    return patch


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=any_states, data=st.data())
def test_incremental_facts_equal_the_naive_model_on_random_patch_streams(initial, data):
    mirror = ThreadMirror()
    mirror.load_snapshot(fresh(initial), 1)
    assert mirror.facts == derive_facts(initial)
    for step in range(data.draw(st.integers(1, 12))):
        batch = [draw_patch(data, mirror.state) for _ in range(data.draw(st.integers(1, 3)))]
        before_state, before_facts = fresh(mirror.state), mirror.facts
        try:
            expected_state, applies = apply_patches(fresh(before_state), fresh(batch)), True
        except PatchError:
            expected_state, applies = None, False
        try:
            mirror.apply_patches(fresh(batch), base_revision=mirror.revision, revision=mirror.revision + 1)
        except PatchError:
            assert not applies
            assert mirror.state == before_state and mirror.facts == before_facts  # all or nothing
        else:
            assert applies
            assert (mirror.state if mirror.has_state else MISSING) == expected_state
        if not mirror.has_state:  # the whole state was removed: nothing can follow but a snapshot
            assert mirror.facts == derive_facts(MISSING)
            return
        assert mirror.facts == derive_facts(mirror.state), f"after step {step}: {batch}"
        changed = [name for name in ("busy_reason", "completed_compaction_ids", "boundary_fingerprint", "interrupted",
                                     "user_turn_running", "tokens", "layout_problem") if getattr(before_facts, name) != getattr(mirror.facts, name)]
        event(f"batch {'applied' if applies else 'rejected'}")
        for name in changed:
            event(f"changed {name}")


# --- the rules, case by case ------------------------------------------------------------


def thread(**overrides):
    state = {
        "threadRuntimeStatus": {"type": "idle"},
        "requests": [],
        "unconfirmedTurnSubmissions": [],
        "latestTokenUsageInfo": {"last": {"totalTokens": 90000}, "modelContextWindow": 100000},
        "turns": [
            {"turnId": "user-turn", "turnStartedAtMs": 100, "status": "completed",
             "params": {"input": [{"type": "text", "text": "hello"}]}, "items": []},
            {"turnId": "c", "turnStartedAtMs": 200, "status": "completed", "params": {"input": []},
             "items": [{"type": "contextCompaction", "id": "old", "completed": True}]},
        ],
    }
    state.update(overrides)
    return state


def loaded(state) -> ThreadMirror:
    mirror = ThreadMirror()
    mirror.load_snapshot(fresh(state), 1)
    return mirror


def patch(mirror: ThreadMirror, *patches) -> list:
    return mirror.apply_patches(fresh(list(patches)), base_revision=mirror.revision, revision=mirror.revision + 1)


@pytest.mark.parametrize("overrides, reason", [
    ({}, None),
    ({"threadRuntimeStatus": {"type": "active"}}, "runtime_active"),
    ({"requests": [{"id": 1}]}, "pending_requests"),
    ({"requests": None}, "requests_unreadable"),
    ({"unconfirmedTurnSubmissions": [{"terminal": False}]}, "unconfirmed_submission"),
    ({"unconfirmedTurnSubmissions": [{}]}, "unconfirmed_submission"),
    ({"unconfirmedTurnSubmissions": [{"terminal": True}]}, None),
    ({"threadRuntimeStatus": {}}, "runtime_unknown"),
])
def test_idle_needs_an_idle_runtime_no_requests_and_no_open_submission(overrides, reason):
    mirror = loaded(thread(**overrides))
    assert mirror.busy_reason == reason and mirror.idle is (reason is None)


def test_no_snapshot_yet_is_not_idle_and_says_so():
    mirror = ThreadMirror()
    assert not mirror.idle and mirror.busy_reason == "no_state" and mirror.layout_problem == f.NO_STATE


def test_only_completed_compactions_count_in_live_turns_and_canonical_history():
    history = {"kind": "canonical", "history": {
        "islands": [{"entries": [{"value": "h1"}]}],
        "entitiesByKey": {"h1": {"turnId": "h1", "params": {"input": []}, "items": [
            {"type": "contextCompaction", "id": "reloaded"},  # reloaded public history: tolerated, never counts
            {"type": "contextCompaction", "id": "hist-done", "completed": True}]}}}}
    state = thread(turnHistory=history)
    state["turns"][1]["items"].append({"type": "contextCompaction", "id": "pending", "completed": False})
    mirror = loaded(state)
    assert mirror.completed_compaction_ids == {"old", "hist-done"}
    assert mirror.layout_problem is None


@pytest.mark.parametrize("item, problem", [
    ({"type": "contextCompaction", "id": "x"}, f.LIVE_COMPACTION_WITHOUT_FLAG),
    ({"type": "contextCompaction", "id": "x", "completed": "true"}, f.LIVE_COMPACTION_WITHOUT_FLAG),
    ({"type": "contextCompaction", "completed": True}, f.COMPACTION_WITHOUT_ID),
    ({"type": "contextCompaction", "id": "", "completed": True}, f.COMPACTION_WITHOUT_ID),
])
def test_a_live_compaction_item_without_id_or_boolean_completed_is_a_layout_problem(item, problem):
    state = thread()
    state["turns"][1]["items"].append(item)
    assert loaded(state).layout_problem == problem


@pytest.mark.parametrize("overrides, problem", [
    ({"turns": {}}, f.TURNS_NOT_ARRAY),
    ({"requests": "x"}, f.REQUESTS_NOT_ARRAY),
    ({"threadRuntimeStatus": {"type": 3}}, f.RUNTIME_NOT_STRING),
    ({"threadRuntimeStatus": "idle"}, f.RUNTIME_NOT_STRING),
    ({"turnHistory": {"kind": "canonical", "history": []}}, f.HISTORY_NOT_OBJECT),
])
def test_the_layout_check_names_what_is_wrong(overrides, problem):
    assert loaded(thread(**overrides)).layout_problem == problem


def test_the_boundary_follows_steering_and_stops_but_ignores_cosmetics_history_paging_and_compaction_turns():
    mirror = loaded(thread(turnHistory={"kind": "canonical", "history": {"islands": [{"entries": []}],
                                                                         "entitiesByKey": {}}}))
    start = mirror.boundary_fingerprint
    assert mirror.latest_user_turn_id == "user-turn" and start != f.NO_USER_INPUT
    assert patch(mirror, {"op": "add", "path": ["turns", 0, "params", "input", 0, "text_elements"], "value": []}) == []
    older = {"turnId": "older", "turnStartedAtMs": 5, "params": {"input": [{"type": "text", "text": "old"}]}, "items": []}
    patch(mirror, {"op": "add", "path": ["turnHistory", "history", "entitiesByKey", "older"], "value": older},
          {"op": "add", "path": ["turnHistory", "history", "islands", 0, "entries", 0], "value": {"value": "older"}})
    patch(mirror, {"op": "add", "path": ["turns", "-"],
                   "value": {"turnId": "c2", "params": {"input": []}, "items": [
                       {"type": "contextCompaction", "id": "n", "completed": False}]}})
    assert mirror.boundary_fingerprint == start
    events = patch(mirror, {"op": "add", "path": ["turns", 0, "items", "-"],
                            "value": {"type": "userMessage", "id": "m", "content": [{"type": "text", "text": "steer"}]}})
    assert [type(e) for e in events] == [ev.UserBoundaryChanged] and not events[0].interrupted
    events = patch(mirror, {"op": "replace", "path": ["turns", 0, "status"], "value": "interrupted"})
    assert events == [ev.UserBoundaryChanged(events[0].fingerprint, True, mirror.revision)]


def test_a_turn_without_timestamp_can_still_be_the_latest_user_turn():
    mirror = loaded(thread())
    patch(mirror, {"op": "add", "path": ["turns", "-"],
                   "value": {"turnId": "no-time", "params": {"input": [{"type": "text", "text": "new"}]}, "items": []}})
    assert mirror.latest_user_turn_id == "no-time"


def test_history_only_threads_take_the_boundary_from_the_last_history_turn():
    entities = {k: {"turnId": k, "params": {"input": [{"type": "text", "text": k}]}, "items": []} for k in ("a", "b")}
    mirror = loaded(thread(turns=[], turnHistory={"kind": "canonical", "history": {
        "islands": [{"entries": [{"value": "a"}]}, {"entries": [{"value": "b"}]}], "entitiesByKey": entities}}))
    assert mirror.latest_user_turn_id == "b"


def test_no_user_turn_at_all_has_the_fixed_fingerprint():
    mirror = loaded(thread(turns=[]))
    assert mirror.boundary_fingerprint == f.NO_USER_INPUT and mirror.latest_user_turn_id is None


def test_events_for_one_change_come_in_a_fixed_order():
    mirror = loaded(thread())
    events = patch(mirror,
                   {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "active"}},
                   {"op": "replace", "path": ["turns", 1, "items", 0, "id"], "value": "new"},
                   {"op": "replace", "path": ["latestTokenUsageInfo", "last", "totalTokens"], "value": 10},
                   {"op": "add", "path": ["turns", 0, "items", "-"],
                    "value": {"type": "userMessage", "id": "m", "content": []}},
                   {"op": "add", "path": ["turns", 1, "items", "-"], "value": {"type": "contextCompaction"}})
    assert [type(e) for e in events] == [ev.LayoutIncompatible, ev.UserBoundaryChanged, ev.Telemetry,
                                         ev.CompactionCompleted, ev.ThreadBusy]
    assert events[3] == ev.CompactionCompleted("new", 2) and events[4] == ev.ThreadBusy("runtime_active", 2)


def test_patches_need_a_snapshot_and_the_matching_integer_base_revision():
    with pytest.raises(RevisionGap, match="before any snapshot"):
        ThreadMirror().apply_patches([], base_revision=1, revision=2)
    mirror = loaded(thread())
    with pytest.raises(RevisionGap, match="patches for revision 7 but the mirror holds 1"):
        mirror.apply_patches([], base_revision=7, revision=8)
    with pytest.raises(RevisionGap, match="integer revisions"):
        mirror.apply_patches([], base_revision=None, revision=None)
    assert mirror.revision == 1


def test_a_failing_batch_changes_nothing_and_emits_nothing():
    mirror = loaded(thread())
    before = fresh(mirror.state)
    with pytest.raises(PatchError):
        patch(mirror, {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "active"}},
              {"op": "remove", "path": ["turns", 0, "items", 0]})
    assert mirror.state == before and mirror.idle and mirror.revision == 1


def test_work_per_patch_does_not_grow_with_the_thread(mocker):
    big = thread(turns=[{"turnId": f"t{i}", "params": {"input": [{"type": "text", "text": "q"}]},
                         "items": [{"type": "agentMessage", "id": f"a{i}"},
                                   {"type": "contextCompaction", "id": f"c{i}", "completed": True}]}
                        for i in range(3000)])
    mirror = loaded(big)
    spies = {name: mocker.spy(f, name) for name in ("item_facts", "fingerprint_of")}
    patch(mirror, {"op": "add", "path": ["turns", 1500, "items", "-"], "value": {"type": "agentMessage", "id": "z"}},
          {"op": "replace", "path": ["turns", 2999, "items", 0, "id"], "value": "streamed"},
          {"op": "replace", "path": ["turns", 7, "items", 1, "completed"], "value": False},
          {"op": "replace", "path": ["latestTokenUsageInfo", "last", "totalTokens"], "value": 5})
    assert {name: spy.call_count for name, spy in spies.items()} == {"item_facts": 3, "fingerprint_of": 0}
    assert "c7" not in mirror.completed_compaction_ids and len(mirror.completed_compaction_ids) == 2999


# --- the real extension's shapes (../shared/reference/extension-generations.md §3) ---------


def paginated(*turns_in_order, kind="paginated", islands_of=None):
    """A paginated thread: `turns` empty, every turn an entity ordered by its island entries."""
    entities = {t["turnId"]: t for t in turns_in_order}
    keys = [t["turnId"] for t in turns_in_order]
    groups = islands_of or [keys]
    return thread(historyMode="paginated", turns=[], turnHistory={"kind": kind, "history": {
        "entitiesByKey": entities, "generation": 3, "isComplete": False,
        "islands": [{"id": f"island-{i}", "olderBoundary": None, "newerBoundary": None,
                     "entries": [{"key": f"entry-{k}", "value": k} for k in group]} for i, group in enumerate(groups)]}})


def user_turn(turn_id, text="hello", status="completed", started=100):
    return {"turnId": turn_id, "turnStartedAtMs": started, "status": status,
            "params": {"input": [{"type": "text", "text": text, "text_elements": []}]}, "items": []}


def compaction_turn(turn_id, compaction_id, completed, started=200):
    return {"turnId": turn_id, "turnStartedAtMs": started, "status": "completed" if completed else "inProgress",
            "params": {"input": []}, "items": [{"type": "contextCompaction", "id": compaction_id, "completed": completed}]}


@pytest.mark.parametrize("kind", ["paginated", "canonical", "somethingNew"])
def test_a_paginated_history_is_read_by_its_structure_whatever_its_kind(kind):
    mirror = loaded(paginated(user_turn("u1"), compaction_turn("c1", "old", True),
                              user_turn("u2", "latest", started=300), kind=kind,
                              islands_of=[["u1", "c1"], ["u2"]]))
    assert mirror.layout_problem is None and mirror.idle
    assert mirror.completed_compaction_ids == {"old"}
    assert mirror.latest_user_turn_id == "u2"


def test_a_compaction_completing_inside_a_paginated_history_is_seen():
    mirror = loaded(paginated(user_turn("u1"), compaction_turn("c1", "old", True)))
    entity = ["turnHistory", "history", "entitiesByKey"]
    patch(mirror, {"op": "add", "path": [*entity, "c2"], "value": compaction_turn("c2", "new", False, 300)},
          {"op": "add", "path": ["turnHistory", "history", "islands", 0, "entries", "-"],
           "value": {"key": "entry-c2", "value": "c2"}},
          {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "active", "activeFlags": []}})
    assert mirror.completed_compaction_ids == {"old"} and not mirror.idle
    events = patch(mirror, {"op": "replace", "path": [*entity, "c2", "items", 0, "completed"], "value": True},
                   {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "idle", "activeFlags": []}})
    assert events == [ev.CompactionCompleted("new", mirror.revision), ev.ThreadIdle(mirror.revision)]


def test_new_user_input_inside_a_paginated_history_moves_the_boundary():
    mirror = loaded(paginated(user_turn("u1"), compaction_turn("c1", "old", True)))
    before = mirror.boundary_fingerprint
    events = patch(mirror, {"op": "add", "path": ["turnHistory", "history", "entitiesByKey", "u2"],
                            "value": user_turn("u2", "do something else", "inProgress", 300)},
                   {"op": "add", "path": ["turnHistory", "history", "islands", 0, "entries", "-"],
                    "value": {"key": "entry-u2", "value": "u2"}})
    assert mirror.latest_user_turn_id == "u2" and mirror.boundary_fingerprint != before
    assert [type(e) for e in events] == [ev.UserBoundaryChanged, ev.UserTurnRunning]


@pytest.mark.parametrize("history", [{"kind": "notLoaded"}, {"kind": "paginated", "history": None}, None])
def test_a_turn_history_without_a_history_object_has_no_history_turns(history):
    mirror = loaded(thread(turnHistory=history))
    assert mirror.layout_problem is None and mirror.latest_user_turn_id == "user-turn"


@pytest.mark.parametrize("requests, pending", [
    ([{"id": "r1", "method": "item/commandExecution/requestApproval", "params": {}, "completed": True}], 0),
    ([{"id": "r1", "method": "item/commandExecution/requestApproval", "params": {}, "completed": False}], 1),
    ([{"id": "r1", "method": "item/tool/requestUserInput", "params": {}}], 1),
    ([{"id": "r1", "params": {}, "completed": True}, {"id": "r2", "params": {}, "completed": "yes"}], 1),
    (["not-an-object"], 1),
])
def test_a_request_marked_completed_is_not_pending(requests, pending):
    mirror = loaded(thread(requests=requests))
    assert mirror.pending_requests == pending
    assert mirror.busy_reason == ("pending_requests" if pending else None)


def test_answering_an_approval_in_place_makes_the_thread_idle():
    mirror = loaded(thread(requests=[{"id": "r1", "method": "item/commandExecution/requestApproval",
                                      "params": {}, "completed": False}]))
    assert mirror.busy_reason == "pending_requests"
    assert patch(mirror, {"op": "replace", "path": ["requests", 0, "completed"], "value": True}) == [
        ev.ThreadIdle(mirror.revision)]


@pytest.mark.parametrize("status, reason", [
    (None, f.RUNTIME_NULL),
    ({"type": "notLoaded", "activeFlags": []}, "runtime_notLoaded"),
    ({"type": "systemError", "activeFlags": []}, "runtime_systemError"),
])
def test_a_null_unloaded_or_failed_runtime_is_busy_not_a_layout_problem(status, reason):
    mirror = loaded(thread(threadRuntimeStatus=status))
    assert mirror.layout_problem is None and mirror.busy_reason == reason and not mirror.idle
    assert patch(mirror, {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "idle"}}) == [
        ev.ThreadIdle(mirror.revision)]


def test_a_missing_runtime_status_is_still_a_layout_problem():
    state = thread()
    del state["threadRuntimeStatus"]
    assert loaded(state).layout_problem == f.RUNTIME_NOT_STRING


def test_the_latest_user_turn_running_or_not_is_a_fact_with_its_event():
    mirror = loaded(thread())
    assert not mirror.user_turn_running
    events = patch(mirror, {"op": "add", "path": ["turns", "-"], "value": user_turn("u2", "go", "inProgress", 300)})
    assert mirror.user_turn_running and events[1:] == [ev.UserTurnRunning(True, mirror.revision)]
    events = patch(mirror, {"op": "replace", "path": ["turns", 2, "status"], "value": "completed"},
                   {"op": "replace", "path": ["threadRuntimeStatus"], "value": {"type": "systemError"}})
    assert not mirror.user_turn_running and mirror.busy_reason == "runtime_systemError"
    assert events == [ev.UserTurnRunning(False, mirror.revision), ev.ThreadBusy("runtime_systemError", mirror.revision)]


def test_a_root_replace_rebuilds_every_fact():
    mirror = loaded(thread(threadRuntimeStatus={"type": "active"}))
    replacement = paginated(user_turn("user-turn"), compaction_turn("c1", "old", True),
                            compaction_turn("c2", "new", True, 300))
    events = patch(mirror, {"op": "replace", "path": [], "value": replacement})
    assert mirror.state == replacement and mirror.idle and mirror.completed_compaction_ids == {"old", "new"}
    assert events == [ev.CompactionCompleted("new", mirror.revision), ev.ThreadIdle(mirror.revision)]
    assert mirror.facts == derive_facts(replacement)


@pytest.mark.parametrize("submissions, count", [
    ([{"requestId": "q1", "method": "thread-follower-start-turn", "stage": "outcome-unknown",
       "clientUserMessageId": "m1"}], 1),
    ([{"requestId": "q1", "method": "thread-follower-start-turn", "stage": "sent", "clientUserMessageId": "m1"},
      {"requestId": "q2", "method": "thread-follower-start-turn", "stage": "sent", "clientUserMessageId": "m2"}], 2),
    (None, 0),
])
def test_a_submission_without_a_terminal_flag_is_in_flight_and_a_missing_key_is_none(submissions, count):
    state = thread(unconfirmedTurnSubmissions=submissions)
    if submissions is None:
        del state["unconfirmedTurnSubmissions"]
    mirror = loaded(state)
    assert mirror.unconfirmed_submissions == count and mirror.idle is (count == 0)
    if count:  # the extension deletes the key once nothing is in flight
        assert patch(mirror, {"op": "remove", "path": ["unconfirmedTurnSubmissions"]}) == [ev.ThreadIdle(mirror.revision)]


def test_work_per_patch_does_not_grow_with_a_paginated_history(monkeypatch):
    turns = [{"turnId": f"t{i}", "status": "completed", "params": {"input": [{"type": "text", "text": "q"}]},
              "items": [{"type": "agentMessage", "id": f"a{i}"},
                        {"type": "contextCompaction", "id": f"c{i}", "completed": True}]} for i in range(3000)]
    mirror = loaded(paginated(*turns, islands_of=[[f"t{i}" for i in range(1500)],
                                                  [f"t{i}" for i in range(1500, 3000)]]))
    calls = {"item_facts": 0, "fingerprint_of": 0}
    for name in calls:
        original = getattr(f, name)

        def counting(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(f, name, counting)
    entity = ["turnHistory", "history", "entitiesByKey"]
    patch(mirror, {"op": "add", "path": [*entity, "t1500", "items", "-"], "value": {"type": "agentMessage", "id": "z"}},
          {"op": "replace", "path": [*entity, "t2999", "items", 0, "id"], "value": "streamed"},
          {"op": "replace", "path": [*entity, "t7", "items", 1, "completed"], "value": False},
          {"op": "replace", "path": ["latestTokenUsageInfo", "last", "totalTokens"], "value": 5})
    assert calls == {"item_facts": 3, "fingerprint_of": 0}
    assert "c7" not in mirror.completed_compaction_ids and len(mirror.completed_compaction_ids) == 2999
    assert mirror.latest_user_turn_id == "t2999"


# --- the layout: a generation that renames every field keeps every rule -----------------

# Every field the thread model reads gets a new name ("turns" -> "zturns", ...). Data stays as
# it is: values (the item kinds are values, renamed in a test of their own), what lies under a
# turn's input or a message's content (user input elements, hashed into the fingerprint), the
# keys of entitiesByKey (island entries name them), indices, "-" and the keys a patch may never use.
_KINDS = ("compaction_type", "user_message_type")
RENAMED = FieldNames(**{name: "z" + default for name, default in FieldNames._field_defaults.items() if name not in _KINDS})
_DATA_UNDER = frozenset({"input", "content"})
_KEEP = frozenset({"-", "__proto__", "prototype", "constructor"})


def _rename_key(key):
    if not isinstance(key, str) or key in _KEEP or key.lstrip("-").isdigit():
        return key
    return "z" + key


def renamed(value, *, verbatim=False, keys_verbatim=False):
    """``value`` as the renaming generation would send it."""
    if verbatim:
        return value
    if isinstance(value, dict):
        return {(key if keys_verbatim else _rename_key(key)):
                renamed(v, verbatim=key in _DATA_UNDER, keys_verbatim=key == "entitiesByKey")
                for key, v in value.items()}
    if isinstance(value, list):
        return [renamed(v) for v in value]
    return value


def renamed_path(path):
    out, verbatim, keys_verbatim = [], False, False
    for key in path:
        out.append(key if verbatim or keys_verbatim else _rename_key(key))
        verbatim = verbatim or key in _DATA_UNDER
        keys_verbatim = key == "entitiesByKey" and not verbatim
    return out


def renamed_batch(batch):
    out = []
    for p in batch:
        path = p["path"]
        under_data = any(key in _DATA_UNDER for key in path)
        after_entities = bool(path) and path[-1] == "entitiesByKey"
        q = {"op": p["op"], "path": renamed_path(path)}
        if "value" in p:
            q["value"] = renamed(p["value"], verbatim=under_data, keys_verbatim=after_entities)
        out.append(q)
    return out


_V11_SENTENCES, _RENAMED_SENTENCES = attrs.asdict(f.problems_of(V11)), attrs.asdict(f.problems_of(RENAMED))
_SENTENCE_MAP = {_V11_SENTENCES[name]: _RENAMED_SENTENCES[name] for name in _V11_SENTENCES}


def as_renamed(facts: f.ThreadFacts) -> f.ThreadFacts:
    """The facts the renamed generation must derive: the same, with problems naming its fields."""
    if facts.layout_problem is None:
        return facts
    sentences = [_SENTENCE_MAP.get(s, s) for s in facts.layout_problem.split("; ")]
    return attrs.evolve(facts, layout_problem=f.join_problems(sentences))


def test_a_renamed_layout_names_its_own_fields_in_layout_problems():
    assert RENAMED.turns == "zturns" and RENAMED.compaction_type == "contextCompaction"
    assert derive_facts({"zturns": {}}, RENAMED).layout_problem.split("; ")[-1] == "zturns is not an array"
    assert f.problems_of(RENAMED).islands_not_array == "zturnHistory.zhistory.zislands is not an array"


def test_the_v11_layout_does_not_read_a_renamed_state():
    state = renamed(thread(turns=[{"turnId": "t", "status": "completed", "params": {"input": []},
                                   "items": [{"type": "contextCompaction", "id": "c", "completed": True}]}]))
    assert derive_facts(state, RENAMED).completed_compaction_ids == {"c"}
    assert derive_facts(state).completed_compaction_ids == frozenset()
    assert derive_facts(state).layout_problem is not None


def test_renamed_item_kinds_are_read_from_the_layout():
    kinds = V11._replace(compaction_type="compaction", user_message_type="userInput")
    turn = {"turnId": "t", "status": "inProgress", "params": {"input": []},
            "items": [{"type": "userInput", "id": "m", "content": [{"type": "text", "text": "hi"}]},
                      {"type": "compaction", "id": "c", "completed": True}]}
    facts = derive_facts(thread(turns=[turn]), kinds)
    assert facts.completed_compaction_ids == {"c"} and facts.user_turn_running and facts.latest_user_turn_id == "t"
    v11 = derive_facts(thread(turns=[turn]))
    assert v11.completed_compaction_ids == frozenset() and v11.latest_user_turn_id is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=any_states, data=st.data())
def test_a_renamed_layout_derives_the_same_facts_from_the_renamed_stream(initial, data):
    original, other = ThreadMirror(), ThreadMirror(RENAMED)
    original.load_snapshot(fresh(initial), 1)
    other.load_snapshot(renamed(fresh(initial)), 1)
    assert other.facts == as_renamed(original.facts) == as_renamed(derive_facts(initial))
    assert other.facts == derive_facts(renamed(fresh(initial)), RENAMED)
    for _ in range(data.draw(st.integers(1, 8))):
        batch = [draw_patch(data, original.state) for _ in range(data.draw(st.integers(1, 3)))]
        outcomes = []
        for mirror, sent in ((original, fresh(batch)), (other, renamed_batch(fresh(batch)))):
            try:
                mirror.apply_patches(sent, base_revision=mirror.revision, revision=mirror.revision + 1)
                outcomes.append(True)
            except PatchError:
                outcomes.append(False)
        assert outcomes[0] == outcomes[1]
        if not original.has_state:
            assert not other.has_state
            return
        assert other.state == renamed(original.state)
        assert other.facts == as_renamed(original.facts)
        assert other.facts == derive_facts(other.state, RENAMED)
