"""The loopback Responses API mock, driven by a plain HTTP client."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import pytest

from tests.support.mock_model import COMPACTION_PROMPT_MARKER, MockModel, derived_input_tokens


def post(model: MockModel, body: dict[str, Any], path: str = "/v1/responses") -> tuple[int, str, list[dict[str, Any]]]:
    connection = http.client.HTTPConnection("127.0.0.1", model.port, timeout=5)
    try:
        connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        raw = response.read().decode()
        content_type = response.getheader("Content-Type") or ""
        events = []
        for block in raw.split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in lines:
                data = json.loads(lines["data"])
                assert data["type"] == lines["event"]
                events.append(data)
        return response.status, content_type, events
    finally:
        connection.close()


def user_turn(text: str) -> dict[str, Any]:
    return {"model": "mock-model", "stream": True,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}


@pytest.fixture
def model() -> MockModel:
    with MockModel() as running:
        yield running


def test_a_turn_is_answered_with_created_item_and_completed_events(model: MockModel) -> None:
    status, content_type, events = post(model, user_turn("hello"))
    assert (status, content_type) == (200, "text/event-stream")
    assert [e["type"] for e in events] == ["response.created", "response.output_item.done", "response.completed"]
    item = events[1]["item"]
    assert (item["type"], item["role"], item["content"][0]["text"]) == ("message", "assistant", "Done.")
    assert events[0]["response"]["id"] == events[2]["response"]["id"]
    usage = events[2]["response"]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


def test_input_tokens_are_the_input_size_over_bytes_per_token(model: MockModel) -> None:
    small, large = user_turn("x" * 40), user_turn("x" * 40_000)
    _, _, small_events = post(model, small)
    _, _, large_events = post(model, large)
    small_tokens = small_events[2]["response"]["usage"]["input_tokens"]
    large_tokens = large_events[2]["response"]["usage"]["input_tokens"]
    assert small_tokens == derived_input_tokens(small, 4)
    assert large_tokens == derived_input_tokens(large, 4) >= 10_000 > small_tokens
    assert [r.input_tokens for r in model.requests] == [small_tokens, large_tokens]


def test_every_request_is_recorded_and_found_by_marker(model: MockModel) -> None:
    post(model, user_turn("first"))
    post(model, user_turn("second MARK-42 here"))
    assert [r.seq for r in model.requests] == [1, 2]
    (found,) = model.requests_containing("MARK-42")
    assert found.seq == 2 and found.kind == "turn" and found.body["input"][0]["role"] == "user"
    assert model.requests_containing("absent") == []


def test_a_scripted_tool_call_answers_the_next_turn_only(model: MockModel) -> None:
    call_id = model.queue_tool_call("compaction_status", {"threadId": "t"})
    _, _, first = post(model, user_turn("go"))
    _, _, second = post(model, user_turn("go on"))
    item = first[1]["item"]
    assert (item["type"], item["name"], item["call_id"]) == ("function_call", "compaction_status", call_id)
    assert json.loads(item["arguments"]) == {"threadId": "t"}
    assert second[1]["item"]["type"] == "message"


def test_scripted_texts_are_used_in_order(model: MockModel) -> None:
    model.queue_text("one")
    model.queue_text("two")
    texts = [post(model, user_turn("q"))[2][1]["item"]["content"][0]["text"] for _ in range(3)]
    assert texts == ["one", "two", "Done."]


def test_a_compaction_request_gets_the_summary_and_leaves_the_script_alone(model: MockModel) -> None:
    model.queue_text("scripted")
    body = user_turn(f"You are performing a {COMPACTION_PROMPT_MARKER}. Summarise.")
    _, _, events = post(model, body)
    assert events[1]["item"]["content"][0]["text"] == model.summary_text
    assert model.requests[-1].kind == "compaction"
    assert post(model, user_turn("next"))[2][1]["item"]["content"][0]["text"] == "scripted"


def test_a_request_labelled_compaction_in_metadata_is_a_compaction(model: MockModel) -> None:
    body = {**user_turn("summarise"), "client_metadata": {
        "x-codex-turn-metadata": json.dumps({"request_kind": "compaction"})}}
    post(model, body)
    assert model.requests[-1].kind == "compaction"


def test_the_terminal_uis_title_request_gets_the_title_and_leaves_the_script_alone(model: MockModel) -> None:
    model.queue_text("scripted")
    body = {**user_turn("Generate a short title for this prompt"), "client_metadata": {
        "x-codex-turn-metadata": json.dumps({"request_kind": "turn", "thread_source": "thread_title"})}}
    assert post(model, body)[2][1]["item"]["content"][0]["text"] == model.title_text
    assert model.requests[-1].kind == "title"
    assert post(model, user_turn("next"))[2][1]["item"]["content"][0]["text"] == "scripted"


def test_unknown_routes_are_recorded_and_refused(model: MockModel) -> None:
    status, _, _ = post(model, {"x": 1}, path="/v1/models")
    assert status == 404
    assert model.requests[-1].kind == "other" and model.requests[-1].path == "/v1/models"


def test_tool_outputs_count_as_input_text(model: MockModel) -> None:
    body = {"input": [{"type": "function_call_output", "call_id": "c", "output": "tool said MARK-7"}]}
    post(model, body)
    assert model.requests_containing("MARK-7")


def test_concurrent_requests_are_all_recorded(model: MockModel) -> None:
    threads = [threading.Thread(target=post, args=(model, user_turn(f"n{i}"))) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(r.seq for r in model.requests) == list(range(1, 9))
    assert {r.text for r in model.requests} == {f"n{i}" for i in range(8)}


def test_wait_for_returns_a_matching_request_or_times_out(model: MockModel) -> None:
    post(model, user_turn("MARK-1"))
    assert model.wait_for(lambda r: r.contains("MARK-1"), timeout=5).seq == 1
    with pytest.raises(TimeoutError, match="no matching request"):
        model.wait_for(lambda r: r.contains("never"), timeout=0.05)


def test_wait_for_wakes_up_when_a_request_arrives(model: MockModel) -> None:
    sender = threading.Timer(0.01, post, args=(model, user_turn("late MARK-9")))
    sender.start()
    try:
        assert model.wait_for(lambda r: r.contains("MARK-9"), timeout=5).kind == "turn"
    finally:
        sender.join()


def test_the_server_binds_loopback_only_and_reports_its_url(model: MockModel) -> None:
    assert model.base_url == f"http://127.0.0.1:{model.port}/v1"
    assert model._server is not None and model._server.server_address[0] == "127.0.0.1"


def test_a_stopped_model_has_no_url() -> None:
    model = MockModel()
    with pytest.raises(RuntimeError, match="not running"):
        model.base_url


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
def test_a_body_that_is_not_a_json_object_is_recorded_not_fatal(model: MockModel, raw: bytes) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", model.port, timeout=5)
    connection.request("POST", "/v1/responses", body=raw)
    assert connection.getresponse().status == 200
    connection.close()
    assert model.requests[-1].body == {"unparsed": raw.decode()}
