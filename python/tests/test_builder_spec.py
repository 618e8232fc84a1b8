"""The spec the builder sends to the engine, byte for byte.

The JSON a builder produces is the contract with the engine
(``spdl_pipeline_new``): these tests pin it for a few builders, key order
included, and check how each Python stage's output is encoded.
"""

import json

import pytest

import spdl_go.pipeline._build as build_mod
from spdl_go import PipelineBuilder, ops, sources
from spdl_go.pipeline._build import BuildConfig
from spdl_go.pipeline.defs import (
    AggregateConfig,
    DisaggregateConfig,
    PipeConfig,
    PipelineConfig,
    SinkConfig,
    SourceConfig,
)


class _Captured:
    """Stands in for Pipeline: keeps what build() would hand the engine."""

    made: list["_Captured"] = []

    def __init__(self, spec, source_ids, function_ids, report_interval=None, continuous=False):
        _Captured.made.append(self)
        self.continuous = continuous
        self.spec = spec
        self.source_ids = source_ids
        self.function_ids = function_ids
        self.report_interval = report_interval
        self.data = json.dumps(spec).encode()  # exactly what Pipeline sends

    def ids(self):
        return [*self.source_ids, *self.function_ids]


@pytest.fixture
def capture(monkeypatch):
    monkeypatch.setattr(build_mod, "Pipeline", _Captured)
    registered = []

    def make_encoder(splits, native):
        registered.append((splits, native))
        return lambda obj: b""  # never called: nothing runs

    monkeypatch.setattr(build_mod._callbacks, "make_encoder", make_encoder)
    yield registered
    # The captured pipelines were never built: forget their callables.
    while _Captured.made:
        p = _Captured.made.pop()
        build_mod._callbacks.unregister(p.source_ids, p.function_ids)


def _pipe(name, op, *, concurrency=1, max_concurrency=None, timeout_s=None, order="completion", max_failures=None):
    return {
        "kind": "pipe",
        "name": name,
        "concurrency": concurrency,
        "max_concurrency": max_concurrency,
        "timeout_s": timeout_s,
        "output_order": order,
        "max_failures": max_failures,
        "op": op,
    }


def _same_bytes(got: bytes, want: dict) -> None:
    assert got == json.dumps(want).encode()


def f(x):
    return x


async def af(x):
    return x


class Callable:
    def __call__(self, x):
        return x


def test_python_source_and_stage(capture):
    p = (
        PipelineBuilder()
        .add_source(range(10))
        .pipe(lambda x: x * x, concurrency=4, output_order="input")
        .aggregate(4)
        .add_sink(buffer_size=2)
        .build(num_threads=4)
    )
    src, fn = p.ids()
    _same_bytes(
        p.data,
        {
            "stages": [
                _pipe("<lambda>", {"kind": "python", "id": fn}, concurrency=4, order="input"),
                {"kind": "aggregate", "num_items": 4, "drop_last": False},
            ],
            "buffer_size": 2,
            "max_failures": -1,
            "num_threads": 4,
            "cpu_budget": None,
            "queue_size": None,
            "source": {"kind": "python", "id": src},
        },
    )
    assert p.report_interval is None
    assert capture == [(0, False), (0, False)]


def test_every_option(capture):
    p = (
        PipelineBuilder()
        .add_source(range(10))
        .pipe(af, name="a", max_failures=3, timeout=1.5)
        .pipe(Callable(), concurrency="auto", max_concurrency=3)
        .aggregate(2, drop_last=True)
        .disaggregate()
        .pipe(ops.to_tensor("int64"))
        .add_sink()
        .build(max_failures=2, queue_size=7, report_interval=0.5, cpu_budget=4)
    )
    src, a, c = p.ids()
    _same_bytes(
        p.data,
        {
            "stages": [
                # An async op only waits: it takes no num_threads token.
                _pipe("a", {"kind": "python", "id": a, "io_bound": True}, timeout_s=1.5, max_failures=3),
                _pipe("Callable", {"kind": "python", "id": c}, concurrency="auto", max_concurrency=3),
                {"kind": "aggregate", "num_items": 2, "drop_last": True},
                {"kind": "disaggregate"},
                _pipe("to_tensor", {"kind": "native", "name": "to_tensor", "options": {"dtype": "int64"}}),
            ],
            "buffer_size": 3,
            "max_failures": 2,
            "num_threads": None,
            "cpu_budget": 4,
            "queue_size": 7,
            "source": {"kind": "python", "id": src},
        },
    )
    assert p.report_interval == 0.5
    # The async op's output goes to Python; the auto stage's to a native op
    # behind an aggregate/disaggregate pair (no net split).
    assert capture == [(0, False), (0, False), (0, True)]


def test_native_source_and_ops(capture):
    p = (
        PipelineBuilder()
        .add_source(sources.arange(10))
        .pipe(ops.identity(), concurrency=2)
        .aggregate(3)
        .pipe(ops.collate(pad=True))
        .add_sink(5)
        .build()
    )
    assert p.ids() == []
    _same_bytes(
        p.data,
        {
            "stages": [
                _pipe("identity", {"kind": "native", "name": "identity", "options": {}}, concurrency=2),
                {"kind": "aggregate", "num_items": 3, "drop_last": False},
                _pipe(
                    "collate",
                    {"kind": "native", "name": "collate", "options": {"pad": True, "pad_value": 0, "numbers": "arrow"}},
                ),
            ],
            "buffer_size": 5,
            "max_failures": -1,
            "num_threads": None,
            "cpu_budget": None,
            "queue_size": None,
            "source": {"kind": "range", "start": 0, "stop": 10, "step": 1},
        },
    )
    assert capture == []


