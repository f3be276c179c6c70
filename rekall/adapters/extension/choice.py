"""Which generation to speak, on stated grounds, never guessed. The grounds, in this order:

(a) the installed extension's own table (:mod:`rekall.adapters.extension.bundles`): one known
    generation matches every table read → that one. A table that matches none is refused,
    with the differences named. Installs whose tables match different generations: those
    are the candidates, and (b) must settle it.
(b) how the owner answers owner discovery (:class:`~rekall.adapters.extension.session.ThreadSession`
    decides among the candidates on connect). The answer is remembered per router and
    thread in this process, and ``schedule`` keeps it in the job for the worker
    (:class:`Settled`), so the delay of a ``no-client-found`` is paid once per owner.
(c) ``REKALL_GENERATION``, when no installed table was read (test endpoints, or an
    extension rekall cannot find). It never overrides a table that was read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from rekall.adapters.extension import generations as gen
from rekall.adapters.extension import ipc
from rekall.adapters.extension.bundles import Install, find_installs
from rekall.adapters.extension.ipc import IpcAdapter, behind_text
from rekall.adapters.extension.errors import VersionMismatch
from rekall.kernel.errors import InvalidInput
from rekall.kernel.environment import env_value

GENERATION_VAR = gen.GENERATION_VAR


class Choice(NamedTuple):
    """The generation to speak, or the candidates for the owner's answer, or a refusal."""

    adapter: IpcAdapter | None
    candidates: tuple[IpcAdapter, ...]
    reason: str
    installs: tuple[Install, ...] = ()
    #: Set when rekall must not speak at all: the text says which side is behind.
    refusal: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"generation": self.adapter.NAME if self.adapter is not None else None,
                "candidates": [a.NAME for a in self.candidates], "reason": self.reason, "refusal": self.refusal,
                "installs": [i.to_json() for i in self.installs]}


def pinned(env: Mapping[str, str]) -> IpcAdapter | None:
    name = env_value(env, GENERATION_VAR)
    if name is None:
        return None
    adapter = ipc.adapter_named(name)
    if adapter is None:
        raise InvalidInput(f"{GENERATION_VAR}={name!r} names no known generation", field=GENERATION_VAR,
                           hint=f"use one of {gen.listed(g.name for g in gen.GENERATIONS)}, or unset it "
                                "(`rekall protocol` lists them)")
    return adapter


def refusal_for(install: Install) -> str | None:
    """Why a table of ``install`` cannot be spoken, saying which side is behind; ``None`` if all can."""
    for table in install.tables:
        if not gen.matching(table):
            shown = ", ".join(f"{m} {table[m]}" for m in gen.COMPARED_METHODS if m in table)
            return f"{_refusal(install, table)} (table read from {install.path}: {shown})"
    return None


def _refusal(install: Install, table: Mapping[str, int]) -> str:
    subject = f"the installed extension ({install.version}) expects"
    for method in gen.COMPARED_METHODS:
        known = {g.base(method) for g in gen.GENERATIONS}
        if method in table and table[method] not in known:
            return behind_text(subject, method, table[method])
    differences = "; ".join(f"{g.name}: {', '.join(gen.differences(table, g))}" for g in gen.GENERATIONS)
    return (f"the installed extension's table ({install.version}, {install.path}) matches no generation rekall "
            f"knows ({differences}): report the extension version")


def choose(env: Mapping[str, str], *, write_cache: bool) -> Choice:
    """Grounds (a) and (c); (b) happens on connect when ``adapter`` is ``None``."""
    installs = tuple(find_installs(env, write_cache=write_cache))
    pin = pinned(env)
    read = [i for i in installs if i.tables]
    for install in read:
        if (refusal := refusal_for(install)) is not None:
            return Choice(None, (), f"the table of {install.what} {install.version} ({install.path})", installs,
                          refusal)
    found = {g.name: g for i in read for t in i.tables for g in gen.matching(t)}
    described = ", ".join(f"{i.what} {i.version} ({_names([g for t in i.tables for g in gen.matching(t)])})"
                          for i in read)
    if len(found) == 1:
        adapter = _adapter(next(iter(found)))
        if pin is not None and pin.NAME != adapter.NAME:
            return Choice(None, (), "installed table", installs,
                          f"{GENERATION_VAR}={pin.NAME} disagrees with the installed extension's table "
                          f"({described}): unset {GENERATION_VAR}, or install the extension you meant")
        return Choice(adapter, (), f"the installed extension's table matches it: {described}", installs)
    if found:
        candidates = tuple(_adapter(name) for name in found)
        return Choice(None, candidates, f"installed tables disagree ({described}); the owner's answer to "
                                        "owner discovery decides", installs)
    if pin is not None:
        return Choice(pin, (), f"pinned by {GENERATION_VAR} (no installed extension table was read)", installs)
    return Choice(None, ipc.ADAPTERS, "no installed extension table was read; the owner's answer to owner "
                                      "discovery decides", installs)


