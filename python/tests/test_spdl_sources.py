"""Source modes, as in SPDL: add_source(src, continuous=False) is one pass
over the source, read on by every new iterator; continuous=True is epoch
after epoch, one per iterator."""

import asyncio
import time

import numpy as np
import pytest

import spdl_go
from spdl_go import PipelineBuilder, ops, sources
from spdl_go.pipeline import build_pipeline
from spdl_go.pipeline.defs import Merge, Pipe, PipelineConfig, SinkConfig, SourceConfig


def _wait_for(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


class _OneShot:
    """A one-shot iterator that counts what was pulled from it."""

    def __init__(self, n):
        self.it = iter(range(n))
        self.pulled = 0

    def __iter__(self):
        return self

    def __next__(self):
        x = next(self.it)
        self.pulled += 1
        return x


# ---- continuous=False: one pass ---------------------------------------------------
@pytest.mark.parametrize("order", ["completion", "input"])
def test_one_shot_source_loses_nothing_pulled_or_prefetched(order, no_leaks):
    src = _OneShot(100)
    p = PipelineBuilder().add_source(src).pipe(lambda x: x * 2, concurrency=2, output_order=order).add_sink(4).build()
    with p:
        got = []
        for x in p:
            got.append(x)
            if len(got) == 5:
                break
        # The pipeline went on pulling and prefetching after the break.
        _wait_for(lambda: p.stats().sink_len == 4 and src.pulled > 9, "nothing was prefetched")
        assert p.stats().state == "running"  # leaving the loop did not stop it
        it = iter(p)
        got.append(next(it))
        del it  # an iterator dropped mid-way loses nothing either
        got.append(p.get_item(timeout=5))
        got += list(p)
        assert sorted(got) == [2 * x for x in range(100)]
        if order == "input":
            assert got == [2 * x for x in range(100)]
        assert src.pulled == 100


def test_after_the_pass_new_iterators_end_at_once(no_leaks):
    with PipelineBuilder().add_source([1, 2, 3]).add_sink(2).build() as p:
        assert list(p) == [1, 2, 3]
        assert list(p) == []
        assert list(p.get_iterator(timeout=1)) == []
        with pytest.raises(EOFError):
            p.get_item(timeout=1)
        assert p.stats().epoch == 1  # the list was not iterated again


def test_native_source_one_pass(no_leaks):
    with PipelineBuilder().add_source(sources.sampler(30, shuffle=True, seed=4)).add_sink(3).build() as p:
        first = []
        for x in p:
            first.append(x)
            if len(first) == 7:
                break
        rest = list(p)
        assert sorted(first + rest) == list(range(30))
        assert list(p) == []


def test_async_source_one_pass_across_iterators(no_leaks):
    async def gen():
        for i in range(20):
            await asyncio.sleep(0)
            yield i

    class Src:
        def __aiter__(self):
            return gen()

    with PipelineBuilder().add_source(Src()).add_sink(2).build() as p:
        it = iter(p)
        head = [next(it) for _ in range(3)]
        assert head + list(p) == list(range(20))
        assert list(p) == []


def test_explicit_stop_then_iterators_read_what_is_left(no_leaks):
    with PipelineBuilder().add_source(range(1000)).add_sink(4).build() as p:
        p.start()
        _wait_for(lambda: p.stats().sink_len == 4, "the sink did not fill")
        p.stop()
        assert list(p) == [0, 1, 2, 3]
        assert list(p) == []


# ---- continuous=True: epoch after epoch -----------------------------------------
@pytest.mark.parametrize("order", ["completion", "input"])
def test_continuous_each_iterator_is_one_epoch(order, no_leaks):
    with (
        PipelineBuilder()
        .add_source(range(10), continuous=True)
        .pipe(lambda x: x + 1, concurrency=3, output_order=order)
        .aggregate(4)
        .add_sink(2)
        .build()
    ) as p:
        for _ in range(3):
            batches = list(p.get_iterator(timeout=5))
            assert [len(b) for b in batches] == [4, 4, 2]
            assert sorted(x for b in batches for x in b) == list(range(1, 11))
        assert p.stats().epoch == 3


def test_continuous_abandoned_iterator_leaves_the_rest_to_the_next(no_leaks):
    with PipelineBuilder().add_source(range(50), continuous=True).add_sink(3).build() as p:
        it = iter(p)
        head = [next(it) for _ in range(7)]
        it.close()
        _wait_for(lambda: p.stats().sink_len == 3, "the epoch did not go on")
        assert p.stats().state == "running"
        assert head + list(p) == list(range(50))  # the rest of that epoch
        assert list(p) == list(range(50))  # then the next epoch
        assert p.stats().epoch == 2


def test_continuous_get_item_goes_on_into_the_next_epoch(no_leaks):
    with PipelineBuilder().add_source(range(3), continuous=True).add_sink(2).build() as p:
        assert [p.get_item(timeout=5) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(EOFError):
            p.get_item(timeout=5)  # the epoch boundary
        assert [p.get_item(timeout=5) for _ in range(3)] == [0, 1, 2]
        p.stop()
        with pytest.raises(EOFError):
            p.get_item(timeout=5)  # stopped: no next epoch by itself


def test_continuous_one_shot_source_ends_with_empty_epochs(no_leaks):
    src = _OneShot(5)
    with PipelineBuilder().add_source(src, continuous=True).add_sink(2).build() as p:
        assert list(p) == [0, 1, 2, 3, 4]
        assert list(p) == []  # iter() of an exhausted iterator: nothing


def test_continuous_native_source_reshuffles_each_epoch(no_leaks):
    def build():
        return PipelineBuilder().add_source(sources.sampler(100, shuffle=True, seed=9), continuous=True).add_sink(4)

    with build().build() as p:
        e0, e1, e2 = list(p), list(p), list(p)
    assert sorted(e0) == sorted(e1) == sorted(e2) == list(range(100))
    assert e0 != e1 and e1 != e2
    with build().pipe(ops.identity(), concurrency=2, output_order="input").build() as q:
        it = iter(q)
        head = [next(it) for _ in range(10)]
        del it
        assert head + list(q) == e0  # the abandoned epoch keeps its order
        assert list(q) == e1


def test_resumable_source_track_reads_on_in_an_abandoned_epoch(no_leaks):
    src = spdl_go.ResumableSource(sources.sampler(40, shuffle=True, seed=2))
    with PipelineBuilder().add_source(src.source, continuous=True).aggregate(4).add_sink(2).build() as p:

        def ids(batch):
            return list(batch)  # the sampler of n hands out the indices

        seen = []
        for k, b in enumerate(src.track(p, index=ids)):
            seen += ids(b)
            if k == 2:
                break
        assert src.local_state()["rank_state"] is not None
        rest = [i for b in src.track(p, index=ids) for i in ids(b)]
        assert sorted(seen + rest) == list(range(40))
        state = src.state_dict()
        assert state["progress"]["epoch"] == 1  # the epoch finished: next is epoch 1
        nxt = [i for b in src.track(p, index=ids) for i in ids(b)]
        assert sorted(nxt) == list(range(40)) and nxt != seen + rest


def test_dataloader_break_then_the_rest_of_the_epoch(no_leaks):
    pytest.importorskip("torch")

    class Data:
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return np.full((2,), i, np.float32)

    with spdl_go.DataLoader(Data(), batch_size=4, shuffle=True, seed=5, num_threads=2) as loader:
        first = []
        for x in loader:
            first += x[:, 0].long().tolist()
            break
        rest = [i for x in loader for i in x[:, 0].long().tolist()]
        assert sorted(first + rest) == list(range(12))
        again = [i for x in loader for i in x[:, 0].long().tolist()]
        assert sorted(again) == list(range(12)) and again != first + rest


# ---- the config ----------------------------------------------------------------
def test_source_config_carries_continuous():
    assert SourceConfig(range(3)).continuous is False
    assert PipelineBuilder().add_source(range(3), continuous=True).add_sink(1).get_config().src.continuous is True
    with pytest.raises(TypeError, match="continuous must be a bool"):
        SourceConfig(range(3), continuous=1)
    for flag in (False, True):
        cfg = PipelineConfig(SourceConfig(sources.arange(5), continuous=flag), [Pipe(ops.identity())], SinkConfig(2))
        back = PipelineConfig.from_json(cfg.to_json())
        assert back.src.continuous is flag
        assert back.to_json() == cfg.to_json()
    with pytest.raises(ValueError, match="src.continuous must be a JSON boolean"):
        PipelineConfig.from_json(
            '{"format": "spdl_go.pipeline/1", "src": {"kind": "arange", "options": {}, "continuous": 1},'
            ' "pipes": [], "sink": {"buffer_size": 1}}'
        )


def test_merge_is_continuous_when_a_merged_source_is(no_leaks):
    a = PipelineConfig(SourceConfig(range(3), continuous=True), [], SinkConfig(1))
    b = PipelineConfig(SourceConfig(range(10, 12)), [], SinkConfig(1))
    with build_pipeline(PipelineConfig(Merge([a, b]), [], SinkConfig(2)), num_threads=1) as p:
        assert sorted(p) == [0, 1, 2, 10, 11]
        assert sorted(p) == [0, 1, 2, 10, 11]
    with build_pipeline(PipelineConfig(Merge([b]), [], SinkConfig(2)), num_threads=1) as p:
        assert sorted(p) == [10, 11]
        assert list(p) == []
