"""Declarative pipelines as SPDL writes them: ``spdl_go.pipeline.defs``
configs built with ``build_pipeline``, ``PipelineBuilder.get_config``, and
the JSON form of a config made only of native ops and a native source."""

import functools
import inspect
import json
import re
from fractions import Fraction

import pytest

import spdl_go
import spdl_go.builder
from spdl_go import ops, sources
from spdl_go.pipeline import Pipeline, PipelineBuilder, PipelineFailure, build_pipeline
from spdl_go.pipeline.defs import (
    Aggregate,
    AggregateConfig,
    Disaggregate,
    DisaggregateConfig,
    Merge,
    PathVariants,
    Pipe,
    PipeConfig,
    PipelineConfig,
    SinkConfig,
    SourceConfig,
)


def square(x):
    return x * x


def add(x, n):
    return x + n


def test_one_set_of_names():
    # The builder's configs are the defs' configs; the old homes still work.
    for name in ["SourceConfig", "PipeConfig", "AggregateConfig", "DisaggregateConfig", "SinkConfig", "PipelineConfig"]:
        assert getattr(spdl_go.builder, name) is getattr(spdl_go.pipeline.defs, name)
    assert spdl_go.PipelineBuilder is PipelineBuilder is spdl_go.builder.PipelineBuilder
    assert spdl_go.Pipeline is Pipeline and spdl_go.PipelineFailure is PipelineFailure
    assert spdl_go.pipeline.PipelineError is PipelineFailure
    from spdl_go.pipeline import Bottleneck, PipelineStats, StageStats

    assert (Bottleneck, PipelineStats, StageStats) == (spdl_go.Bottleneck, spdl_go.PipelineStats, spdl_go.StageStats)


def test_signatures_are_spdls():
    def params(fn):
        return {
            n: (p.kind.name, p.default if p.default is not inspect.Parameter.empty else "required")
            for n, p in inspect.signature(fn).parameters.items()
        }

    pipe = params(Pipe)
    assert pipe["op"] == ("POSITIONAL_ONLY", "required")
    for name, default in [
        ("concurrency", 1),
        ("executor", None),
        ("name", None),
        ("output_order", "completion"),
        ("max_failures", None),
        ("max_concurrency", None),  # spdl-go's own
        ("timeout", None),  # spdl-go's own
    ]:
        assert pipe[name] == ("KEYWORD_ONLY", default), name
    assert params(Aggregate) == {"num_items": ("POSITIONAL_ONLY", "required"), "drop_last": ("KEYWORD_ONLY", False)}
    assert params(Disaggregate) == {}
    build = params(build_pipeline)
    assert build["pipeline_cfg"] == ("POSITIONAL_ONLY", "required")
    assert build["max_failures"] == ("KEYWORD_ONLY", -1)
    assert build["report_stats_interval"] == ("KEYWORD_ONLY", -1)
    assert build["num_threads"][0] == "KEYWORD_ONLY"
    assert [f for f in PipelineConfig.__dataclass_fields__] == ["src", "pipes", "sink"]


def _builder_python():
    return (
        PipelineBuilder()
        .add_source(range(20))
        .pipe(square, concurrency=3, output_order="input")
        .aggregate(4)
        .pipe(sum)
        .aggregate(2, drop_last=True)
        .disaggregate()
        .add_sink(3)
    )


def test_defs_build_what_the_builder_builds():
    config = PipelineConfig(
        src=SourceConfig(range(20)),
        pipes=[
            Pipe(square, concurrency=3, output_order="input"),
            Aggregate(4),
            Pipe(sum),
            Aggregate(2, drop_last=True),
            Disaggregate(),
        ],
        sink=SinkConfig(buffer_size=3),
    )
    want = [sum(x * x for x in range(i, i + 4)) for i in range(0, 16, 4)]
    assert list(build_pipeline(config, num_threads=2)) == want
    assert list(_builder_python().build(num_threads=2)) == want


def test_get_config_is_the_same_config():
    cfg = _builder_python().get_config()
    assert isinstance(cfg, PipelineConfig)
    assert [type(p) for p in cfg.pipes] == [
        PipeConfig,
        AggregateConfig,
        PipeConfig,
        AggregateConfig,
        DisaggregateConfig,
    ]
    assert cfg.pipes[0].op is square and cfg.pipes[0].concurrency == 3 and cfg.pipes[0].output_order == "input"
    assert cfg.pipes[0] == Pipe(square, concurrency=3, output_order="input")
    assert cfg.pipes[3] == Aggregate(2, drop_last=True)
    assert cfg.sink == SinkConfig(3)
    # get_config can be built more than once, and by build_pipeline.
    assert list(build_pipeline(cfg, num_threads=1)) == list(build_pipeline(cfg, num_threads=4))


