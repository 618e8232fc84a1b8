"""Remote reads against real servers on loopback: nginx (HTTP), versitygw
(S3), fake-gcs-server (Google Cloud Storage) and Azurite (Azure Blob
Storage)."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from servers import AzuriteServer, GCSServer, Nginx, S3Server

import spdl_go
from spdl_go import ops, sources


def _jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (i % 256, 0, 0)).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "bucket" / "img").mkdir(parents=True)
    for i in range(200):
        (root / "bucket" / "img" / f"{i:04d}.jpg").write_bytes(_jpeg(i))
    with tarfile.open(root / "bucket" / "shard-0.tar", "w") as tf:
        for i in range(10):
            for ext, b in (("jpg", _jpeg(i)), ("cls", str(i % 3).encode())):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(b)
                tf.addfile(info, io.BytesIO(b))
    pq.write_table(
        pa.table({"jpg": [_jpeg(i) for i in range(30)], "label": list(range(30))}),
        root / "bucket" / "t.parquet",
        row_group_size=10,
    )
    return root


@pytest.fixture
def nginx(data: Path, tmp_path: Path):
    work = tmp_path / "nginx"
    work.mkdir()
    srv = Nginx(data, work, rate_kb=16)
    yield srv
    srv.stop()


@pytest.fixture
def s3(data: Path, tmp_path: Path):
    work = tmp_path / "s3"
    work.mkdir()
    srv = S3Server(data, work)
    yield srv
    srv.stop()


@pytest.fixture
def gcs(data: Path, tmp_path: Path, monkeypatch):
    work = tmp_path / "gcs"
    work.mkdir()
    srv = GCSServer(data, work)
    # As the Google client documents it: set when the pipeline is built.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", srv.host)
    yield srv
    srv.stop()


@pytest.fixture
def azure(data: Path, tmp_path: Path):
    work = tmp_path / "azurite"
    work.mkdir()
    srv = AzuriteServer(work)
    srv.create_container("bucket")
    for f in sorted(data.joinpath("bucket").rglob("*")):
        if f.is_file():
            srv.upload("bucket", f.relative_to(data / "bucket").as_posix(), f.read_bytes())
    yield srv
    srv.stop()


def _run(b: spdl_go.PipelineBuilder, **build):
    p = b.add_sink(4).build(**build)
    with p.auto_stop():
        out = list(p)
        return out, p.stats()


def test_http_reads_decode(nginx):
    urls = [f"{nginx.url}/bucket/img/{i:04d}.jpg" for i in range(200)]
    out, st = _run(
        spdl_go.PipelineBuilder()
        .add_source(urls)
        .pipe(ops.read_file(), concurrency=32, output_order="input")
        .pipe(ops.decode_image(), concurrency=2, output_order="input")
    )
    assert len(out) == 200 and not st.recent_errors
    reds = [int(np.from_dlpack(t)[0, 0, 0]) for t in out]
    assert all(abs(r - i) <= 3 for i, r in enumerate(reds))  # in order, each its own image (JPEG is lossy)


def test_missing_url_fails_its_item_naming_it(nginx):
    urls = [f"{nginx.url}/bucket/img/0000.jpg", f"{nginx.url}/bucket/img/nope.jpg"]
    out, st = _run(spdl_go.PipelineBuilder().add_source(urls).pipe(ops.read_file(), name="read"))
    assert len(out) == 1
    assert len(st.recent_errors) == 1 and f"{nginx.url}/bucket/img/nope.jpg: HTTP 404 Not Found" in st.recent_errors[0]


def test_server_stopped_mid_epoch_fails_items_cleanly(nginx):
    urls = [f"{nginx.url}/bucket/img/{i:04d}.jpg" for i in range(200)]
    p = (
        spdl_go.PipelineBuilder()
        .add_source(urls)
        .pipe(ops.read_file(timeout=1, retries=1), concurrency=8, name="read")
        .add_sink(2)
        .build(max_failures=-1)
    )
    got = 0
    t0 = time.time()
    with p.auto_stop():
        for _ in p:
            got += 1
            if got == 50:
                nginx.stop()
        st = p.stats()
    assert 50 <= got < 200
    assert st.failures == 200 - got
    assert any("connection refused" in e and nginx.url in e for e in st.recent_errors), st.recent_errors
    assert time.time() - t0 < 60


def test_slow_responses_complete(nginx, data):
    # 16 KiB/s: a 600-byte JPEG is fast, a 100 KiB file takes about 6 s,
    # longer than the timeout, yet never waits a whole timeout for more
    # bytes. (nginx's limit_rate sends a burst, then sleeps for as long as
    # the burst is worth: up to about 2 s here.)
    (data / "bucket" / "big.bin").write_bytes(bytes(range(256)) * 400)
    out, st = _run(
        spdl_go.PipelineBuilder()
        .add_source([f"{nginx.url}/slow/bucket/big.bin"])
        .pipe(ops.read_file(timeout=4, retries=0))
    )
    assert not st.recent_errors and bytes(out[0]) == bytes(range(256)) * 400


def test_webdataset_over_http_and_s3(nginx, s3):
    for url, kw in [(f"{nginx.url}/bucket/shard-0.tar", {}), ("s3://bucket/shard-0.tar", {"s3": s3.settings()})]:
        src = sources.webdataset(url, required=("jpg", "cls"), decode={"cls": "int"}, **kw)
        out, st = _run(spdl_go.PipelineBuilder().add_source(src))
        assert [s["cls"] for s in out] == [i % 3 for i in range(10)], (url, st.recent_errors)


def test_read_file_and_parquet_from_s3(s3):
    keys = [f"s3://bucket/img/{i:04d}.jpg" for i in range(20)]
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys).pipe(ops.read_file(s3=s3.settings()), concurrency=16))
    assert len(out) == 20 and not st.recent_errors
    src = sources.table("s3://bucket/t.parquet", columns=["label"], scalars=True, s3=s3.settings())
    out, st = _run(spdl_go.PipelineBuilder().add_source(src))
    assert [r["label"] for r in out] == list(range(30)), st.recent_errors
    # Wrong credentials: 403 with S3's message, no retries.
    bad = {**s3.settings(), "secret_key": "wrong"}
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys[:1]).pipe(ops.read_file(s3=bad)))
    assert not out and "s3://bucket/img/0000.jpg: HTTP 403 Forbidden" in st.recent_errors[0]


@pytest.mark.parametrize("level", ["memory", "disk"])
def test_cache_serves_later_epochs_and_restarts(nginx, tmp_path, level):
    urls = [f"{nginx.url}/bucket/img/{i:04d}.jpg" for i in range(100)]
    opts = (
        {"cache_memory_bytes": 1 << 20}
        if level == "memory"
        else {"cache_dir": str(tmp_path / "cache"), "cache_disk_bytes": 1 << 20}
    )

    def build():
        return (
            spdl_go.PipelineBuilder()
            .add_source(urls, continuous=True)
            .pipe(ops.read_file(retries=0, **opts), concurrency=16, name="read")
            .add_sink(4)
            .build(max_failures=-1)
        )

    p = build()
    with p.auto_stop():
        first = sorted(bytes(b) for b in p)
        s1 = p.stats().stages[0].op_stats
        nginx.stop()  # from here on, only the cache can answer
        second = sorted(bytes(b) for b in p)
        s2 = p.stats().stages[0].op_stats
        text = p.stats().format()
    assert len(first) == 100 and second == first
    assert s1["cache_misses"] == 100 and s1["cache_memory_hits"] + s1["cache_disk_hits"] == 0
    hits = "cache_memory_hits" if level == "memory" else "cache_disk_hits"
    assert s2[hits] == 100 and s2["cache_misses"] == 100
    assert f"{hits} 100" in text
    if level == "disk":
        assert s2["cache_disk_bytes"] == sum(map(len, first))
        # A new pipeline (a restarted job) finds the directory's entries.
        p = build()
        with p.auto_stop():
            third = sorted(bytes(b) for b in p)
            assert third == first and p.stats().stages[0].op_stats["cache_disk_hits"] == 100


def test_cache_options_are_checked():
    with pytest.raises(ValueError, match="cache_dir needs cache_disk_bytes"):
        ops.read_file(cache_dir="/tmp/x")
    with pytest.raises(ValueError, match="cache_memory_bytes must be an int >= 0"):
        ops.read_file(cache_memory_bytes=-1)


def test_listing_s3_prefixes_and_globs(s3, data):
    cfg = s3.settings()
    src = sources.files("s3://bucket/img", extensions=".jpg", s3=cfg)
    assert len(src) == 200
    keys = _run(spdl_go.PipelineBuilder().add_source(src))[0]
    assert keys[:2] == ["s3://bucket/img/0000.jpg", "s3://bucket/img/0001.jpg"]
    assert len(sources.files("s3://bucket/img/00[0-4]*.jpg", s3=cfg)) == 50
    # Shards and tables by glob.
    out, st = _run(spdl_go.PipelineBuilder().add_source(sources.webdataset("s3://bucket/shard-*.tar", s3=cfg)))
    assert len(out) == 10, st.recent_errors
    # image_folder: classes are the first level of "directories" (here: img).
    folder = sources.image_folder("s3://bucket/", s3=cfg)
    assert folder.classes == ("img",) and len(folder) == 200
    with pytest.raises(ValueError, match="no objects under s3://bucket/nothing"):
        sources.files("s3://bucket/nothing", s3=cfg)


def test_secrets_stay_out_of_reprs():
    cfg = {
        "endpoint": "http://127.0.0.1:1",
        "access_key": "AKIA-visible",
        "secret_key": "hunter2",
        "session_token": "tok",
    }
    for obj in (
        ops.read_file(s3=cfg),
        sources.webdataset("s3://b/x.tar", s3=cfg),
        sources.table("s3://b/t.parquet", s3=cfg),
    ):
        text = repr(obj)
        assert "hunter2" not in text and "tok'" not in text and "<redacted>" in text and "AKIA-visible" in text


def test_s3_credentials_from_the_environment_set_after_import(s3, tmp_path, monkeypatch):
    # With no s3= settings the AWS SDK's chain finds everything, reading
    # the AWS_* variables as they are when the pipeline is built (set here,
    # long after libspdl loaded): a shared credentials file and a profile
    # in it, and the endpoint.
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    creds = tmp_path / "credentials"
    creds.write_text(f"[train]\naws_access_key_id = {s3.access_key}\naws_secret_access_key = {s3.secret_key}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    monkeypatch.setenv("AWS_REGION", s3.region)
    keys = [f"s3://bucket/img/{i:04d}.jpg" for i in range(5)]
    monkeypatch.setenv("AWS_PROFILE", "nope")
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys).pipe(ops.read_file(), concurrency=4))
    assert not out and "nope" in st.recent_errors[0], st.recent_errors
    monkeypatch.setenv("AWS_PROFILE", "train")
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys).pipe(ops.read_file(), concurrency=4))
    assert len(out) == 5 and not st.recent_errors, st.recent_errors
    # anonymous=True skips the chain: the private bucket says 403.
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys[:1]).pipe(ops.read_file(s3={"anonymous": True})))
    assert not out and "HTTP 403" in st.recent_errors[0], st.recent_errors


def test_s3_settings_are_checked():
    with pytest.raises(ValueError, match="anonymous must be True or False"):
        ops.read_file(s3={"anonymous": "yes"})
    with pytest.raises(ValueError, match="unknown s3 setting"):
        ops.read_file(s3={"bucket": "b"})


def test_gcs_reads_listing_shards_tables_and_cache(gcs, tmp_path):
    # gs:// supports what s3:// does: read_file, listing and globs for
    # files and image_folder, range reads for webdataset and table, and
    # the disk cache; errors name the URL.
    keys = [f"gs://bucket/img/{i:04d}.jpg" for i in range(20)]
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys).pipe(ops.read_file(), concurrency=8))
    assert len(out) == 20 and not st.recent_errors, st.recent_errors
    src = sources.files("gs://bucket/img", extensions=".jpg")
    assert len(src) == 200
    assert len(sources.files("gs://bucket/img/00[0-4]*.jpg")) == 50
    folder = sources.image_folder("gs://bucket/")
    assert folder.classes == ("img",) and len(folder) == 200
    out, st = _run(
        spdl_go.PipelineBuilder().add_source(sources.webdataset("gs://bucket/shard-*.tar", decode={"cls": "int"}))
    )
    assert [s["cls"] for s in out] == [i % 3 for i in range(10)], st.recent_errors
    src = sources.table("gs://bucket/t.parquet", columns=["label"], scalars=True)
    out, st = _run(spdl_go.PipelineBuilder().add_source(src))
    assert [r["label"] for r in out] == list(range(30)), st.recent_errors
    out, st = _run(spdl_go.PipelineBuilder().add_source(["gs://bucket/nope.jpg"]).pipe(ops.read_file()))
    assert not out and "gs://bucket/nope.jpg: HTTP 404" in st.recent_errors[0], st.recent_errors
    with pytest.raises(ValueError, match="no objects under gs://bucket/nothing"):
        sources.files("gs://bucket/nothing")
    cache = {"cache_dir": str(tmp_path / "cache"), "cache_disk_bytes": 1 << 30}
    for _epoch in range(2):
        out, st = _run(spdl_go.PipelineBuilder().add_source(keys).pipe(ops.read_file(**cache), concurrency=8))
        assert len(out) == 20
    assert st.stages[0].op_stats["cache_disk_hits"] == 20, st.stages[0].op_stats
    with pytest.raises(ValueError, match="unknown gcs setting"):
        ops.read_file(gcs={"project": "p"})


def test_azure_reads_listing_shards_tables_and_cache(azure, tmp_path):
    # az:// supports what s3:// does; the connection string is a secret
    # and stays out of reprs.
    cfg = {"connection_string": azure.connection_string()}
    keys = [f"az://bucket/img/{i:04d}.jpg" for i in range(20)]
    op = ops.read_file(azure=cfg)
    assert "AccountKey" not in repr(op) and "<redacted>" in repr(op)
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys).pipe(op, concurrency=8))
    assert len(out) == 20 and not st.recent_errors, st.recent_errors
    assert len(sources.files("az://bucket/img", extensions=".jpg", azure=cfg)) == 200
    assert len(sources.files("az://bucket/img/00[0-4]*.jpg", azure=cfg)) == 50
    folder = sources.image_folder("az://bucket/", azure=cfg)
    assert folder.classes == ("img",) and len(folder) == 200
    src = sources.webdataset("az://bucket/shard-*.tar", decode={"cls": "int"}, azure=cfg)
    out, st = _run(spdl_go.PipelineBuilder().add_source(src))
    assert [s["cls"] for s in out] == [i % 3 for i in range(10)], st.recent_errors
    src = sources.table("az://bucket/t.parquet", columns=["label"], scalars=True, azure=cfg)
    out, st = _run(spdl_go.PipelineBuilder().add_source(src))
    assert [r["label"] for r in out] == list(range(30)), st.recent_errors
    # The account key from the environment, as the Azure tools read it.
    os.environ["AZURE_STORAGE_ACCOUNT"], os.environ["AZURE_STORAGE_KEY"] = azure.account, azure.key
    try:
        out, st = _run(
            spdl_go.PipelineBuilder().add_source(keys[:3]).pipe(ops.read_file(azure={"endpoint": azure.endpoint}))
        )
        assert len(out) == 3, st.recent_errors
    finally:
        del os.environ["AZURE_STORAGE_ACCOUNT"], os.environ["AZURE_STORAGE_KEY"]
    wrong = {"account": azure.account, "endpoint": azure.endpoint, "account_key": "d3Jvbmc="}
    out, st = _run(spdl_go.PipelineBuilder().add_source(keys[:1]).pipe(ops.read_file(azure=wrong)))
    assert not out and "az://bucket/img/0000.jpg: HTTP 403" in st.recent_errors[0], st.recent_errors
    cache = {"cache_dir": str(tmp_path / "cache"), "cache_disk_bytes": 1 << 30}
    for _epoch in range(2):
        out, st = _run(
            spdl_go.PipelineBuilder().add_source(keys).pipe(ops.read_file(azure=cfg, **cache), concurrency=8)
        )
        assert len(out) == 20
    assert st.stages[0].op_stats["cache_disk_hits"] == 20, st.stages[0].op_stats
    with pytest.raises(ValueError, match="unknown azure setting"):
        ops.read_file(azure={"container": "c"})
