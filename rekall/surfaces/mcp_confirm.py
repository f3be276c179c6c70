"""Asking the user whose call it is, when neither Codex nor the thread's owner says.

An acting tool goes ahead only for the thread its call comes from (:mod:`rekall.kernel.caller`).
Codex 0.171.0 names that thread in each call's ``_meta``; a release that stops doing so (openai/codex
PR #31328) leaves it to the owner's view, and the shared app-server's view of a turn in progress
cannot name it either. Then, rather than refuse outright, the server asks the user through MCP
elicitation, which Codex shows in the thread:

- a form with one field to tick, never an empty form: Codex in full access accepts an empty form
  by itself (openai/codex PR #17164), so an empty one would let the agent's call confirm itself;
- the question names the thread by its title or first words (the owner's ``thread/read``) and its
  id, and says what will happen;
- accepted with the box ticked, the call goes ahead as that thread's. Anything else refuses it as
  before, saying why, with its next step: declined (Codex under approval policy ``never`` declines
  by itself), dismissed, accepted without the tick, a client that declared no form elicitation,
  or an error on the way.

Every acting tool goes through :func:`act_as_caller`, the one place this happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context

from rekall.kernel.caller import Caller, CallerUnknown
from rekall.usecases import service

T = TypeVar("T")

#: The one field of the form: the user ticks it to confirm.
CONFIRM_FIELD = "confirm"
FORM: dict[str, Any] = {
    "type": "object",
    "properties": {CONFIRM_FIELD: {"type": "boolean", "title": "Yes: this conversation, go ahead",
                                   "description": "Tick to let the call go ahead; decline and nothing is done."}},
    "required": [CONFIRM_FIELD],
}
#: How much of a title or first message the question quotes.
TITLE_CHARS = 80


async def act_as_caller(ctx: Context, thread_id: str, action: str, act: Callable[[Caller], Awaitable[T]]) -> T:
    """``act`` as the call's caller (its ``_meta``, else the owner's view); when neither names it, ask the
    user whether ``thread_id`` is the calling conversation and ``action`` (what will happen) is wanted."""
    try:
        return await act(Caller.from_meta(ctx.request_context.meta))
    except CallerUnknown as refusal:
        caller = await ask_user(ctx, thread_id, action, refusal)
    return await act(caller)


async def ask_user(ctx: Context, thread_id: str, action: str, refusal: CallerUnknown) -> Caller:
    """The thread the user confirms as the caller's; else ``refusal``, saying why."""
    session = ctx.request_context.session
    if not can_show_form(session.client_capabilities):
        raise _refused(refusal, "the MCP client declared no form elicitation, so rekall could not ask the user")
    question = ask_text(thread_id, await service.thread_title(thread_id), action)
    try:
        answer = await session.elicit_form(message=question, requested_schema=FORM, related_request_id=ctx.request_id)
    except Exception as exc:  # noqa: BLE001 - an error from the client or the wire: not a confirmation
        raise _refused(refusal, f"asking the user failed ({type(exc).__name__})") from None
    if answer.action == "accept" and (answer.content or {}).get(CONFIRM_FIELD) is True:
        return Caller.confirmed_by_user(thread_id)
    why = {"decline": "the user was asked to confirm the thread and declined (under approval policy never, "
                      "Codex declines by itself)",
           "cancel": "the user was asked to confirm the thread and dismissed the question"}
    raise _refused(refusal, why.get(answer.action, "the user was asked to confirm the thread and did not tick it"))


def can_show_form(capabilities: Any) -> bool:
    """The client declared form elicitation (an elicitation capability naming neither mode, as before
    2025-11-25, means form)."""
    elicitation = getattr(capabilities, "elicitation", None)
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def ask_text(thread_id: str, title: str | None, action: str) -> str:
    """The question: which conversation, what will happen, how to answer."""
    if title:
        words = " ".join(title.split())
        named = f"“{words[:TITLE_CHARS]}{'…' if len(words) > TITLE_CHARS else ''}” ({thread_id})"
    else:
        named = f"{thread_id} (its title could not be read)"
    return (f"rekall: an agent asks to {action} in the conversation {named}. Codex did not say which conversation "
            "the call comes from. If it is this one and you want that, tick the box and accept; otherwise "
            "decline, and nothing is done.")


def _refused(refusal: CallerUnknown, why: str) -> CallerUnknown:
    return CallerUnknown(f"{refusal.message}; {why}", hint=refusal.hint)
