"""Reading many small objects over HTTP: spdl-go's concurrent reads against
a PyTorch DataLoader whose workers fetch with urllib, and the read cache's
second epoch against its first.

The server is nginx on loopback (started here, as the tests start it),
answering each request after --latency-ms (20 ms by default, about an
object store's time to first byte; nginx's echo module) with objects of
16-64 KiB (deterministic random bytes). Every configuration reads every
object once per epoch, in batches of 32, and checks the byte count.

Configurations:

* spdl-go c=N: ops.read_file() at concurrency N (goroutines; N requests in
  flight) -> aggregate(32);
* DataLoader w=N: a map-style Dataset whose __getitem__ is
  urllib.request.urlopen(url).read() (a connection per request),
  num_workers N, batch_size 32; "DataLoader+requests w=N" keeps one
  requests.Session per worker (connections reused), when requests is
  installed;
* spdl-go cache (memory|disk), epoch 2: the same read_file with a cache,
  timing the second epoch only (the first fills the cache).

Then the same objects from three object stores on loopback, each serving
a copy of the directory as a bucket or container, with no added latency,
so these rows measure the client's and the server's CPU per object on the
same machine (the servers are single processes: versitygw and
fake-gcs-server in Go, Azurite in node):

* spdl-go S3|GCS|Azure c=N: ops.read_file() of s3://bench/obj/...,
  gs://bench/obj/... or az://bench/obj/... at concurrency N (the AWS SDK
  for Go v2, Google's Go client, azblob; credentials and endpoints from
  the environment, set for the run: AWS_*, STORAGE_EMULATOR_HOST,
  AZURE_STORAGE_CONNECTION_STRING);
* DataLoader+boto3|google-cloud-storage|azure-storage-blob w=N: a
  map-style Dataset whose __getitem__ reads the object with the store's
  Python SDK, one client per worker process (made after the fork), when
  the package is installed.

Each run is a fresh process (benchmarks/harness.py); median of --repeat.

    python benchmarks/bench_remote.py [--objects 2000] [--latency-ms 20] [--repeat 3]
        [--json benchmarks/results/remote.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python" / "tests"))  # servers.py: nginx on loopback

import harness  # noqa: E402

BATCH = 32


def _urls(base: str, n: int) -> list[str]:
    return [f"{base}/lat/obj/{i:05d}.bin" for i in range(n)]


# Object stores: scheme, row label, the Python SDK of the DataLoader rows.
STORES = {"s3": ("S3", "boto3"), "gs": ("GCS", "google-cloud-storage"), "az": ("Azure", "azure-storage-blob")}


def _cloud_names(scheme: str, n: int) -> list[str]:
    return [f"{scheme}://bench/obj/{i:05d}.bin" for i in range(n)]


def _count(total: list[int]):
    def count(batch) -> int:
        total[0] += sum(len(b) for b in batch)
        return len(batch)

    return count


def spdl_go_batches(urls: list[str], concurrency: int, cache: dict | None = None, warm: bool = False):
    import spdl_go
    from spdl_go import ops

    p = (
        spdl_go.PipelineBuilder()
        .add_source(urls, continuous=warm)  # warm: two epochs
        .pipe(ops.read_file(**(cache or {})), concurrency=concurrency, name="read")
        .aggregate(BATCH)
        .add_sink(4)
        .build(num_threads=concurrency + 1)
    )
    try:
        if warm:
            for _ in p:  # the first epoch fills the cache
                pass
        yield from p
        st = p.stats().stages[0].op_stats
        if cache:
            print(json.dumps({"op_stats": st}), file=sys.stderr)
    finally:
        p.close()


class UrlDataset:
    def __init__(self, urls: list[str], session: bool) -> None:
        self.urls, self.session, self._s = urls, session, None

    def __len__(self) -> int:
        return len(self.urls)

    def __getitem__(self, i: int) -> bytes:
        if self.session:
            if self._s is None:  # one per worker process, made after the fork
                import requests

                self._s = requests.Session()
            r = self._s.get(self.urls[i], timeout=30)
            r.raise_for_status()
            return r.content
        import urllib.request

        with urllib.request.urlopen(self.urls[i], timeout=30) as r:
            return r.read()


def dataloader_batches(urls: list[str], workers: int, session: bool = False):
    import torch.utils.data

    dl = torch.utils.data.DataLoader(
        UrlDataset(urls, session),
        batch_size=BATCH,
        num_workers=workers,
        collate_fn=list,
        prefetch_factor=4 if workers else None,
    )
    yield from dl


class CloudDataset:
    """Map-style dataset reading s3://, gs:// or az:// names with the
    store's Python SDK: one client per worker process, made on first use
    (after the fork), configured from the same environment as spdl-go's."""

    def __init__(self, names: list[str]) -> None:
        self.names, self._read = names, None

    def __len__(self) -> int:
        return len(self.names)

    def _client(self, scheme: str):
        import os

        if scheme == "s3":
            import boto3

            c = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], region_name=os.environ["AWS_REGION"])
            return lambda b, k: c.get_object(Bucket=b, Key=k)["Body"].read()
        if scheme == "gs":
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            g = storage.Client(project="bench", credentials=AnonymousCredentials())
            return lambda b, k: g.bucket(b).blob(k).download_as_bytes()
        from azure.storage.blob import BlobServiceClient

        a = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
        return lambda b, k: a.get_blob_client(b, k).download_blob().readall()

    def __getitem__(self, i: int) -> bytes:
        scheme, rest = self.names[i].split("://", 1)
        if self._read is None:
            self._read = self._client(scheme)
        bucket, key = rest.split("/", 1)
        return self._read(bucket, key)


