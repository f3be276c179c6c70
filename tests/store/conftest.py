from __future__ import annotations

import pytest

from tests.jobkit import new_thread


@pytest.fixture
def thread() -> str:
    return new_thread()
