"""The follower's decisions, table-tested without sockets: messages in, actions out.

Frames are spelled by the other party (:mod:`rekall.sim.protocol`), not by rekall's adapter."""

from __future__ import annotations

from typing import Any

import pytest

from rekall.kernel import events as ev
from rekall.adapters.extension import messages as m
from rekall.adapters.extension.errors import NoOwner, SnapshotTimeout, VersionMismatch
from rekall.adapters.extension.follower import (
    Connected,
    ConnectFailed,
    Emit,
    Follower,
    GiveUp,
    Rediscover,
    Resolve,
    Send,
)
from rekall.adapters.extension.generations import G26_721, G26_9XX
from rekall.adapters.extension.handshake import Handshaken
from rekall.adapters.extension.ipc import IpcAdapter
from rekall.sim import protocol as p

THREAD = "019a0000-0000-7000-8000-000000000001"
OWNER, OTHER, ME = "owner-1", "client-2", "me"
A26_9XX, A26_721 = IpcAdapter(G26_9XX), IpcAdapter(G26_721)
STATE = {"threadRuntimeStatus": {"type": "idle"}, "requests": [], "turns": [],
         "latestTokenUsageInfo": {"last": {"totalTokens": 10}, "modelContextWindow": 100}}


def state(change: dict[str, Any], source: str = OWNER, version: int = 11) -> dict[str, Any]:
    return p.broadcast(p.STATE_CHANGED, source, version, {"hostId": p.HOST_ID, "conversationId": THREAD,
                                                           "change": change})


def snapshot(revision: int = 1, source: str = OWNER, version: int = 11) -> dict[str, Any]:
    return state({"type": "snapshot", "revision": revision, "conversationState": STATE}, source, version)


def patches(base: int, revision: int, *ops: dict[str, Any]) -> dict[str, Any]:
    return state({"type": "patches", "baseRevision": base, "revision": revision, "patches": list(ops)})


def followers_asked(source: str) -> dict[str, Any]:
    return p.broadcast(p.FOLLOWING_STATUS_REQUESTED, source, 1, {"hostId": p.HOST_ID, "conversationId": THREAD})


TOKENS_20 = {"op": "replace", "path": ["latestTokenUsageInfo", "last", "totalTokens"], "value": 20}


def follower(adapter: IpcAdapter = A26_9XX, *, owner: str | None = OWNER, connected: bool = True,
             max_resyncs: int = 5) -> Follower:
    """A follower after the handshake; ``connected``: its first snapshot has come."""
    f = Follower(THREAD, adapter, (), max_resyncs=max_resyncs)
    f.connection_opened()
    f.handshaken(Handshaken(adapter, ME, owner), now=0.0)
    f.following(emit=False)
    if connected:
        assert f.receive(snapshot(source=owner or OWNER)) == [Connected()]
    return f


def follow_to(owner: str | None) -> Send:
    return Send(A26_9XX.follow_broadcast(THREAD, source=ME, owner=owner))


def kinds(actions: list[Any]) -> list[str]:
    return [type(a).__name__ for a in actions]


@pytest.mark.parametrize(("name", "connected", "message", "expected"), [
    ("the first snapshot completes the connect", False, snapshot(), ["Connected"]),
    ("a later snapshot is mirrored", True, snapshot(2), ["Emit"]),
    ("a patch in order is mirrored", True, patches(1, 2, TOKENS_20), ["Emit"]),
    ("a revision gap resyncs", True, patches(5, 6, TOKENS_20), ["Send"]),
    ("an inapplicable patch resyncs", True, patches(1, 2, {"op": "replace", "path": ["no", "such"], "value": 1}),
     ["Send"]),
    ("a snapshot without state resyncs", True, state({"type": "snapshot", "revision": 2}), ["Send"]),
    ("a change of unknown type resyncs", True, state({"type": "delta"}), ["Send"]),
    ("patches before the first snapshot are dropped", False, patches(1, 2, TOKENS_20), []),
    ("another client's state makes it ask discovery", True, snapshot(source=OTHER), ["Rediscover"]),
    ("the owner asking for followers gets our follow", True, followers_asked(OWNER), ["Send"]),
    ("another client asking for followers makes it ask discovery", True, followers_asked(OTHER), ["Rediscover"]),
    ("a newer state version from the owner while connecting fails the connect", False, snapshot(version=12),
     ["Emit", "ConnectFailed"]),
    ("a newer state version once connected is reported", True, snapshot(version=12), ["Emit"]),
    ("a router's probe is declined", True, {"type": "client-discovery-request", "requestId": "q"}, ["Send"]),
    ("a request to us has no handler", True, {"type": "request", "requestId": "q", "method": "x"}, ["Send"]),
    ("a response goes to its request", True, p.failure("r", "request-timeout"), ["Resolve"]),
    ("another thread's state is ignored", True, {**snapshot(), "params": {"hostId": p.HOST_ID,
                                                                          "conversationId": "other"}}, []),
])
def test_what_the_26_9xx_follower_does_with_each_message(name, connected, message, expected):
    assert kinds(follower(connected=connected).receive(message)) == expected, name