def test_get_config_needs_source_and_sink():
    with pytest.raises(RuntimeError, match="Source is not set. Did you call `add_source`"):
        PipelineBuilder().add_sink(2).get_config()
    with pytest.raises(RuntimeError, match="Sink is not set. Did you call `add_sink`"):
        PipelineBuilder().add_source([1]).get_config()


def test_build_pipeline_settings_and_stats():
    config = PipelineConfig(SourceConfig([1, 2, 3]), [Pipe(square, name="sq")], SinkConfig(1))
    p = build_pipeline(config, num_threads=1, max_failures=0, queue_size=2, cpu_budget=2, report_stats_interval=-1)
    with p.auto_stop():
        assert list(p) == [1, 4, 9]
        assert p.stats().stages[0].name == "sq"


def test_pipe_names_and_containers():
    assert Pipe(square).name == "square"
    assert Pipe(functools.partial(add, n=1)).name == "add"  # the function a partial wraps, as SPDL
    assert Pipe(ops.identity()).name == "identity"
    assert Pipe({1: "a"}).name == "__getitem__"
    assert Pipe(square, name="mine").name == "mine"
    cfg = PipelineConfig(SourceConfig([2, 1]), (Pipe({1: "a", 2: "b"}), Pipe(str.upper)), SinkConfig(2))
    assert list(build_pipeline(cfg, num_threads=1)) == ["B", "A"]


def test_pipe_max_failures_overrides_builds():
    def fail_odd(x):
        if x % 2:
            raise ValueError(x)
        return x

    cfg = PipelineConfig(SourceConfig(range(6)), [Pipe(fail_odd, max_failures=-1)], SinkConfig(2))
    with build_pipeline(cfg, num_threads=1, max_failures=0).auto_stop() as p:
        assert sorted(p) == [0, 2, 4]


@pytest.mark.parametrize(
    "make,error,message",
    [
        (lambda: Pipe(square, concurrency=0), ValueError, "pipe: concurrency must be an int >= 1 or 'auto', got 0"),
        (lambda: Pipe(square, output_order="random"), ValueError, "output_order"),
        (lambda: Pipe(square, max_failures=0.5), ValueError, "max_failures"),
        (lambda: Pipe(square, timeout=0), ValueError, "timeout"),
        (lambda: Pipe(3), TypeError, "op must be callable"),
        (lambda: Pipe(lambda: 1), TypeError, "one positional argument"),
        (lambda: Pipe(ops.identity(), executor=object()), ValueError, "executor"),
        (lambda: Pipe(square, 2), TypeError, "positional"),
        (lambda: Aggregate(0), ValueError, "aggregate: num_items must be an int >= 1, got 0"),
        (lambda: Aggregate(2, True), TypeError, "positional"),
        (lambda: SinkConfig(0), ValueError, "buffer_size"),
        (lambda: SourceConfig(5), TypeError, "iterable"),
        (
            lambda: PipelineConfig(range(3), [], SinkConfig(1)),
            TypeError,
            "src must be a SourceConfig or a MergeConfig, got range",
        ),
        (
            lambda: PipelineConfig(SourceConfig([1]), [Pipe(square), square], SinkConfig(1)),
            TypeError,
            r"pipes\[1\] must be a PipeConfig",
        ),
        (lambda: PipelineConfig(SourceConfig([1]), [], 3), TypeError, "sink must be a SinkConfig, got int"),
        (lambda: build_pipeline(SourceConfig([1])), TypeError, "expected a PipelineConfig, got SourceConfig"),
        (
            lambda: build_pipeline(PipelineConfig(SourceConfig([1]), [], SinkConfig(1)), num_threads=0),
            ValueError,
            "num_threads",
        ),
        (
            lambda: build_pipeline(PipelineConfig(SourceConfig([1]), [], SinkConfig(1)), max_failures="all"),
            ValueError,
            "max_failures",
        ),
        (
            lambda: build_pipeline(
                PipelineConfig(SourceConfig([1]), [], SinkConfig(1)), report_stats_interval=1, report_interval=2
            ),
            TypeError,
            "not both",
        ),
    ],
)
def test_bad_arguments_name_themselves(make, error, message):
    with pytest.raises(error, match=message):
        make()