def test_lists_split_before_a_native_consumer(capture):
    p = (
        PipelineBuilder()
        .add_source(range(4))
        .aggregate(2)
        .aggregate(2)
        .disaggregate()
        .pipe(f, timeout=2)
        .disaggregate()
        .disaggregate()
        .pipe(ops.identity())
        .add_sink()
        .build(queue_size=1)
    )
    src, fn = p.ids()
    _same_bytes(
        p.data,
        {
            "stages": [
                {"kind": "aggregate", "num_items": 2, "drop_last": False},
                {"kind": "aggregate", "num_items": 2, "drop_last": False},
                {"kind": "disaggregate"},
                _pipe("f", {"kind": "python", "id": fn}, timeout_s=2),
                {"kind": "disaggregate"},
                {"kind": "disaggregate"},
                _pipe("identity", {"kind": "native", "name": "identity", "options": {}}),
            ],
            "buffer_size": 3,
            "max_failures": -1,
            "num_threads": None,
            "cpu_budget": None,
            "queue_size": 1,
            "source": {"kind": "python", "id": src},
        },
    )
    # f's lists are split twice before the native op reads their elements.
    assert capture == [(0, False), (2, True)]


def test_source_only(capture):
    p = PipelineBuilder().add_source([1, 2]).add_sink().build()
    (src,) = p.ids()
    _same_bytes(
        p.data,
        {
            "stages": [],
            "buffer_size": 3,
            "max_failures": -1,
            "num_threads": None,
            "cpu_budget": None,
            "queue_size": None,
            "source": {"kind": "python", "id": src},
        },
    )
    assert capture == [(0, False)]


def test_config_to_spec_without_a_builder():
    config = PipelineConfig(
        SourceConfig(sources.arange(3)),
        (PipeConfig(f, concurrency=2), AggregateConfig(2), DisaggregateConfig()),
        SinkConfig(4),
    )
    _same_bytes(
        json.dumps(config.to_spec(op_ids=[7], settings=BuildConfig(num_threads=2).to_spec())).encode(),
        {
            "stages": [
                _pipe("f", {"kind": "python", "id": 7}, concurrency=2),
                {"kind": "aggregate", "num_items": 2, "drop_last": False},
                {"kind": "disaggregate"},
            ],
            "buffer_size": 4,
            "max_failures": -1,
            "num_threads": 2,
            "cpu_budget": None,
            "queue_size": None,
            "source": {"kind": "range", "start": 0, "stop": 3, "step": 1},
        },
    )
    assert config.encoding(0) == (0, False)
    assert config.encoding(1) == (0, False)


def test_configs_are_frozen():
    cfg = PipeConfig(f)
    assert cfg.name == "f"
    with pytest.raises(AttributeError):
        cfg.concurrency = 3  # type: ignore[misc]


def test_bad_build_settings_register_nothing():
    before = (len(build_mod._callbacks.sources), len(build_mod._callbacks.stages))
    with pytest.raises(ValueError, match="report_interval"):
        PipelineBuilder().add_source(range(3)).pipe(f).add_sink().build(report_interval=0)
    assert (len(build_mod._callbacks.sources), len(build_mod._callbacks.stages)) == before


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: PipeConfig(f, concurrency=0), "pipe: concurrency must be an int >= 1 or 'auto', got 0"),
        (lambda: PipeConfig(f, concurrency=2.0), "pipe: concurrency must be an int >= 1 or 'auto', got 2.0"),
        (lambda: PipeConfig(f, concurrency=True), "pipe: concurrency must be an int >= 1 or 'auto', got True"),
        (lambda: PipeConfig(f, max_concurrency=2), "pipe: max_concurrency only applies with concurrency='auto'"),
        (
            lambda: PipeConfig(f, timeout=float("inf")),
            "pipe: timeout must be a number of seconds > 0 or None, got 'inf'",
        ),
        (
            lambda: PipeConfig(f, max_failures=0.5),
            "pipe: max_failures must be an int or a fractions.Fraction in (0, 1], got 0.5",
        ),
        (lambda: AggregateConfig(0), "aggregate: num_items must be an int >= 1, got 0"),
        (lambda: SinkConfig(0), "add_sink: buffer_size must be an int >= 1, got 0"),
        (lambda: BuildConfig(num_threads=0), "build: num_threads must be an int >= 1 or None, got 0"),
        (lambda: BuildConfig(queue_size=0), "build: queue_size must be an int >= 1 or None, got 0"),
        (
            lambda: BuildConfig(max_failures="all"),
            "build: max_failures must be an int or a fractions.Fraction in (0, 1], got 'all'",
        ),
    ],
)
def test_configs_raise_the_engines_message(make, message):
    # The engine checks the values (spdl_spec_check) with the code the
    # build uses; Python re-raises its message when the config is made.
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value) == message
