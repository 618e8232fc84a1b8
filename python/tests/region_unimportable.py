"""A module that loads in the test process but not in a worker process."""

import multiprocessing

if multiprocessing.parent_process() is not None:
    raise ImportError("region_unimportable: only the test process may import this")


def op(x: int) -> int:
    return x
