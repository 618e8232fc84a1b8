"""Corrupt Parquet and Arrow IPC files in ``sources.table``: each damaged
row group, record batch or row fails as one item naming the file and the
part, the rest is read, and no engine memory is left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import spdl_go
from spdl_go import sources


def _rows(first: int, n: int) -> pa.Table:
    return pa.table(
        {
            "img": pa.array([f"img-{i}".encode() for i in range(first, first + n)], pa.binary()),
            "label": pa.array([i * 1000 + 7 for i in range(first, first + n)], pa.int64()),
            "text": pa.array([f"t{i}" for i in range(first, first + n)], pa.string()),
        }
    )


def _read(paths: list[Path], epochs: int = 1, **kw: Any) -> list[tuple[list[dict], list[str]]]:
    """Rows and failures of each epoch; the pipeline tolerates any number."""
    src = sources.table([str(p) for p in paths], scalars=True, **kw)
    p = spdl_go.PipelineBuilder().add_source(src, continuous=True).add_sink(4).build(max_failures=1000)
    out = []
    with p.auto_stop():
        for _ in range(epochs):
            rows = list(p)
            # The epoch's failures, as 'stage "source": item <file>: ...'.
            errors = [e.removeprefix('stage "source": item ') for e in p.stats().recent_errors]
            out.append((rows, errors))
    return out


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.parquet"
    pq.write_table(_rows(100, 4), path, row_group_size=2)
    return path


def _chunk(path: Path, rg: int, col: int) -> tuple[int, int]:
    """Start and size of a column chunk (its dictionary page first)."""
    cc = pq.ParquetFile(path).metadata.row_group(rg).column(col)
    start = cc.data_page_offset
    if cc.dictionary_page_offset is not None and 0 < cc.dictionary_page_offset < start:
        start = cc.dictionary_page_offset
    return start, cc.total_compressed_size


def _flip(path: Path, at: int, mask: int = 0x01) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= mask
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("compression", ["none", "snappy", "zstd"])
@pytest.mark.parametrize("dictionary", [False, True])
def test_page_checksums(tmp_path, good, version, compression, dictionary):
    path = tmp_path / "x.parquet"
    pq.write_table(
        _rows(0, 6),
        path,
        row_group_size=3,
        write_page_checksum=True,
        data_page_version=version,
        compression=compression,
        use_dictionary=dictionary,
    )
    (clean,) = _read([path, good])
    assert [r["label"] for r in clean[0]] == [i * 1000 + 7 for i in [0, 1, 2, 3, 4, 5, 100, 101, 102, 103]]
    assert clean[1] == []
    start, size = _chunk(path, 1, 1)
    _flip(path, start + size - 2)  # in the last page's bytes, after its header
    # pyarrow sees the same damage when it verifies.
    with pytest.raises(OSError, match="CRC"):
        pq.ParquetFile(path, page_checksum_verification=True).read_row_group(1)
    for rows, errors in _read([path, good], epochs=3):
        assert [r["img"] for r in rows] == [f"img-{i}".encode() for i in [0, 1, 2, 100, 101, 102, 103]]
        assert len(errors) == 1, errors
        assert f'{path}: row group 1: column "label": page ' in errors[0]
        assert "CRC32 mismatch (stored 0x" in errors[0]
    assert spdl_go.arrow_allocated_bytes() == 0
    # Unchecked, the damage is decoded: a wrong value, or the reader's error.
    ((rows, errors),) = _read([path, good], verify_checksums=False)
    assert not any("CRC32" in e for e in errors)
    assert [r["img"] for r in rows][:3] == [b"img-0", b"img-1", b"img-2"]
    assert len(rows) == 10 or errors
    assert spdl_go.arrow_allocated_bytes() == 0


def test_without_checksums_a_flip_is_not_detected(tmp_path, good):
    path = tmp_path / "x.parquet"
    pq.write_table(_rows(0, 6), path, row_group_size=3, compression="none", use_dictionary=False)
    start, size = _chunk(path, 1, 1)
    _flip(path, start + size - 1, 0x40)  # the high byte of the last label
    ((rows, errors),) = _read([path, good])
    assert errors == [] and len(rows) == 10
    assert rows[5]["label"] != 5 * 1000 + 7  # nothing to check it against


def _arrow_file(path: Path) -> tuple[int, int]:
    """Writes two record batches; returns where batch 1's message starts
    and how long its metadata is."""
    t = _rows(0, 6)
    batches = t.to_batches(max_chunksize=3)
    with ipc.new_file(path, t.schema) as w:
        for b in batches:
            w.write_batch(b)
    start = 8 + len(t.schema.serialize()) + len(batches[0].serialize())
    meta = int.from_bytes(path.read_bytes()[start + 4 : start + 8], "little")
    return start, meta


def test_corrupt_arrow_batches_fail_alone_and_free_memory(tmp_path, good):
    path = tmp_path / "x.arrow"
    start, meta = _arrow_file(path)
    orig = path.read_bytes()
    failed = 0
    for at in range(start + 8, start + 8 + meta):
        b = bytearray(orig)
        b[at] ^= 0xFF
        path.write_bytes(bytes(b))
        for rows, errors in _read([path, good], epochs=2):
            assert [r["img"] for r in rows if r["img"].startswith(b"img-10")] == [
                b"img-100",
                b"img-101",
                b"img-102",
                b"img-103",
            ]
            assert all(e.startswith(f"{path}: ") for e in errors), errors
            assert all("Traceback" not in e and "goroutine" not in e for e in errors)
            failed += any(e.startswith(f"{path}: record batch 1: ") for e in errors)
        assert spdl_go.arrow_allocated_bytes() == 0, at
    assert failed > 0


def test_corrupt_footer_fails_the_file_once_per_epoch(tmp_path, good):
    path = tmp_path / "x.arrow"
    _arrow_file(path)
    b = bytearray(path.read_bytes())
    footer = int.from_bytes(b[-10:-6], "little")
    for at in range(len(b) - 10 - footer, len(b) - 10, 3):
        c = bytearray(b)
        c[at] ^= 0xFF
        path.write_bytes(bytes(c))
        for rows, errors in _read([path, good], epochs=2):
            assert len([r for r in rows if r["img"].startswith(b"img-10")]) == 4
            assert all(e.startswith(f"{path}: ") for e in errors), errors
        assert spdl_go.arrow_allocated_bytes() == 0


def test_text_must_be_utf8(tmp_path, good):
    bad = b"a\xffb"
    data = b"ok" + bad + b"fine"
    offsets = pa.array([0, 2, 5, 9], pa.int32()).buffers()[1]
    text = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(data)])
    t = pa.table({"img": pa.array([b"u0", b"u1", b"u2"]), "text": text})
    path = tmp_path / "u.arrow"
    with ipc.new_file(path, t.schema) as w:
        w.write_table(t)
    for rows, errors in _read([path, good], epochs=2, columns=["img", "text"]):
        assert [r["img"] for r in rows] == [b"u0", b"u2", b"img-100", b"img-101", b"img-102", b"img-103"]
        assert errors == [f'{path}: record batch 0: row 1: column "text": text is not valid UTF-8 (byte 1 of 3)']
    # As Arrow slices too: pyarrow would fail to decode it far from the file.
    src = sources.table([str(path)], columns=["text"])
    p = spdl_go.PipelineBuilder().add_source(src).add_sink(4).build(max_failures=-1)
    with p.auto_stop():
        assert [pa.array(r["text"]).to_pylist() for r in p] == [["ok"], ["fine"]]
        assert p.stats().recent_errors[0].endswith('row 1: column "text": text is not valid UTF-8 (byte 1 of 3)')
    assert spdl_go.arrow_allocated_bytes() == 0


def test_too_many_failures_stop_the_loop(tmp_path, good):
    path = tmp_path / "x.parquet"
    pq.write_table(_rows(0, 6), path, row_group_size=1, write_page_checksum=True, compression="none")
    for rg in range(6):
        start, size = _chunk(path, rg, 1)
        _flip(path, start + size - 1)
    src = sources.table([str(path), str(good)], scalars=True)
    p = spdl_go.PipelineBuilder().add_source(src).add_sink(4).build(max_failures=3)
    with p.auto_stop(), pytest.raises(spdl_go.PipelineFailure, match=r"x\.parquet: row group \d: column \"label\""):
        list(p)
