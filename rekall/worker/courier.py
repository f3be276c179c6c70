"""Carries the job's verified handoff to the thread by the delivery's route, once.

The delivery machine (:mod:`rekall.states.delivery`) chooses the route and the policy says when
(:mod:`rekall.worker.delivering`); the courier does the route's part of the work: it validates the
saved handoff ahead while the compaction runs, verifies it again just before sending, makes the
route's text (a continuation turn's prompt, or the injected context), and wins the job's delivery
claim (:mod:`rekall.store.delivery`) before anything leaves. The worker then sends what it is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from rekall.kernel.errors import RekallError
from rekall.kernel.records import Acted, Failure
from rekall.kernel.settings import INJECT_HANDOFF, WorkerSettings
from rekall.kernel.jobstate import CONTINUATION
from rekall.states.status import known
from rekall.worker.decisions import DeliveryTaken, Event, RequestDone

if TYPE_CHECKING:
    from rekall.adapters.contract import FollowedThread, Platform
    from rekall.store.jobstore import JobStore
    from rekall.store.handoff import Verified


def injection_limit(settings: WorkerSettings, platform: Platform) -> str | None:
    """Why the handoff cannot be injected where no continuation carries it (``None``: it can)."""
    if not settings.inject_handoff:
        return f"injection is turned off ({INJECT_HANDOFF.name}=off)"
    return platform.injection_limit


@attrs.frozen
class Outgoing:
    """A delivery ready to leave: the request, and the size of the text it carries (UTF-8 bytes)."""

    request: Callable[[], Awaitable[Acted]]
    sent_bytes: int


class Courier:
    """One job's handoff, on its way to the thread. The lifecycle says the route and the sealed hash."""

    def __init__(self, store: JobStore, lifecycle: Any, thread_id: str, job_id: str) -> None:
        self._store, self._lifecycle = store, lifecycle
        self.thread_id, self.job_id = thread_id, job_id
        self._handoff: Verified | None = None  # verified just before the delivery is sent
        #: The handoff validated while the compaction ran, and the continuation text made of it.
        self._validated: tuple[Verified, str] | None = None
        self._validated_tried = False

    def _sealed_sha256(self) -> str | None:
        """The handoff's SHA-256 as the journal sealed it at schedule."""
        return known(self._lifecycle.job_status.handoffSha256)

    def validate_ahead(self) -> None:
        """Validate the saved handoff once, after the compact request has left, while the
        compaction runs (the check loads the secret detector, whose import compiles a few dozen
        patterns). The check before sending then reads the file again and only compares it, byte
        for byte, with the bytes validated here (which hashed to the SHA-256 journaled at
        schedule); other bytes get the full check there, so a handoff that changed or failed here
        fails as it always did."""
        if self._validated_tried:
            return
        self._validated_tried = True
        expected = self._sealed_sha256()
        if not expected:
            return  # no handoff: the delivery, if it comes to one, fails without reading anything
        try:
            verified = self._store.verify_sealed_handoff(self.thread_id, self.job_id, expected)
        except RekallError:
            return  # said before sending, by the same check, with the same error
        self._validated = (verified, self._continuation(verified))

    def verify(self) -> str | None:
        """Check the saved handoff against its sealed hash just before it is sent: ``None`` when it
        passes, else what is wrong."""
        try:
            self._handoff = self._store.verify_sealed_handoff(
                self.thread_id, self.job_id, self._sealed_sha256(),
                None if self._validated is None else self._validated[0])
        except RekallError as exc:
            return exc.message
        return None

    def prepare(self, thread: FollowedThread) -> Outgoing | Event:
        """The handoff verified just before, as the route's request, once the job's delivery claim is won;
        or the event that says why nothing leaves."""
        handoff, route = self._handoff, self._lifecycle.view.route
        assert handoff is not None  # verified in this step (``VerifyHandoff``)
        if route == CONTINUATION:
            ahead = self._validated
            text = ahead[1] if ahead is not None and ahead[0] is handoff else self._continuation(handoff)
            request: Callable[[], Awaitable[Acted]] = lambda: thread.start_turn(text, self.job_id)  # noqa: E731
        else:
            text = self._injection(handoff)
            request = lambda: thread.inject(text)  # noqa: E731
        lost = self._lost_delivery(route)
        return Outgoing(request, len(text.encode())) if lost is None else lost

    def _injection(self, verified: Verified) -> str:
        from rekall.worker.continuation import injection_text

        status = self._lifecycle.job_status
        return injection_text(verified.record, str(verified.path), resume=bool(known(status.resume)),
                              skipped=known(status.resumeSkipped), skip_reason=known(status.resumeSkipReason))

    def _continuation(self, verified: Verified) -> str:
        from rekall.worker.continuation import continuation_text

        return continuation_text(verified.record, str(verified.path))

    def _lost_delivery(self, route: str) -> Event | None:
        """Win the job's delivery claim for ``route`` before sending the handoff, or say that another route
        (the plugin's hook, an explicit cancel) holds it, or that the claim failed (a request not sent)."""
        from rekall.store.delivery import DeliveryKey, take

        try:
            taken = take(self._store.paths.root, DeliveryKey(self.thread_id, job=self.job_id), route,
                         handoffSha256=self._sealed_sha256())
        except OSError as exc:  # without the claim, exactly once cannot be promised: nothing is sent
            return RequestDone("deliver", Acted(Failure(
                "handoff_claim_failed", f"not sent: the job's delivery claim could not be created "
                                        f"({exc.strerror or exc})", "not_delivered")))
        return None if taken.won else DeliveryTaken(taken.holder, taken.claim, taken.why)
