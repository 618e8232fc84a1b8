import gc

import pytest

import spdl_go
from spdl_go import _codec


@pytest.fixture
def no_leaks():
    """Checks that a test returns all engine memory and registry entries."""
    gc.collect()
    before = spdl_go.memory_stats()
    yield
    gc.collect()
    after = spdl_go.memory_stats()
    assert after["live_tensors"] == before["live_tensors"], (before, after)
    assert after["live_bytes"] == before["live_bytes"], (before, after)
    assert spdl_go.arrow_allocated_bytes() == 0
    assert _codec.live_objects() == 0
