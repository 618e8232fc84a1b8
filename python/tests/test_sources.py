"""Native sources listed in Go: files, globs and ImageNet-style folders."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spdl_go
from spdl_go import ops, sources


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    # 3 classes; "bird" has a nested directory and files of other types.
    for cls, names in {
        "cat": ["c1.jpg", "c0.JPG"],
        "dog": ["d0.png", "sub/d1.jpg"],
        "bird": ["b0.jpg", "notes.txt"],
    }.items():
        for n in names:
            p = tmp_path / "train" / cls / n
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(f"{cls}/{n}".encode())
    (tmp_path / "train" / "stray.jpg").write_bytes(b"not in a class")
    return tmp_path / "train"


def _drain(src, *stages) -> list:
    b = spdl_go.PipelineBuilder().add_source(src)
    for s in stages:
        b = b.pipe(s)
    p = b.add_sink(4).build()
    with p.auto_stop():
        return list(p)


def _rel(root: Path, paths) -> list[str]:
    return [Path(p).relative_to(root).as_posix() for p in paths]


@pytest.mark.parametrize(
    "root, kwargs, want",
    [
        (
            "",
            {},
            ["bird/b0.jpg", "bird/notes.txt", "cat/c0.JPG", "cat/c1.jpg", "dog/d0.png", "dog/sub/d1.jpg", "stray.jpg"],
        ),
        ("", {"recursive": False}, ["stray.jpg"]),
        ("", {"extensions": ["jpg"]}, ["bird/b0.jpg", "cat/c0.JPG", "cat/c1.jpg", "dog/sub/d1.jpg", "stray.jpg"]),
        ("/*/*.jpg", {}, ["bird/b0.jpg", "cat/c1.jpg"]),
        ("/**/*.png", {}, ["dog/d0.png"]),
        ("/dog/**", {}, ["dog/d0.png", "dog/sub/d1.jpg"]),
    ],
)
def test_files_lists_sorted_paths(folder, root, kwargs, want):
    src = sources.files(str(folder) + root, **kwargs)
    assert len(src) == len(want) and src.classes == ()
    assert _rel(folder, _drain(src)) == want


def test_image_folder_labels_like_torchvision(folder):
    src = sources.image_folder(folder)
    assert src.classes == ("bird", "cat", "dog")
    got = [(Path(p).relative_to(folder).as_posix(), label) for p, label in _drain(src)]
    assert got == [("bird/b0.jpg", 0), ("cat/c0.JPG", 1), ("cat/c1.jpg", 1), ("dog/d0.png", 2), ("dog/sub/d1.jpg", 2)]


def test_image_folder_reads_through_native_ops(folder):
    src = sources.image_folder(folder, shuffle=True, seed=3)
    out = _drain(src, ops.read_file())
    # read_file replaces the path (element 0) with its bytes; the label stays.
    assert sorted((bytes(np.from_dlpack(b)) if not isinstance(b, bytes) else b, lbl) for b, lbl in out) == sorted(
        [(b"bird/b0.jpg", 0), (b"cat/c0.JPG", 1), (b"cat/c1.jpg", 1), (b"dog/d0.png", 2), (b"dog/sub/d1.jpg", 2)]
    )


def test_shuffle_is_seeded_and_ranks_split_every_epoch(folder):
    def epoch(**kw):
        return _drain(sources.files(folder, shuffle=True, **kw))

    a, b, c = epoch(seed=1), epoch(seed=1), epoch(seed=2)
    assert a == b and sorted(a) == sorted(c) and a != sorted(a)
    r0 = epoch(seed=1, rank=0, world_size=2, drop_last=True)
    r1 = epoch(seed=1, rank=1, world_size=2, drop_last=True)
    assert len(r0) == len(r1) == 3 and not set(r0) & set(r1)
    # Later epochs are new permutations of the same files.
    p = (
        spdl_go.PipelineBuilder()
        .add_source(sources.files(folder, shuffle=True, seed=1), continuous=True)
        .add_sink(2)
        .build()
    )
    with p.auto_stop():
        e0, e1 = list(p), list(p)
    assert e0 == a and sorted(e1) == sorted(a) and e1 != e0


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda root: sources.files(root / "missing"), "missing: no such file or directory"),
        (lambda root: sources.files(root, extensions=".wav"), "no files with extension .wav under"),
        (lambda root: sources.files(str(root) + "/[x"), "bad pattern"),
        (lambda root: sources.image_folder(root / "cat"), "has no class subdirectories"),
        (
            lambda root: sources.image_folder(root, extensions=".png"),
            'class "bird": files: no files with extension .png',
        ),
    ],
)
def test_bad_roots_name_the_path(folder, make, match):
    with pytest.raises(ValueError, match=match):
        make(folder)


def test_a_file_removed_after_listing_fails_only_its_item(folder):
    src = sources.image_folder(folder)
    (folder / "cat" / "c1.jpg").unlink()
    p = spdl_go.PipelineBuilder().add_source(src).pipe(ops.read_file(), name="read").add_sink(4).build()
    with p.auto_stop():
        out = list(p)
        errors = p.stats().recent_errors
    assert len(out) == 4
    assert len(errors) == 1 and "c1.jpg" in errors[0] and "read" in errors[0]


def test_a_listing_that_changed_before_the_build_is_refused(folder):
    src = sources.files(folder)
    (folder / "cat" / "extra.jpg").write_bytes(b"x")
    # The listing peeked by files() is what the build uses: the same 7 files.
    assert len(_drain(src)) == 7
    # A second build of the same source lists again and sees 8.
    with pytest.raises(ValueError, match="lists 8 files now, but the source was made for 7"):
        _drain(src)


# ---- WebDataset tar shards ---------------------------------------------------


def _jpeg(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _write_shard(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> None:
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    long_dir = "very/" * 25  # member names over 100 bytes: GNU / PAX long names
    for s, fmt in enumerate([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]):
        members = []
        for i in range(4):
            key = f"{long_dir}{s:02d}{i:04d}"
            members += [
                (key + ".jpg", _jpeg((60 * s, 50 * i, 100))),
                (key + ".cls", f"{(s * 4 + i) % 5}\n".encode()),
                (key + ".json", f'{{"i": {s * 4 + i}}}'.encode()),
            ]
        _write_shard(tmp_path / f"shard-{s:04d}.tar", members, fmt)
    return tmp_path


def test_webdataset_decodes_batches(shards):
    src = sources.webdataset(
        str(shards / "shard-{0000..0002}.tar"), required=("jpg", "cls"), decode={"cls": "int", "json": "json"}
    )
    p = (
        spdl_go.PipelineBuilder()
        .add_source(src)
        .pipe(ops.decode_image(key="jpg"), concurrency=2, output_order="input")
        .aggregate(4)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink(2)
        .build()
    )
    with p.auto_stop():
        batches = list(p)
    assert len(batches) == 3
    b = batches[1]
    assert np.from_dlpack(b["jpg"]).shape == (4, 30, 40, 3)
    assert np.from_dlpack(b["cls"]).tolist() == [(4 + i) % 5 for i in range(4)]
    assert b["__key__"].to_pyarrow().to_pylist()[0].endswith("/010000")
    assert np.from_dlpack(b["json"]["i"]).tolist() == [4, 5, 6, 7]  # dicts collate field by field


def test_webdataset_splits_shards_over_ranks(shards):
    def keys(**kw) -> list[str]:
        return [
            s["__key__"]
            for s in _drain(sources.webdataset(str(shards / "shard-{0000..0002}.tar"), shuffle=True, seed=5, **kw))
        ]

    r0, r1 = keys(rank=0, world_size=3), keys(rank=1, world_size=3)
    r2 = keys(rank=2, world_size=3)
    assert len(r0) == len(r1) == len(r2) == 4
    assert sorted(r0 + r1 + r2) == sorted(keys())


def test_webdataset_bad_shards_fail_alone(shards):
    good = shards / "shard-0000.tar"
    data = (shards / "shard-0001.tar").read_bytes()
    (shards / "cut.tar").write_bytes(data[: len(data) // 2])
    _write_shard(shards / "unpaired.tar", [("a.jpg", _jpeg((1, 2, 3))), ("a.cls", b"1"), ("b.jpg", _jpeg((1, 2, 3)))])
    src = sources.webdataset(
        [good, shards / "cut.tar", shards / "missing.tar", shards / "unpaired.tar"], required=("jpg", "cls")
    )
    p = spdl_go.PipelineBuilder().add_source(src).pipe(ops.decode_image(key="jpg")).add_sink(2).build(max_failures=3)
    with p.auto_stop():
        out = list(p)
        errors = "\n".join(p.stats().recent_errors)
    keys = [s["__key__"] for s in out]
    cut = [k[-6:] for k in keys if k[-6:-4] == "01"]
    assert 1 <= len(cut) < 4 and cut == [f"01{i:04d}" for i in range(len(cut))]  # what precedes the cut
    assert len(keys) == 4 + len(cut) + 1  # the good shard, the cut one's start, and "a"
    assert "cut.tar: shard broken after sample" in errors and "truncated" in errors
    assert "missing.tar: open" in errors
    assert "unpaired.tar: sample b: no .cls member (it has .jpg)" in errors


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"decode": {"cls": "yaml"}}, 'unknown decoder "yaml"'),
        ({"required": (".jpg",)}, "without the dot"),
        ({"shuffle_buffer": -1}, "shuffle_buffer must be an int >= 0"),
        ({"prefetch_shards": -1}, "prefetch_shards must be an int >= 0"),
        ({"prefetch_shards": 1.5}, "prefetch_shards must be an int >= 0"),
    ],
)
def test_webdataset_options_are_checked(shards, kwargs, match):
    with pytest.raises(ValueError, match=match):
        spdl_go.PipelineBuilder().add_source(sources.webdataset(str(shards / "shard-0000.tar"), **kwargs)).add_sink(
            1
        ).build()


def test_webdataset_prefetch_keeps_the_epoch(shards):
    def keys(**kw) -> list[str]:
        src = sources.webdataset(str(shards / "shard-{0000..0002}.tar"), shuffle=True, seed=4, **kw)
        return [s["__key__"] for s in _drain(src)]

    want = keys(prefetch_shards=0)
    assert len(want) == 12 and keys() == want and keys(prefetch_shards=5) == want


def test_streaming_sources_report_their_reads(shards, tables):
    size = sum((shards / f"shard-{i:04d}.tar").stat().st_size for i in range(3))
    src = sources.webdataset(str(shards / "shard-{0000..0002}.tar"))
    p = spdl_go.PipelineBuilder().add_source(src).add_sink(4).build()
    with p.auto_stop():
        assert len(list(p)) == 12
        st = p.stats()
    p.close()
    counters = st.source.op_stats
    assert (counters["shards_opened"], counters["bytes_read"]) == (3, size) and counters["read_wait_ms"] >= 0, (
        st.format()
    )
    assert "shards_opened 3" in st.format()
    p = spdl_go.PipelineBuilder().add_source(sources.table(tables / "part-0.parquet")).add_sink(4).build()
    with p.auto_stop():
        assert len(list(p)) == 6
        counters = p.stats().source.op_stats
    p.close()
    assert counters["parts_opened"] == 2 and 0 < counters["bytes_read"] < (tables / "part-0.parquet").stat().st_size


def test_webdataset_bad_pattern(shards):
    with pytest.raises(ValueError, match="bad range"):
        spdl_go.PipelineBuilder().add_source(sources.webdataset(str(shards / "s-{9..1}.tar"))).add_sink(1).build()


# ---- Parquet and Arrow IPC ----------------------------------------------------


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    def rows(first: int, n: int) -> pa.Table:
        ids = list(range(first, first + n))
        return pa.table(
            {
                "jpg": [_jpeg((i * 20 % 256, 0, 0)) for i in ids],
                "label": pa.array([i % 4 for i in ids], pa.int32()),
                "caption": [None if i % 5 == 2 else f"caption {i}" for i in ids],
            }
        )

    pq.write_table(rows(0, 6), tmp_path / "part-0.parquet", row_group_size=3)
    pq.write_table(rows(6, 4), tmp_path / "part-1.parquet", row_group_size=2)
    with pa.ipc.new_file(tmp_path / "part-2.arrow", rows(10, 4).schema) as w:
        for batch in rows(10, 4).to_batches(max_chunksize=2):
            w.write_batch(batch)
    return tmp_path


def test_table_rows_to_batches(tables):
    src = sources.table(str(tables / "part-*"), columns=["jpg", "label", "caption"])
    p = (
        spdl_go.PipelineBuilder()
        .add_source(src)
        .pipe(ops.decode_image(key="jpg"), concurrency=2, output_order="input")
        .aggregate(3)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink(2)
        .build()
    )
    with p.auto_stop():
        batches = list(p)
    assert [len(np.from_dlpack(b["label"])) for b in batches] == [3, 3, 3, 3, 2]
    labels = np.concatenate([np.from_dlpack(b["label"]) for b in batches]).tolist()
    assert labels == [i % 4 for i in range(14)]
    captions = sum((b["caption"].to_pyarrow().to_pylist() for b in batches), [])
    assert captions == [None if i % 5 == 2 else f"caption {i}" for i in range(14)]
    assert np.from_dlpack(batches[0]["jpg"]).shape == (3, 30, 40, 3)
    assert spdl_go.arrow_allocated_bytes() == 0


def test_table_scalars_for_python_stages(tables):
    src = sources.table(tables / "part-1.parquet", columns=["label", "caption"], scalars=True)
    assert _drain(src, lambda row: (row["label"], row["caption"])) == [
        (2, "caption 6"),
        (3, None),
        (0, "caption 8"),
        (1, "caption 9"),
    ]


def test_table_ranks_split_row_groups(tables):
    def labels(**kw):
        return [
            r["caption"]
            for r in _drain(
                sources.table(
                    tables / "part-{0,1}.parquet", columns=["caption"], scalars=True, shuffle=True, seed=4, **kw
                )
            )
        ]

    r0, r1 = labels(rank=0, world_size=2), labels(rank=1, world_size=2)
    # 4 row groups (3+3, 2+2 rows): two each, every row once.
    assert len(r0) + len(r1) == 10 and sorted(map(str, r0 + r1)) == sorted(map(str, labels()))


def test_table_bad_files_fail_alone(tables):
    (tables / "broken.parquet").write_bytes(b"PAR1 not really PAR1")
    pq.write_table(pa.table({"jpg": [b"x"]}), tables / "nolabel.parquet")
    src = sources.table(
        [tables / "part-1.parquet", tables / "broken.parquet", tables / "nolabel.parquet", tables / "gone.parquet"],
        columns=["jpg", "label"],
    )
    p = spdl_go.PipelineBuilder().add_source(src).add_sink(2).build(max_failures=3)
    with p.auto_stop():
        out = list(p)
        errors = "\n".join(p.stats().recent_errors)
    assert len(out) == 4
    assert "broken.parquet: not a readable Parquet file" in errors
    assert 'nolabel.parquet: no column "label" (it has jpg)' in errors
    assert "gone.parquet: open" in errors
    with pytest.raises(ValueError, match="unknown format"):
        spdl_go.PipelineBuilder().add_source(sources.table(tables / "x.csv")).add_sink(1).build()


# ---- mid-epoch resume of hand-built pipelines ----------------------------------


def _folder_pipeline(src, batch: int = 3):
    return (
        spdl_go.PipelineBuilder()
        .add_source(src, continuous=True)  # track() reads one epoch per call
        .pipe(ops.read_file(), concurrency=2, output_order="input")  # keeps (…, label, index)
        .aggregate(batch)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink(3)
        .build()
    )


@pytest.fixture
def many(tmp_path: Path) -> Path:
    for c in range(3):
        for i in range(11):
            p = tmp_path / f"class{c}" / f"{i:02d}.jpg"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(f"{c}/{i}".encode())
    return tmp_path


def _indices(batches) -> list[int]:
    return [i for b in batches for i in np.from_dlpack(b[-1]).tolist()]


def test_resumable_source_continues_an_epoch(many):
    def make(**kw):
        return spdl_go.ResumableSource(
            sources.image_folder(many, extensions=".jpg", shuffle=True, seed=3, with_index=True, **kw)
        )

    full = make()
    p = _folder_pipeline(full.source)
    with p.auto_stop():
        whole = _indices(full.track(p))
    assert sorted(whole) == list(range(33))

    # Stop after 4 batches, with more prefetched; resume in a new pipeline.
    part = make()
    p = _folder_pipeline(part.source)
    seen = []
    with p.auto_stop():
        for k, b in enumerate(part.track(p)):
            seen += np.from_dlpack(b[-1]).tolist()
            if k == 3:
                break
    state = json.loads(json.dumps(part.state_dict()))  # plain JSON
    again = make()
    again.load_state_dict(state)
    p = _folder_pipeline(again.source)
    with p.auto_stop():
        rest = _indices(again.track(p))
        next_epoch = _indices(again.track(p))
    assert seen + rest == whole  # same order, nothing lost or repeated
    assert sorted(next_epoch) == list(range(33)) and next_epoch != whole


def test_resumable_source_changes_world_size(many):
    def make(rank: int, world: int):
        return spdl_go.ResumableSource(
            sources.files(many, shuffle=True, seed=1, rank=rank, world_size=world, with_index=True)
        )

    # Two ranks each consume two batches, then the job restarts on one rank.
    ranks = [make(r, 2) for r in range(2)]
    seen = []
    for r in ranks:
        p = spdl_go.PipelineBuilder().add_source(r.source).aggregate(4).add_sink(2).build()
        with p.auto_stop():
            for k, b in enumerate(r.track(p, index=lambda batch: [i for _, i in batch])):
                seen += [i for _, i in b]
                if k == 1:
                    break
    state = spdl_go.ResumableSource.merge_states([r.local_state() for r in ranks])
    one = make(0, 1)
    one.load_state_dict(state)
    p = spdl_go.PipelineBuilder().add_source(one.source).add_sink(2).build()
    with p.auto_stop():
        rest = [i for _, i in one.track(p, index=lambda s: [s[1]])]
    assert sorted(seen + rest) == list(range(33)) and len(seen) == 16


def test_resumable_source_refuses_other_sources():
    with pytest.raises(TypeError, match="needs a source from sources.sampler"):
        spdl_go.ResumableSource(sources.arange(10))


# World sizes that divide the units (3 shards, 4 row groups): no padding,
# so an epoch holds every sample once.
@pytest.mark.parametrize("kind, before, after", [("webdataset", 3, 1), ("table", 2, 1), ("table", 4, 2)])
def test_streaming_sources_resume_onto_fewer_ranks(shards, tables, kind, before, after):
    def make(rank: int, world: int) -> spdl_go.ResumableSource:
        common = dict(shuffle=True, seed=2, shuffle_buffer=3, rank=rank, world_size=world, with_index=True)
        if kind == "webdataset":
            src = sources.webdataset(str(shards / "shard-{0000..0002}.tar"), decode={"cls": "int"}, **common)
        else:
            src = sources.table(
                [tables / "part-0.parquet", tables / "part-1.parquet"], columns=["label", "caption"], **common
            )
        return spdl_go.ResumableSource(src)

    def pipeline(src):
        return (
            spdl_go.PipelineBuilder()
            .add_source(src.source)
            .aggregate(2)
            .pipe(ops.collate(numbers="tensor"))
            .add_sink(2)
            .build()
        )

    def ids(batch) -> list[int]:
        return np.from_dlpack(batch["__index__"]).tolist()

    full = make(0, 1)
    p = pipeline(full)
    with p.auto_stop():
        everything = sorted(i for b in full.track(p) for i in ids(b))
    # Each rank consumes one batch (more are prefetched), then the job
    # restarts on fewer ranks.
    ranks, seen = [make(r, before) for r in range(before)], []
    for r in ranks:
        p = pipeline(r)
        with p.auto_stop():
            for b in r.track(p):
                seen += ids(b)
                break
    state = json.loads(json.dumps(spdl_go.ResumableSource.merge_states([r.local_state() for r in ranks])))
    rest = []
    for rank in range(after):
        again = make(rank, after)
        again.load_state_dict(state)
        p = pipeline(again)
        with p.auto_stop():
            rest += [i for b in again.track(p) for i in ids(b)]
    assert len(seen) == 2 * before and sorted(seen + rest) == everything


# Without a shuffle buffer, units are read one after another: the batches
# consumed cover the first unit whole, which the resumed epoch never opens.
@pytest.mark.parametrize("kind, batch, batches", [("webdataset", 2, 3), ("arrow", 3, 1), ("parquet", 2, 2)])
def test_streaming_resume_skips_units_consumed_whole(shards, tables, kind, batch, batches):
    def make() -> spdl_go.ResumableSource:
        if kind == "webdataset":  # 3 shards of 4
            src = sources.webdataset(str(shards / "shard-{0000..0002}.tar"), shuffle=True, seed=5, with_index=True)
        elif kind == "arrow":  # 2 record batches of 2
            src = sources.table(tables / "part-2.arrow", columns=["label"], shuffle=True, seed=5, with_index=True)
        else:  # 2 row groups of 3
            src = sources.table(tables / "part-0.parquet", columns=["label"], shuffle=True, seed=5, with_index=True)
        return spdl_go.ResumableSource(src)

    def pipeline(src):
        return (
            spdl_go.PipelineBuilder()
            .add_source(src.source)
            .aggregate(batch)
            .pipe(ops.collate(numbers="tensor"))
            .add_sink(2)
            .build()
        )

    def ids(b) -> list[int]:
        return np.from_dlpack(b["__index__"]).tolist()

    first, seen = make(), []
    p = pipeline(first)
    with p.auto_stop():
        for n, b in enumerate(first.track(p)):
            seen += ids(b)
            if n + 1 == batches:
                break
        state = json.loads(json.dumps(first.state_dict()))
    p.close()
    unit0 = str(seen[0] >> 32)
    assert state["progress"]["sizes"][unit0] > 0, state
    again = make()
    again.load_state_dict(state)
    p = pipeline(again)
    with p.auto_stop():
        rest = [i for b in again.track(p) for i in ids(b)]
        st = p.stats()
    p.close()
    counters = st.source.op_stats
    assert (counters["resume_units_skipped"], counters["resume_samples_skipped"]) == (1, len(seen)), st.format()
    # One unit of each source was not opened: 2 of 3 shards, 1 of 2 parts.
    opened = counters["shards_opened" if kind == "webdataset" else "parts_opened"]
    assert opened == (2 if kind == "webdataset" else 1) and counters["bytes_read"] > 0, st.format()
    assert "resume_units_skipped 1" in st.format()
    full = make()
    p = pipeline(full)
    with p.auto_stop():
        everything = sorted(i for b in full.track(p) for i in ids(b))
    p.close()
    assert sorted(seen + rest) == everything and not set(seen) & set(rest)


_UNREADABLE_SCRIPT = """
import json, sys
import spdl_go
from spdl_go import ops, sources
root = sys.argv[1]
out = {}
p = (spdl_go.PipelineBuilder().add_source(sources.image_folder(root + "/img", extensions="jpg"))
     .pipe(ops.read_file(), concurrency=2).add_sink(4).build(max_failures=5))