# ---- JSON ---------------------------------------------------------------------
def _native_config():
    return PipelineConfig(
        src=SourceConfig(sources.arange(10)),
        pipes=[
            Pipe(ops.identity(), concurrency=2, output_order="input", max_failures=Fraction(1, 10), timeout=5.0),
            Aggregate(3),
            Disaggregate(),
            Pipe(
                ops.identity(),
                concurrency="auto",
                max_concurrency=2,
                name="again",
                max_failures=3,
                output_order="input",
            ),
            Aggregate(4, drop_last=True),
        ],
        sink=SinkConfig(2),
    )


def test_json_round_trip():
    config = _native_config()
    text = config.to_json()
    back = PipelineConfig.from_json(text)
    assert back == config
    assert back.to_json() == text
    assert PipelineConfig.from_json(text.encode()) == config
    assert back.pipes[0].max_failures == Fraction(1, 10)
    assert json.loads(config.to_json(indent=2)) == json.loads(text)
    want = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert list(build_pipeline(config, num_threads=2)) == want
    assert list(build_pipeline(back, num_threads=2)) == want


def test_json_round_trip_keeps_a_resumable_source():
    src = sources.sampler(8, shuffle=True, seed=3)
    config = PipelineConfig(SourceConfig(src), [Pipe(ops.identity())], SinkConfig(3))
    back = PipelineConfig.from_json(config.to_json())
    assert back.src.source == src and back.src.source.resumes == src.resumes
    assert sorted(build_pipeline(back, num_threads=1)) == sorted(build_pipeline(config, num_threads=1))


def test_json_refuses_python_code_naming_it():
    native = _native_config()
    with pytest.raises(TypeError, match=r"stage 1 \('square'\) runs a Python callable"):
        PipelineConfig(native.src, [Aggregate(2), Pipe(square)], native.sink).to_json()
    with pytest.raises(TypeError, match=r"the source is Python code \(range\)"):
        PipelineConfig(SourceConfig(range(3)), [Pipe(ops.identity())], native.sink).to_json()
    with pytest.raises(TypeError, match=r"stage 0 \('sq'\)"):
        PipelineBuilder().add_source(sources.arange(3)).pipe(square, name="sq").add_sink(1).get_config().to_json()


def test_json_round_trip_keeps_regions():
    from spdl_go.pipeline.defs import MAIN_PROCESS, PlacementConfig, ProcessPoolExecutorConfig

    config = (
        PipelineBuilder()
        .add_source(sources.arange(8))
        .to(ProcessPoolExecutorConfig(max_workers=2, mp_context="forkserver"), buffer_size=4)
        .pipe(ops.identity())
        .to(MAIN_PROCESS, buffer_size=2)
        .add_sink(2)
        .get_config()
    )
    back = PipelineConfig.from_json(config.to_json())
    assert back == config and isinstance(back.pipes[0], PlacementConfig)
    with pytest.raises(TypeError, match="has an initializer"):
        PipelineConfig(
            config.src,
            [PlacementConfig(ProcessPoolExecutorConfig(initializer=print)), *config.pipes[1:]],
            config.sink,
        ).to_json()
    with pytest.raises(ValueError, match=r"pipes\[0\].target must be 'process_pool'"):
        PipelineConfig.from_json(config.to_json().replace('"process_pool"', '"cluster"'))


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"format": "other"}', "format must be 'spdl_go.pipeline/1'"),
        ('{"format": "spdl_go.pipeline/1", "src": 1}', "src must be a JSON object"),
        (
            '{"format": "spdl_go.pipeline/1", "src": {"kind": "range", "options": {}}, "pipes": [{"type": "x"}]}',
            r"pipes\[0\].type must be 'pipe', 'aggregate', 'disaggregate' or 'to', got 'x'",
        ),
        (
            '{"format": "spdl_go.pipeline/1", "src": {"kind": "range", "options": {}},'
            ' "pipes": [{"type": "aggregate", "num_items": 0}], "sink": {}}',
            "num_items must be an int >= 1, got 0",
        ),
        (
            '{"format": "spdl_go.pipeline/1", "src": {"kind": "range", "options": {}},'
            ' "pipes": [{"type": "pipe", "op": {"name": 3}}], "sink": {}}',
            r"pipes\[0\].op.name must be a JSON string, got 3",
        ),
    ],
)
def test_from_json_names_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        PipelineConfig.from_json(text)


# ---- Merge ----------------------------------------------------------------------
def _negate(x):
    return -x