def worker(kind: str, param: str, base: str, n: str, size: str) -> None:
    # Cloud kinds are "spdl-go-<scheme>" and "dataloader-<scheme>".
    scheme = kind.rsplit("-", 1)[-1]
    urls = _cloud_names(scheme, int(n)) if scheme in STORES else _urls(base, int(n))
    total = [0]
    if kind in ("spdl-go", "spdl-go-s3", "spdl-go-gs", "spdl-go-az"):
        batches = spdl_go_batches(urls, int(param))
    elif kind == "dataloader":
        batches = dataloader_batches(urls, int(param))
    elif kind in ("dataloader-s3", "dataloader-gs", "dataloader-az"):
        import torch.utils.data

        batches = iter(
            torch.utils.data.DataLoader(
                CloudDataset(urls),
                batch_size=BATCH,
                num_workers=int(param),
                collate_fn=list,
                prefetch_factor=4 if int(param) else None,
            )
        )
    elif kind == "dataloader-requests":
        batches = dataloader_batches(urls, int(param), session=True)
    elif kind == "cache":
        d = tempfile.mkdtemp(prefix="spdl-go-cache-")
        cache = {"cache_memory_bytes": 1 << 30} if param == "memory" else {"cache_dir": d, "cache_disk_bytes": 1 << 30}
        # Timed from the second epoch: build and fill outside the timer.
        gen = spdl_go_batches(urls, 64, cache, warm=True)
        first = next(gen)

        def chain():
            yield first
            yield from gen

        batches = chain()
    else:
        raise ValueError(kind)
    row = harness.measure(batches, _count(total), int(n))
    if total[0] != int(size):
        raise AssertionError(f"read {total[0]} bytes, want {size}")
    row["mb_per_s"] = total[0] / row["wall_s"] / 1e6
    print(json.dumps(row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--_worker", nargs=5)
    args = ap.parse_args()
    if args._worker:
        worker(*args._worker)
        return
    import numpy as np
    from servers import Nginx

    work = Path(tempfile.mkdtemp(prefix="spdl-go-bench-remote-"))
    (work / "root" / "obj").mkdir(parents=True)
    (work / "nginx").mkdir()
    rng = np.random.default_rng(0)
    size = 0
    for i in range(args.objects):
        b = rng.integers(0, 256, int(rng.integers(16 << 10, 64 << 10)), dtype=np.uint8).tobytes()
        (work / "root" / "obj" / f"{i:05d}.bin").write_bytes(b)
        size += len(b)
    srv = Nginx(work / "root", work / "nginx", latency_ms=args.latency_ms)
    skipped: dict[str, str] = {}
    try:
        cfgs = [(f"spdl-go c={c}", "spdl-go", str(c)) for c in (16, 64, 256)]
        cfgs += [(f"DataLoader w={w}", "dataloader", str(w)) for w in (2, 4, 8, 16)]
        try:
            import requests  # noqa: F401

            cfgs += [(f"DataLoader+requests w={w}", "dataloader-requests", str(w)) for w in (4, 16)]
        except ImportError:
            skipped["DataLoader+requests"] = "requests is not installed"
        cfgs += [("spdl-go cache memory, epoch 2", "cache", "memory"), ("spdl-go cache disk, epoch 2", "cache", "disk")]
        runs = harness.run_all(__file__, cfgs, [srv.url, str(args.objects), str(size)], args.repeat, 600, skipped)
    finally:
        srv.stop()
    runs.update(_cloud_section(work, args, size, skipped))
    rows = harness.median_rows(runs)
    print(
        f"\n{args.objects} objects, {size / 1e6:.1f} MB, {args.latency_ms:g} ms latency per HTTP request"
        f" (none added for the object stores); median of {args.repeat}\n"
    )
    print(harness.markdown_table(rows, "objects", skipped))
    best_dl = max((r["items_per_s"], n) for n, r in rows.items() if n.startswith("DataLoader w=") or "requests" in n)
    best_go = max((r["items_per_s"], n) for n, r in rows.items() if n.startswith("spdl-go c="))
    print(f"\nHTTP: best spdl-go ({best_go[1]}) / best DataLoader ({best_dl[1]}): x{best_go[0] / best_dl[0]:.2f}")
    for name in ("spdl-go cache memory, epoch 2", "spdl-go cache disk, epoch 2"):
        if name in rows:
            print(f"{name} / {best_go[1]} (epoch 1 from the server): x{rows[name]['items_per_s'] / best_go[0]:.2f}")
    for label, sdk in STORES.values():
        go = [(r["items_per_s"], n) for n, r in rows.items() if n.startswith(f"spdl-go {label} ")]
        dl = [(r["items_per_s"], n) for n, r in rows.items() if n.startswith(f"DataLoader+{sdk} ")]
        if go and dl:
            g, d = max(go), max(dl)
            print(f"{label}: best spdl-go ({g[1]}) / best DataLoader+{sdk} ({d[1]}): x{g[0] / d[0]:.2f}")
    if args.json:
        harness.write_results(
            args.json,
            {"objects": args.objects, "bytes": size, "latency_ms": args.latency_ms, "repeat": args.repeat},
            rows,
            runs,
            skipped,
            "Remote reads",
            "objects",
        )


def _cloud_section(work: Path, args, size: int, skipped: dict[str, str]) -> dict:
    """The object-store rows: versitygw and fake-gcs-server over a copy
    (hard links) of the objects as bucket "bench", and Azurite with them
    uploaded to container "bench". Each store's variables are set while its
    rows run (their processes inherit them)."""
    import os

    from servers import AzuriteServer, GCSServer, S3Server

    (work / "bucket" / "bench" / "obj").mkdir(parents=True)
    for f in (work / "root" / "obj").iterdir():
        os.link(f, work / "bucket" / "bench" / "obj" / f.name)
    runs: dict = {}
    for scheme, (label, sdk) in STORES.items():
        state = work / f"{scheme}-server"
        state.mkdir()
        try:
            if scheme == "s3":
                srv = S3Server(work / "bucket", state)
                env = {
                    "AWS_ACCESS_KEY_ID": srv.access_key,
                    "AWS_SECRET_ACCESS_KEY": srv.secret_key,
                    "AWS_REGION": srv.region,
                    "AWS_ENDPOINT_URL_S3": srv.endpoint,
                }
            elif scheme == "gs":
                srv = GCSServer(work / "bucket", state)
                env = {"STORAGE_EMULATOR_HOST": f"http://{srv.host}"}  # the Python client wants the scheme
            else:
                srv = AzuriteServer(state)
                srv.create_container("bench")
                for f in sorted((work / "root" / "obj").iterdir()):
                    srv.upload("bench", f"obj/{f.name}", f.read_bytes())
                env = {"AZURE_STORAGE_CONNECTION_STRING": srv.connection_string()}
        except BaseException as e:  # noqa: BLE001  (server missing; pytest.skip is a BaseException)
            skipped[label] = f"its server could not start: {e}"
            continue
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            cfgs = [(f"spdl-go {label} c={c}", f"spdl-go-{scheme}", str(c)) for c in (16, 64)]
            module = {"s3": "boto3", "gs": "google.cloud.storage", "az": "azure.storage.blob"}[scheme]
            try:
                __import__(module)
                cfgs += [(f"DataLoader+{sdk} w={w}", f"dataloader-{scheme}", str(w)) for w in (4, 16)]
            except ImportError:
                skipped[f"DataLoader+{sdk}"] = f"{sdk} is not installed"
            runs.update(harness.run_all(__file__, cfgs, ["-", str(args.objects), str(size)], args.repeat, 600, skipped))
        finally:
            srv.stop()
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return runs


if __name__ == "__main__":
    main()
