import gc

import pytest

import spdl_go
from spdl_go import _codec


@pytest.fixture
def no_leaks():
    """Checks that a test returns all engine memory and registry entries."""
    gc.collect()
    before = spdl_go.memory_stats()
    # Counted from here: a pipeline an earlier test closed in the background
    # may still hand back its objects while this one runs.
    objects, arrow = _codec.live_objects(), spdl_go.arrow_allocated_bytes()
    yield
    gc.collect()
    after = spdl_go.memory_stats()
    # At most as many as before: a leak adds; a pipeline an earlier test
    # closed in the background may still be handing tensors back.
    assert after["live_tensors"] <= before["live_tensors"], (before, after)
    assert after["live_bytes"] <= before["live_bytes"], (before, after)
    assert spdl_go.arrow_allocated_bytes() <= arrow
    assert _codec.live_objects() <= objects