def _merge_config():
    # Continuous: the outer pipeline reads one epoch of each per iterator.
    a = PipelineConfig(SourceConfig(sources.arange(10), continuous=True), [Pipe(ops.identity())], SinkConfig(2))
    b = PipelineBuilder().add_source(range(100, 105), continuous=True).pipe(_negate).add_sink(1).get_config()
    return PipelineConfig(Merge([a, b]), [Pipe(square), Aggregate(4)], SinkConfig(2))


def test_merge_runs_every_pipeline_each_epoch():
    want = sorted([x * x for x in range(10)] + [x * x for x in range(100, 105)])
    with build_pipeline(_merge_config(), num_threads=2) as p:
        for _ in range(2):
            batches = list(p)
            assert [len(b) for b in batches] == [4, 4, 4, 3]
            assert sorted(x for b in batches for x in b) == want
        it = iter(p)
        first = next(it)
        it.close()  # left early: the next iterator reads the rest of that epoch
        assert sorted(first + [x for b in p for x in b]) == want
        assert sorted(x for b in p for x in b) == want


def test_merge_closes_its_pipelines_with_the_outer_one():
    from spdl_go.pipeline import _pipeline

    before = len(_pipeline._live)
    p = build_pipeline(_merge_config(), num_threads=1)
    assert len(_pipeline._live) == before + 3
    list(p)
    p.close()
    assert len(_pipeline._live) == before


def test_a_merged_pipelines_failure_fails_the_outer_one():
    def boom(x):
        if x == 3:
            raise KeyError(x)
        return x

    bad = PipelineConfig(SourceConfig(range(5)), [Pipe(boom)], SinkConfig(1))
    good = PipelineConfig(SourceConfig(range(5)), [], SinkConfig(1))
    with build_pipeline(PipelineConfig(Merge([bad, good]), [], SinkConfig(1)), num_threads=1, max_failures=0) as p:
        with pytest.raises(PipelineFailure):
            list(p)


def test_merge_json_round_trip():
    a = PipelineConfig(SourceConfig(sources.arange(6)), [Pipe(ops.identity(), concurrency=2)], SinkConfig(2))
    b = PipelineConfig(SourceConfig(sources.arange(3)), [Aggregate(2), Disaggregate()], SinkConfig(1))
    config = PipelineConfig(Merge([a, b]), [Aggregate(3)], SinkConfig(2))
    back = PipelineConfig.from_json(config.to_json())
    assert back == config
    assert sorted(x for batch in build_pipeline(back) for x in batch) == [0, 0, 1, 1, 2, 2, 3, 4, 5]
    with pytest.raises(
        TypeError, match=r"^PipelineConfig.to_json: src.merge\[1\]: the source is Python code \(range\)"
    ):
        _merge_config().to_json()
    c = PipelineConfig(SourceConfig(sources.arange(3)), [Pipe(_negate)], SinkConfig(1))
    with pytest.raises(TypeError, match=r"src.merge\[1\]: stage 0 \('_negate'\) runs a Python callable"):
        PipelineConfig(Merge([a, c]), [], SinkConfig(1)).to_json()


@pytest.mark.parametrize(
    "make,error,message",
    [
        (lambda: Merge([]), ValueError, "at least one PipelineConfig"),
        (lambda: Merge([SourceConfig([1])]), TypeError, r"pipeline_configs\[0\] must be a PipelineConfig"),
        (lambda: Merge(3), TypeError, "pipeline_configs must be a sequence"),
        (lambda: PipelineConfig(Merge([_merge_config()]), [], SinkConfig(1)).to_spec(), TypeError, "build_pipeline"),
    ],
)
def test_merge_bad_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


# ---- PathVariants ---------------------------------------------------------------
def _parity(x):
    return x % 2


def _times(k):
    return functools.partial(lambda k, x: x * k, k)


def _variants_config():
    return PipelineConfig(
        SourceConfig(range(10), continuous=True),
        [
            Pipe(_negate),
            PathVariants(_parity, [[Pipe(_times(10))], [Pipe(ops.identity()), Pipe(_times(100))]]),
            Aggregate(20),
        ],
        SinkConfig(2),
    )


def test_path_variants_routes_each_item():
    want = sorted(-x * (10 if x % 2 == 0 else 100) for x in range(10))
    with build_pipeline(_variants_config(), num_threads=2) as p:
        for _ in range(2):
            (batch,) = list(p)
            assert sorted(batch) == want
        it = iter(p)
        assert sorted(next(it)) == want
        it.close()  # left early, after the epoch's one batch: the next iterator ends that epoch
        assert list(p) == []
        (batch,) = list(p)
        assert sorted(batch) == want