with p.auto_stop():
    out["images"] = len(list(p))
    out["image_errors"] = p.stats().recent_errors
p.close()
p = spdl_go.PipelineBuilder().add_source(sources.webdataset([root + "/a.tar", root + "/b.tar"])).add_sink(4).build(max_failures=5)
with p.auto_stop():
    out["samples"] = len(list(p))
    out["shard_errors"] = p.stats().recent_errors
p.close()
try:
    sources.files(root + "/locked")
    out["listing"] = "listed"
except Exception as e:
    out["listing"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_unreadable_files_fail_their_items_only(tmp_path, shards):
    """Files and shards without read permission fail alone, named; a
    directory that cannot be listed fails the listing, named. Root reads
    anything, so as root the check runs without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (setpriv, from util-linux)."""
    import os
    import shutil
    import subprocess
    import sys

    for cls in ("cat", "dog"):
        for i in range(3):
            p = tmp_path / "img" / cls / f"{i}.jpg"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(_jpeg((i, 0, 0)))
    (tmp_path / "img" / "dog" / "1.jpg").chmod(0)
    shutil.copy(shards / "shard-0000.tar", tmp_path / "a.tar")
    shutil.copy(shards / "shard-0001.tar", tmp_path / "b.tar")
    (tmp_path / "b.tar").chmod(0)
    (tmp_path / "locked" / "sub").mkdir(parents=True)
    (tmp_path / "locked" / "sub").chmod(0)
    cmd = [sys.executable, "-c", _UNREADABLE_SCRIPT, str(tmp_path)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to drop root's file-permission override"
        drop = "-dac_override,-dac_read_search"
        cmd = [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}", *cmd]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        (tmp_path / "locked" / "sub").chmod(0o755)  # so that tmp_path can be removed
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["images"] == 5, got
    (err,) = got["image_errors"]
    assert "dog/1.jpg" in err and "permission denied" in err, err
    assert got["samples"] == 4, got
    (err,) = got["shard_errors"]
    assert "b.tar" in err and "permission denied" in err, err
    assert got["listing"].startswith("ValueError") or got["listing"].startswith("OSError"), got
    assert "locked/sub" in got["listing"] and "permission denied" in got["listing"], got


def test_track_reads_indices_of_uncollated_samples(shards):
    src = spdl_go.ResumableSource(sources.webdataset(str(shards / "shard-{0000..0002}.tar"), with_index=True))
    p = spdl_go.PipelineBuilder().add_source(src.source).aggregate(5).add_sink(2).build()
    with p.auto_stop():
        n = sum(len(b) for b in src.track(p))
    p.close()
    assert n == 12
    assert src.local_state()["consumed"] == {"0": [[0, 4]], "1": [[0, 4]], "2": [[0, 4]]}
    bare = spdl_go.ResumableSource(sources.webdataset(str(shards / "shard-0000.tar")))
    p = spdl_go.PipelineBuilder().add_source(bare.source).aggregate(5).add_sink(2).build()
    with p.auto_stop(), pytest.raises(KeyError, match="with_index=True"):
        next(iter(bare.track(p)))
    p.close()