def test_a_resync_follows_again_and_the_snapshot_that_answers_it_says_so():
    f = follower()
    assert f.receive(patches(5, 6, TOKENS_20)) == [follow_to(OWNER)]
    assert f.receive(patches(1, 2, TOKENS_20)) == [] and f.dropped_patches == 1  # waiting for the snapshot
    resynced, facts = f.receive(snapshot(7))
    assert resynced == Emit((ev.Resynced("patches for revision 5 but the mirror holds 1", 1, 7),), at_arrival=False)
    assert facts.at_arrival and f.resync_count == 1


def test_resyncs_beyond_the_bound_give_the_connection_up_and_a_new_connection_counts_afresh():
    f = follower(max_resyncs=1)
    assert kinds(f.receive(patches(5, 6, TOKENS_20))) == ["Send"]
    assert kinds(f.receive(snapshot(7))) == ["Emit", "Emit"]
    assert f.receive(patches(9, 10, TOKENS_20)) == [
        GiveUp("gave up after 1 resyncs on one connection (last: patches for revision 9 but the mirror holds 7)")]
    f.connection_opened()
    assert kinds(f.receive(patches(9, 10, TOKENS_20))) == ["Send"]


def test_the_first_snapshots_facts_are_emitted_only_when_asked():
    f = follower(connected=False)
    f.following(emit=True)
    connected, facts = f.receive(snapshot())
    assert connected == Connected() and facts.at_arrival and facts.events


def test_discovery_is_asked_once_per_client_and_one_at_a_time():
    f = follower()
    assert f.receive(snapshot(source=OTHER)) == [Rediscover("another client broadcast this thread's state")]
    assert f.receive(snapshot(source="client-3")) == []  # one rediscovery at a time
    assert f.rediscovered(None, "why") == []
    assert f.receive(snapshot(source=OTHER)) == []  # already checked
    assert f.foreign_broadcasts == 3


def test_a_rediscovered_owner_is_adopted_and_followed_and_the_same_owner_changes_nothing():
    f = follower()
    f.receive(followers_asked(OTHER))
    assert f.rediscovered(m.Response("r", True, {}, None, OWNER, {}), "why") == []
    f.receive(followers_asked("client-3"))
    assert f.rediscovered(m.Response("r", True, {}, None, "client-3", {}), "moved") == [follow_to("client-3")]
    assert (f.owner_id, f.owner_changes) == ("client-3", 1)


def test_a_failed_rediscovery_changes_nothing():
    f = follower()
    f.receive(followers_asked(OTHER))
    assert f.rediscovered(m.Response("r", False, None, "no-client-found", None, {}), "why") == []
    assert f.owner_id == OWNER


def test_without_owner_discovery_the_client_answering_our_follow_owns_the_thread():
    f = follower(A26_721, owner=None, connected=False)
    assert f.receive(snapshot(source=OTHER)) == [Connected()]
    assert f.owner_id == OTHER


def test_without_owner_discovery_the_client_asking_for_followers_owns_the_thread():
    f = follower(A26_721, owner=None, connected=False)
    f.receive(snapshot(source=OWNER))
    actions = f.receive(followers_asked(OTHER))
    assert actions == [Send(A26_721.follow_broadcast(THREAD, source=ME, owner=OTHER))]
    assert (f.owner_id, f.owner_changes) == (OTHER, 1)


def test_without_owner_discovery_another_clients_state_is_counted_not_chased():
    f = follower(A26_721, owner=None, connected=False)
    f.receive(snapshot(source=OWNER))
    assert f.receive(snapshot(source=OTHER)) == [] and f.foreign_broadcasts == 1


def test_a_newer_state_version_fails_the_connect_once_with_which_side_is_behind():
    f = follower(connected=False)
    reported, failed = f.receive(snapshot(version=12))
    assert isinstance(failed, ConnectFailed) and isinstance(failed.error, VersionMismatch)
    assert failed.error.message == reported.events[0].detail and failed.error.message.endswith("update rekall")
    assert f.receive(snapshot(version=12)) == [] and sum(f.unknown_versions.values()) == 2


def test_a_response_is_resolved_as_classified():
    response = p.success("r", p.COMPACT, {"ok": True}, OWNER)
    assert follower().receive(response) == [Resolve(m.Response("r", True, {"ok": True}, None, OWNER, response))]


@pytest.mark.parametrize(("adapter", "error", "delivery", "says"), [
    (A26_9XX, "request-version-mismatch", "not_delivered",
     "sent at version 2 (base 1 + 1 for the envelope hostId), generation 26.9xx"),
    (A26_9XX, "no-client-found", "not_delivered",
     "owner owner-1 answered owner discovery for this thread 2.5 s before, so the likely cause is a version"),
    (A26_721, "no-client-found", "not_delivered",
     "either no client owns the thread now or the extension expects another version"),
    (A26_9XX, "client-disconnected", "unknown", "the owner may have acted on it"),
])
def test_what_a_refused_request_proves(adapter, error, delivery, says):
    owner = OWNER if adapter.owner_discovery else None
    refused = follower(adapter, owner=owner).refused(p.COMPACT, m.Response("r", False, None, error, None, {}), 2.5)
    assert (refused.code, refused.delivery) == (error, delivery)
    assert says in f"{refused.message} ({refused.hint})"


def test_a_missing_first_snapshot_is_no_owner_without_discovery_and_a_timeout_with_it():
    assert isinstance(follower(A26_721, owner=None, connected=False).snapshot_missing(1), NoOwner)
    missing = follower(connected=False).snapshot_missing(1)
    assert isinstance(missing, SnapshotTimeout) and "no state broadcast was seen at all" in missing.message
