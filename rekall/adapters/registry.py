"""The platforms a Codex thread can live in: one entry each.

Each entry is a platform's package. The package says, at its top level and without loading its
protocol (the worker's first follow goes out before the event loop is imported):

* ``NAME``: what the journal records (``extension-ipc``);
* optionally ``OWNER``: how a message for people names the owner of a thread there (``the extension``);
* ``open_platform(env, resume)``: the :class:`rekall.adapters.contract.Platform`, resuming from a
  :class:`rekall.adapters.resume.ResumeToken` when it has one;
* optionally ``follow_first(thread_id, env, resume, request_timeout_s=...)``: the worker's first
  follow, made before the event loop, which ``open_platform`` then goes on from.

Owner finding asks every platform listed here, in this order (:mod:`rekall.adapters.owners`); ``doctor``
shows their rows in this order.
"""

from __future__ import annotations

from types import ModuleType

from rekall.adapters import app_server, extension

#: The platforms, in the order owner finding lists their answers and ``doctor`` shows their rows.
PLATFORMS: list[ModuleType] = [extension, app_server]

#: The platform of a job that names none: jobs scheduled before platforms were recorded are the
#: extension's, the only one there was then.
UNNAMED: str = extension.NAME


def packages() -> list[ModuleType]:
    return list(PLATFORMS)


def owner_words(name: str | None) -> str:
    """The owner of a job's thread, in the words of the platform ``name`` the job recorded."""
    return getattr(package_named(name), "OWNER", None) or "the thread's owner"


def package_named(name: str | None) -> ModuleType | None:
    """The package of the platform called ``name`` (``None``: :data:`UNNAMED`); ``None`` if unknown."""
    wanted = UNNAMED if name is None else name
    return next((p for p in PLATFORMS if p.NAME == wanted), None)