def test_path_variants_closes_its_pipelines_with_the_outer_one():
    from spdl_go.pipeline import _pipeline

    before = len(_pipeline._live)
    p = build_pipeline(_variants_config(), num_threads=1)
    assert len(_pipeline._live) == before + 4  # before the stage, two paths, after it
    list(p)
    p.close()
    assert len(_pipeline._live) == before


def test_path_variants_nested_and_async_router():
    async def router(x):
        return 0 if x < 5 else 1

    inner = PathVariants(_parity, [[Pipe(_times(10))], [Pipe(_times(100))]], name="inner")
    cfg = PipelineConfig(SourceConfig(range(10)), [PathVariants(router, [[inner], [Pipe(_negate)]])], SinkConfig(2))
    assert sorted(build_pipeline(cfg, num_threads=2)) == sorted([0, 100, 20, 300, 40, -5, -6, -7, -8, -9])


def test_path_variants_batched_keeps_batches():
    def router(batch):
        return [int(x % 3 == 0) for x in batch]

    def tens(batch):
        return [x * 10 for x in batch]

    def negs(batch):
        return [-x for x in batch]

    cfg = PipelineConfig(
        SourceConfig(range(10)),
        [Aggregate(4), PathVariants(router, [[Pipe(tens)], [Pipe(negs)]], batched=True)],
        SinkConfig(2),
    )
    # Each batch is split by path and put back together in path order.
    assert list(build_pipeline(cfg, num_threads=1)) == [[10, 20, 0, -3], [40, 50, 70, -6], [80, -9]]


@pytest.mark.parametrize(
    "router,batched,error,message",
    [
        (lambda x: 5 if x == 4 else 0, False, IndexError, r"the router returned 5, but there are 2 paths"),
        (lambda x: "0", False, IndexError, r"the router returned '0'"),
        (lambda x: 0 if x < 4 else 1 // 0, False, ZeroDivisionError, "division"),
        (lambda b: [0], True, ValueError, "returned 1 indices for a batch of 2 items"),
    ],
)
def test_path_variants_router_failures_fail_the_pipeline(router, batched, error, message):
    pipes = [Aggregate(2)] if batched else []
    cfg = PipelineConfig(
        SourceConfig(range(10)),
        [*pipes, PathVariants(router, [[Pipe(str)], [Pipe(repr)]], batched=batched)],
        SinkConfig(1),
    )
    with build_pipeline(cfg, num_threads=1) as p:
        with pytest.raises(PipelineFailure) as e:
            list(p)
    assert isinstance(e.value.exceptions[0], error)
    assert re.search(message, str(e.value.exceptions[0]))


@pytest.mark.parametrize(
    "make,error,message",
    [
        (lambda: PathVariants(3, [[Pipe(str)]]), ValueError, "router must be callable, got int"),
        (lambda: PathVariants(_parity, []), ValueError, "at least 1 path"),
        (lambda: PathVariants(_parity, [[Pipe(str)], []]), ValueError, r"paths\[1\] is empty"),
        (
            lambda: PathVariants(_parity, [[Pipe(str), SourceConfig([1])]]),
            ValueError,
            r"paths\[0\]\[1\] must be a PipeConfig, .* got SourceConfig",
        ),
        (lambda: PathVariants(_parity, [[SinkConfig(1)]]), ValueError, r"paths\[0\]\[0\] .* got SinkConfig"),
        (
            lambda: PipelineConfig(
                SourceConfig(sources.arange(3)), [PathVariants(_parity, [[Pipe(str)]])], SinkConfig(1)
            ).to_json(),
            TypeError,
            r"stage 0 \('path_variants'\) routes items with a Python callable",
        ),
    ],
)
def test_path_variants_bad_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_paths_failure_fails_the_pipeline_and_leaves_no_threads():
    import threading

    def boom(x):
        if x == 7:
            raise KeyError(x)
        return x

    before = threading.active_count()
    cfg = PipelineConfig(
        SourceConfig(range(10)), [PathVariants(_parity, [[Pipe(str)], [Pipe(boom, max_failures=0)]])], SinkConfig(1)
    )
    with build_pipeline(cfg, num_threads=1) as p:
        with pytest.raises(PipelineFailure) as e:
            list(p)
        assert any(isinstance(x, PipelineFailure) for x in e.value.exceptions)  # the path's own failure
    assert threading.active_count() == before
