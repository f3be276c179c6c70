"""A toy platform: what a third place threads live in needs, and nothing else.

It is one folder, and one line in :data:`rekall.adapters.registry.PLATFORMS` (the test adds it):
``NAME`` and ``open_platform`` here, the platform in :mod:`tests.support.toy_platform.platform`.
Its threads are held by a fake owner the test creates (:class:`~tests.support.toy_platform.platform.ToyOwner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rekall.adapters.contract import Platform
    from rekall.adapters.resume import ResumeToken

NAME = "toy"


def open_platform(env: Mapping[str, str], resume: ResumeToken | None) -> Platform:
    from tests.support.toy_platform.platform import ToyPlatform

    return ToyPlatform(resume)
