from __future__ import annotations

import copy

import pytest

from rekall.thread.patches import MISSING, PatchError, apply_patches


def state():
    return {"list": [1, 2], "obj": {"a": 1}, "deep": {"items": [{"id": "x"}]}}


def applied(patches, start=None):
    return apply_patches(start if start is not None else state(), patches)


@pytest.mark.parametrize("patch", [
    {"op": "add", "path": ["list", "not-an-index"], "value": 0},
    {"op": "add", "path": ["list", -1], "value": 0},
    {"op": "add", "path": ["list", 3], "value": 0},
    {"op": "add", "path": ["list", "01"], "value": 0},
    {"op": "add", "path": ["list", True], "value": 0},
    {"op": "replace", "path": ["list", 2], "value": 0},
    {"op": "remove", "path": ["list", "-"]},
    {"op": "replace", "path": ["obj", "missing"], "value": 0},
    {"op": "remove", "path": ["obj", "missing"]},
    {"op": "add", "path": ["nope", "x"], "value": 0},
    {"op": "add", "path": ["obj", "a", "x"], "value": 0},
    {"op": "add", "path": ["__proto__", "polluted"], "value": 1},
    {"op": "add", "path": ["obj", "constructor"], "value": 1},
    {"op": "move", "path": ["obj"], "value": 1},
    {"op": "add", "path": "obj/a", "value": 1},
    {"op": "add", "path": [["obj"]], "value": 1},
    "not a patch",
])
def test_an_inapplicable_patch_fails_and_leaves_the_state_unchanged(patch):
    start = state()
    with pytest.raises(PatchError):
        applied([patch], start)
    assert start == state()


def test_patches_must_be_an_array():
    with pytest.raises(PatchError, match="must be an array"):
        apply_patches(state(), {"op": "add"})


@pytest.mark.parametrize("patch, expected", [
    ({"op": "add", "path": ["list", "-"], "value": 3}, [1, 2, 3]),
    ({"op": "add", "path": ["list", 0], "value": 0}, [0, 1, 2]),
    ({"op": "add", "path": ["list", "2"], "value": 3}, [1, 2, 3]),
    ({"op": "add", "path": ["list", 1.0], "value": 9}, [1, 9, 2]),
    ({"op": "replace", "path": ["list", "1"], "value": 7}, [1, 7]),
    ({"op": "remove", "path": ["list", 0]}, [2]),
])
def test_array_indices_insert_replace_and_remove_in_place(patch, expected):
    start = state()
    assert applied([patch], start) is start
    assert start["list"] == expected


def test_object_add_overwrites_and_replace_needs_the_key():
    start = applied([{"op": "add", "path": ["obj", "a"], "value": 2}, {"op": "add", "path": ["obj", "b"], "value": 3},
                     {"op": "remove", "path": ["obj", "a"]}])
    assert start["obj"] == {"b": 3}


def test_a_numeric_key_on_an_object_is_its_decimal_string():
    start = applied([{"op": "add", "path": ["obj", 7], "value": 1}])
    assert start["obj"]["7"] == 1


def test_a_missing_value_reads_as_null_like_a_js_undefined():
    assert applied([{"op": "replace", "path": ["obj", "a"]}])["obj"] == {"a": None}


def test_the_empty_path_replaces_or_removes_the_whole_state():
    assert applied([{"op": "replace", "path": [], "value": {"fresh": 1}}]) == {"fresh": 1}
    assert applied([{"op": "remove", "path": []}]) is MISSING


def test_a_batch_is_all_or_nothing_even_after_many_steps():
    start = state()
    snapshot = copy.deepcopy(start)
    with pytest.raises(PatchError, match="state patch 6"):
        applied([
            {"op": "add", "path": ["list", 0], "value": 0},
            {"op": "remove", "path": ["list", 2]},
            {"op": "replace", "path": ["obj", "a"], "value": 5},
            {"op": "add", "path": ["obj", "new"], "value": 6},
            {"op": "remove", "path": ["deep", "items", 0]},
            {"op": "replace", "path": [], "value": {"whole": True}},
            {"op": "remove", "path": ["missing"]},
        ], start)
    assert start == snapshot


def test_the_observer_sees_every_step_and_every_undo():
    seen = []
    with pytest.raises(PatchError):
        apply_patches(state(), [{"op": "add", "path": ["list", "-"], "value": 3}, {"op": "remove", "path": ["x"]}],
                      seen.append)
    assert [(c.op, c.path, c.inserted) for c in seen] == [("add", ("list", 2), True), ("remove", ("list", 2), True)]