def _adapter(name: str) -> IpcAdapter:
    adapter = ipc.adapter_named(name)
    assert adapter is not None  # every generation has an adapter
    return adapter


def _names(generations: Sequence[gen.Generation]) -> str:
    return gen.listed(g.name for g in generations) if generations else "no known generation"


class Settled(NamedTuple):
    """A generation the owner's answer settled (b), with its grounds: which owner answered,
    on which router. ``schedule`` keeps it in the job, so that the worker, a separate process,
    does not pay a ``no-client-found`` delay again for the same owner."""

    generation: str
    #: The client id that answered (the owner when the generation was settled).
    owner: str
    #: The router's endpoint path and its socket's identity (device:inode; ``None`` for a pipe).
    router: str
    socket: str | None
    #: Why this generation (the reason text shown as "generation because").
    how: str

    def to_json(self) -> dict[str, Any]:
        return {"generation": self.generation, "ownerId": self.owner, "router": self.router, "socket": self.socket,
                "how": self.how}

    @classmethod
    def from_json(cls, data: Any) -> Settled | None:
        """The record as a job keeps it; ``None`` unless every field has its type (then the
        generation is settled again on its grounds: never guessed from half a record)."""
        if not isinstance(data, Mapping):
            return None
        generation, owner, router, socket, how = (data.get(k) for k in ("generation", "ownerId", "router", "socket",
                                                                         "how"))
        if not (isinstance(generation, str) and generation and isinstance(owner, str) and owner
                and isinstance(router, str) and router and isinstance(how, str)
                and (socket is None or isinstance(socket, str))):
            return None
        return cls(generation, owner, router, socket, how)

    def reusable(self, router: str, candidates: Sequence[IpcAdapter]) -> IpcAdapter | None:
        """The settled generation, if it may be spoken on ``router`` without asking again: the
        same router (path and socket) and a generation without owner discovery (with discovery,
        the owner's answer costs nothing, so it is asked again). The caller still checks that
        the same owner answers the follow."""
        if router != self.router or socket_identity(router) != self.socket:
            return None
        return next((a for a in candidates if a.NAME == self.generation and not a.owner_discovery), None)


class Decision(NamedTuple):
    """What one connect speaks: the generation, or the candidates for the owner's answer."""

    chosen: Choice
    adapter: IpcAdapter | None
    candidates: tuple[IpcAdapter, ...]
    reason: str
    #: A generation settled earlier (by ``schedule``, or by this process) and reused here.
    earlier: Settled | None
    #: "found anew", "reused from schedule" or "reused in this process".
    source: str


def decide(env: Mapping[str, str], thread_id: str, *, router: str | None, write_cache: bool,
           at_schedule: Settled | None, reuse: bool = True) -> Decision:
    """Grounds (a) and (c), then a generation settled earlier for ``router`` and this thread,
    by ``schedule`` (``at_schedule``) or this process, when it may be reused. Raises
    :class:`VersionMismatch` when the grounds say not to speak at all."""
    chosen = choose(env, write_cache=write_cache)
    if chosen.refusal is not None:
        raise VersionMismatch(chosen.refusal, hint="rekall sends nothing the evidence does not support; "
                                                   "`rekall protocol` shows the table and the differences")
    if chosen.adapter is None and reuse and router is not None:
        for settled, source in ((at_schedule, "reused from schedule"), (remembered(router, thread_id),
                                                                          "reused in this process")):
            if settled is not None and (adapter := settled.reusable(router, chosen.candidates)) is not None:
                return Decision(chosen, adapter, chosen.candidates, settled.how, settled, source)
    return Decision(chosen, chosen.adapter, chosen.candidates, chosen.reason, None, "found anew")


def socket_identity(path: str) -> str | None:
    """device:inode of the router's socket: a restarted router makes a new one at the same path."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"{st.st_dev}:{st.st_ino}" if stat.S_ISSOCK(st.st_mode) else None


#: (b) remembered in this process: (endpoint path, thread id) → what settled it.
_ANSWERS: dict[tuple[str, str], Settled] = {}


def remembered(endpoint: str, thread_id: str) -> Settled | None:
    return _ANSWERS.get((endpoint, thread_id))


def remember(thread_id: str, settled: Settled) -> None:
    _ANSWERS[(settled.router, thread_id)] = settled


def forget(endpoint: str, thread_id: str) -> None:
    _ANSWERS.pop((endpoint, thread_id), None)
