from __future__ import annotations

from pathlib import Path

import pytest

from rekall.store import JobStore
from rekall.testing import FakeClock

from tests.jobkit import new_thread, open_store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    return tmp_path / "jobs"


@pytest.fixture
def store(jobs_dir: Path, clock: FakeClock) -> JobStore:
    return open_store(jobs_dir, clock)


@pytest.fixture
def thread() -> str:
    return new_thread()
