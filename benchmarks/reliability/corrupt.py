"""corrupt: damaged inputs through every decoder and source.

Good files are made with pillow, pyarrow and the ffmpeg CLI, then damaged
with a seeded generator (truncation, byte flips, zeroed ranges, wrong
magic, duplicated chunks). Each case runs a group of damaged files with a
good one among them, ``max_failures`` unlimited, and counts:

* crashes (the worker died), hangs (past the case's timeout);
* unnamed errors: a failure whose message names none of the damaged files,
  or a damaged file neither delivered nor named by any failure;
* lost good items: the good file's items not all delivered (failed_checks);
* wrong bytes: a Parquet file written with page checksums, damaged inside
  its pages, delivering a value that differs from the original; or a good
  file delivering different values;
* leaks: engine memory (tensors, Arrow buffers) live after ``close()``.

And three cases of the issue: invalid UTF-8 in a string column with
``scalars=True`` fails one named item; a WAV declaring 1 Hz resampled to
16 kHz fails with a limit error without allocating the GB; a truncated GIF
fails (every truncated GIF of the corpus is checked too).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import corpus

DECODE_TIMEOUT = 60.0


# ---- the worker side -------------------------------------------------------------


def _check_memory(res: dict[str, Any]) -> None:
    res["memory"] = common.engine_memory()
    ok = common.settle(lambda: _engine_clear(), 3.0)
    res["memory_after"] = common.engine_memory()
    res["leak"] = not ok


def _engine_clear() -> bool:
    m = common.engine_memory()
    return m["live_tensors"] == 0 and m["arrow_bytes"] == 0


def _drain(pipeline: Any) -> tuple[list[Any], str]:
    """The items delivered, and the exception that ended the loop (if any)."""
    out: list[Any] = []
    try:
        for item in pipeline:
            out.append(item)
    except Exception as e:  # noqa: BLE001 - the probe judges it
        return out, f"{type(e).__name__}: {e}"
    return out, ""


def w_decode(case: dict[str, Any]) -> dict[str, Any]:
    from spdl_go import PipelineBuilder, ops

    op = {
        "image": lambda: ops.decode_image(),
        "audio": lambda: ops.decode_audio(sample_rate=16000),
        "video": lambda: ops.decode_video(),
    }[case["op"]]()
    files = case["files"]
    p = PipelineBuilder().add_source([(f, i) for i, f in enumerate(files)]).pipe(op, concurrency=2)
    p = p.pipe(lambda x: x[1]).add_sink(4).build(max_failures=-1)
    got, exc = _drain(p)
    failures, errors = common.pipeline_errors(p)
    p.close()
    res = {"delivered": sorted(got), "failures": failures, "errors": errors, "exception": exc}
    del got
    _check_memory(res)
    return res


def _row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    def val(v: Any) -> Any:
        if isinstance(v, (bytes, str, int, float)) or v is None:
            return v
        try:
            return v.to_pyarrow()[0].as_py()  # a 1-row ArrowArray
        except UnicodeDecodeError:
            # an Arrow string that is not UTF-8: invalid Arrow, delivered
            return INVALID_UTF8

    return (val(row["id"]), val(row["payload"]), val(row["text"]))


INVALID_UTF8 = "<invalid UTF-8 delivered as an Arrow string>"


def _file_rows(path: str) -> set[tuple[Any, ...]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.endswith(".arrow"):
        with pa.memory_map(path) as f:
            t = pa.ipc.open_file(f).read_all()
    else:
        t = pq.read_table(path)
    return {(r["id"], r["payload"], r["text"]) for r in t.to_pylist()}


def w_table(case: dict[str, Any]) -> dict[str, Any]:
    from spdl_go import PipelineBuilder, sources

    src = sources.table([case["corrupt"], case["good"]], scalars=case.get("scalars", False))
    p = PipelineBuilder().add_source(src).pipe(_row_key).add_sink(8).build(max_failures=-1)
    got, exc = _drain(p)
    failures, errors = common.pipeline_errors(p)
    p.close()
    good, orig = _file_rows(case["good"]), _file_rows(case["original"])
    res = {
        "rows": len(got),
        "good_expected": len(good),
        "good_delivered": len({r for r in got if r in good}),
        "corrupt_delivered": sum(1 for r in got if r in orig),
        "changed": sum(1 for r in got if r not in good and r not in orig),
        "invalid_utf8": sum(1 for r in got if INVALID_UTF8 in r),
        "duplicates": len(got) - len(set(got)),
        "failures": failures,
        "errors": errors,
        "exception": exc,
    }
    del got
    _check_memory(res)
    return res


def w_shard(case: dict[str, Any]) -> dict[str, Any]:
    import hashlib

    from spdl_go import PipelineBuilder, sources

    def key(s: dict[str, Any]) -> tuple[str, str, str]:
        return (str(s["__url__"]), str(s["__key__"]), hashlib.sha256(bytes(s.get("jpg", b""))).hexdigest())

    src = sources.webdataset([case["corrupt"], case["good"]])
    p = PipelineBuilder().add_source(src).pipe(key).add_sink(8).build(max_failures=-1)
    got, exc = _drain(p)
    failures, errors = common.pipeline_errors(p)
    p.close()
    expected = {tuple(x) for x in case["good_samples"]}
    from_good = [g for g in got if g[0] == case["good"]]
    res = {
        "good_expected": len(expected),
        "good_delivered": len({(k, h) for _, k, h in from_good} & expected),
        "good_wrong": sum(1 for _, k, h in from_good if (k, h) not in expected),
        "corrupt_delivered": len(got) - len(from_good),
        "failures": failures,
        "errors": errors,
        "exception": exc,
    }
    _check_memory(res)
    return res


def w_files(case: dict[str, Any]) -> dict[str, Any]:
    """sources.files -> read_file -> decode_image, the README's pipeline."""
    from spdl_go import PipelineBuilder, ops, sources

    src = sources.files(case["root"], with_index=True)
    b = PipelineBuilder().add_source(src)
    if case["form"] == "dict":  # the name kept beside the bytes, decode_image(name_key="path")
        b = b.pipe(lambda x: {"path": x[0], "index": x[1]})
        b = b.pipe(ops.read_file(key="path", output_key="image"), concurrency=2)
        b = b.pipe(ops.decode_image(key="image"), concurrency=2).pipe(lambda x: x["index"])
    else:  # the README's form: a path, read_file in its place, decode_image
        b = b.pipe(ops.read_file(), concurrency=2).pipe(ops.decode_image(), concurrency=2).pipe(lambda x: x[1])
    p = b.add_sink(4).build(max_failures=-1)
    got, exc = _drain(p)
    failures, errors = common.pipeline_errors(p)
    p.close()
    res = {"delivered": sorted(got), "failures": failures, "errors": errors, "exception": exc}
    _check_memory(res)
    return res


def w_wav_bomb(case: dict[str, Any]) -> dict[str, Any]:
    """Decodes with a watchdog: past ``rss_limit`` the process reports and
    exits, rather than taking the machine's memory."""
    import os
    import threading
    import time

    from spdl_go import PipelineBuilder, ops

    limit = case["rss_limit"]
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            rss = common.proc_status()["rss"]
            peak[0] = max(peak[0], rss)
            if rss > limit:
                print(f"@R-OOM {rss}", flush=True)
                sys.stderr.write(f"wav bomb: RSS {rss >> 20} MiB > {limit >> 20} MiB\n")
                os._exit(3)
            time.sleep(0.01)

    threading.Thread(target=watch, daemon=True).start()
    files = case["files"]
    p = (
        PipelineBuilder()
        .add_source([(f, i) for i, f in enumerate(files)])
        .pipe(ops.decode_audio(sample_rate=16000), concurrency=2)
        .pipe(lambda x: (x[1], list(x[0].shape)))
        .add_sink(2)
        .build(max_failures=-1)
    )
    got, exc = _drain(p)
    failures, errors = common.pipeline_errors(p)
    p.close()
    done.set()
    return {"delivered": got, "failures": failures, "errors": errors, "exception": exc,
            "peak_rss": max(peak[0], common.proc_status()["hwm"])}  # fmt: skip


# ---- the probe side --------------------------------------------------------------


def _judge_named(t: common.Tally, label: str, res: dict[str, Any], corrupt: list[str]) -> None:
    """Every failure names a damaged file; a Python exception out of the
    loop is an epoch lost."""
    if res.get("exception"):
        t.bad("failed_checks", f"{label}: the loop raised (epoch lost): {res['exception'][:300]}")
        if not any(c in res["exception"] for c in corrupt):
            t.bad("unnamed", f"{label}: exception names no file: {res['exception'][:300]}")
    for e in res.get("errors", []):
        if not any(c in e for c in corrupt):
            t.bad("unnamed", f"{label}: error names no damaged file: {e[:300]}")
    if res.get("failures", 0) > len(res.get("errors", [])):
        t.add("errors_not_shown", res["failures"] - len(res.get("errors", [])))
    if res.get("leak"):
        t.bad("leaks", f"{label}: engine memory live after close(): {res.get('memory_after')}")


def _outcome(t: common.Tally, label: str, o: common.Outcome) -> dict[str, Any] | None:
    t.tried += 1
    if o.status == "crash":
        t.bad("crashes", f"{label}: {o.detail[-600:]}")
        return None
    if o.status == "hang":
        t.bad("hangs", f"{label}: {o.detail}")
        return None
    if "traceback" in o.result:
        t.bad("failed_checks", f"{label}: worker error {o.result['exception'][:300]}")
        return None
    return o.result


def run(short: bool, seed: int, tmp: Path) -> common.Tally:
    t = common.Tally("corrupt", seed)
    rng = random.Random(seed)
    nrng = __import__("numpy").random.default_rng(seed)
    per_kind = 4 if short else 160
    group = 8
    d = tmp / "corrupt"
    d.mkdir()
    cases: list[dict[str, Any]] = []
    labels: list[str] = []

    # decoders
    goods: list[tuple[str, str, Path]] = []
    for fmt in corpus.IMAGE_FORMATS:
        p = d / f"good{corpus.IMAGE_EXT[fmt]}"
        corpus.write_image(p, fmt, nrng)
        goods.append(("image", fmt, p))
    for fmt, (ext, _) in corpus.AUDIO_FORMATS.items():
        p = d / f"good{ext}"
        corpus.write_audio(p, fmt)
        goods.append(("audio", fmt, p))
    for fmt, (ext, _) in corpus.VIDEO_FORMATS.items():
        p = d / f"good{ext}"
        corpus.write_video(p, fmt)
        goods.append(("video", fmt, p))
    for op, fmt, good in goods:
        data = good.read_bytes()
        for kind in corpus.MUTATIONS:
            files = []
            for i in range(per_kind):
                p = d / f"{fmt}-{kind}-{i}{good.suffix}"
                p.write_bytes(corpus.mutate(data, kind, rng))
                files.append(str(p))
            for g in range(0, len(files), group):
                part = files[g : g + group]
                mid = len(part) // 2
                cases.append({"kind": "decode", "op": op, "fmt": fmt, "mutation": kind,
                              "files": part[:mid] + [str(good)] + part[mid:]})  # fmt: skip
                labels.append(f"decode {fmt} {kind} #{g // group}")

    # the table source
    trng = random.Random(seed + 1)
    tables_per_kind = 3 if short else 24
    for fmt in ("parquet", "parquet_crc", "arrow"):
        ext = ".arrow" if fmt == "arrow" else ".parquet"
        good = d / f"table-good-{fmt}{ext}"
        corpus.write_table(good, fmt, corpus.table_rows(1_000_000, 48, trng))
        orig = d / f"table-orig-{fmt}{ext}"
        rows = corpus.table_rows(0, 48, trng)
        corpus.write_table(orig, fmt, rows)
        data = orig.read_bytes()
        spans = corpus.value_spans(data, rows["payload"]) if fmt == "parquet_crc" else []  # type: ignore[arg-type]
        for kind in corpus.MUTATIONS:
            for i in range(tables_per_kind):
                p = d / f"table-{fmt}-{kind}-{i}{ext}"
                if spans and kind in ("flip", "zero", "dup"):
                    lo, hi = trng.choice(spans)
                    p.write_bytes(corpus.mutate(data, kind, trng, lo, hi))
                else:
                    p.write_bytes(corpus.mutate(data, kind, trng))
                cases.append({"kind": "table", "fmt": fmt, "mutation": kind, "corrupt": str(p),
                              "good": str(good), "original": str(orig), "in_pages": bool(spans)})  # fmt: skip
                labels.append(f"table {fmt} {kind} #{i}")

    # invalid UTF-8 in a string column, scalars=True
    import pyarrow as pa
    import pyarrow.parquet as pq

    for fmt in ("parquet", "arrow"):
        ext = ".arrow" if fmt == "arrow" else ".parquet"
        texts = [f"ok {i}".encode() for i in range(8)]
        texts[3] = b"bad \xff\xfe utf-8"
        binary = pa.array(texts, pa.binary())
        text = pa.Array.from_buffers(pa.string(), len(binary), binary.buffers())
        bad_t = pa.table({"id": pa.array(range(8), pa.int64()), "payload": pa.array([b"p"] * 8), "text": text})
        bad = d / f"utf8-bad{ext}"
        if fmt == "arrow":
            with pa.OSFile(str(bad), "wb") as sink, pa.ipc.new_file(sink, bad_t.schema) as w:
                w.write_table(bad_t)
        else:
            pq.write_table(bad_t, bad)
        good = d / f"table-good-{'arrow' if fmt == 'arrow' else 'parquet'}{ext}"
        cases.append({"kind": "table", "fmt": fmt, "mutation": "utf8", "corrupt": str(bad), "good": str(good),
                      "original": str(good), "scalars": True, "utf8": True})  # fmt: skip
        labels.append(f"utf8 {fmt} scalars=True")

    # webdataset shards
    srng = random.Random(seed + 2)
    samples = []
    for i in range(8):
        buf = d / "shard-img.jpg"
        corpus.write_image(buf, "jpeg", nrng)
        samples.append((f"{i:06d}", {"jpg": buf.read_bytes(), "cls": str(i).encode()}))
    good_shard = d / "shard-good.tar"
    corpus.write_shard(good_shard, samples)
    import hashlib

    good_samples = [(k, hashlib.sha256(f["jpg"]).hexdigest()) for k, f in samples]
    shard_data = good_shard.read_bytes()
    for kind in corpus.MUTATIONS:
        for i in range(tables_per_kind):
            p = d / f"shard-{kind}-{i}.tar"
            p.write_bytes(corpus.mutate(shard_data, kind, srng))
            cases.append({"kind": "shard", "mutation": kind, "corrupt": str(p), "good": str(good_shard),
                          "good_samples": good_samples})  # fmt: skip
            labels.append(f"webdataset {kind} #{i}")

    # the files source: damaged images, an empty file, a dangling link, a
    # directory named like an image, read with read_file then decoded
    root = d / "files"
    root.mkdir()
    good_files = []
    for fmt in ("jpeg", "png"):
        for i in range(3):
            p = root / f"good-{fmt}-{i}{corpus.IMAGE_EXT[fmt]}"
            corpus.write_image(p, fmt, nrng)
            good_files.append(str(p))
    frng = random.Random(seed + 3)
    bad_files = []
    for kind in corpus.MUTATIONS:
        p = root / f"bad-{kind}.jpg"
        p.write_bytes(corpus.mutate((root / "good-jpeg-0.jpg").read_bytes(), kind, frng))
        bad_files.append(str(p))
    (root / "empty.png").write_bytes(b"")
    (root / "dangling.jpg").symlink_to(root / "nowhere.jpg")
    (root / "dir.jpg").mkdir()
    bad_files += [str(root / "empty.png"), str(root / "dangling.jpg")]
    for form in ("dict", "tuple"):
        cases.append({"kind": "files", "form": form, "root": str(root), "good": good_files, "bad": bad_files})
        labels.append(f"files + read_file + decode_image ({form} items)")

    # a WAV declaring 1 Hz: 48000 samples (a 96 kB file) are 48000 s, 768M
    # samples at 16 kHz (3 GiB of float32); the watchdog stops the worker
    # at 1.5 GiB of RSS
    bomb = d / "bomb-1hz.wav"
    bomb.write_bytes(corpus.wav_header(1, 1, 48000) + bytes(96000))
    good_wav = d / "good.wav"
    cases.append({"kind": "wav_bomb", "files": [str(bomb), str(good_wav)], "rss_limit": 1536 << 20})
    labels.append("wav declaring 1 Hz, resampled to 16 kHz")

    t.figures["cases"] = len(cases)
    outcomes = common.run_cases(__file__, cases, DECODE_TIMEOUT)
    for case, label, o in zip(cases, labels, outcomes, strict=True):
        if case["kind"] == "wav_bomb" and o.status == "crash" and "wav bomb: RSS" in o.detail:
            t.tried += 1
            t.bad("failed_checks", f"{label}: memory not bounded: {o.detail.splitlines()[-1][-200:]}")
            continue
        res = _outcome(t, label, o)
        if res is None:
            continue
        {"decode": _judge_decode, "table": _judge_table, "shard": _judge_shard, "files": _judge_files,
         "wav_bomb": _judge_bomb}[case["kind"]](t, label, case, res)  # fmt: skip
    return t


def _judge_decode(t: common.Tally, label: str, case: dict[str, Any], res: dict[str, Any]) -> None:
    files = case["files"]
    good = next(i for i, f in enumerate(files) if "/good." in f)
    corrupt = [f for i, f in enumerate(files) if i != good]
    _judge_named(t, label, res, corrupt)
    delivered = set(res["delivered"])
    t.add(f"decoded_{case['op']}", len(files))
    t.add("items_failed", res["failures"])
    if good not in delivered:
        t.bad("failed_checks", f"{label}: the good file {files[good]} was lost")
    for i, f in enumerate(files):
        if i == good:
            continue
        named = any(f in e for e in res["errors"])
        if i in delivered:
            t.add("corrupt_decoded_ok", 1)
            if case["mutation"] == "truncate":
                t.add(f"truncated_decoded_ok_{case['fmt']}", 1)
                if case["fmt"] == "gif":
                    t.bad("failed_checks", f"{label}: a truncated GIF decoded as ok ({f})")
        elif not named and res["failures"] <= len(res["errors"]):
            t.bad("unnamed", f"{label}: {f} was neither delivered nor named by an error")


def _judge_table(t: common.Tally, label: str, case: dict[str, Any], res: dict[str, Any]) -> None:
    _judge_named(t, label, res, [case["corrupt"]])
    t.add("table_rows", res["rows"])
    t.add("items_failed", res["failures"])
    if res["good_delivered"] < res["good_expected"]:
        t.bad("failed_checks", f"{label}: {res['good_expected'] - res['good_delivered']} rows of the good file lost")
    if res["duplicates"]:
        t.bad("wrong_bytes", f"{label}: {res['duplicates']} rows delivered twice")
    if res["changed"]:
        if case.get("in_pages"):
            t.bad("wrong_bytes", f"{label}: {res['changed']} rows with changed values from a file with page checksums")
        else:
            t.add(f"changed_rows_undetectable_{case['fmt']}", res["changed"])
    if res["invalid_utf8"]:
        t.bad("failed_checks", f"{label}: {res['invalid_utf8']} rows with a string that is not UTF-8 delivered "
              "as Arrow strings (invalid Arrow: the part should fail, named)")  # fmt: skip
    if case.get("utf8"):
        if res["failures"] != 1 or not any(case["corrupt"] in e for e in res["errors"]):
            t.bad("failed_checks", f"{label}: want one failure naming the file; got {res['failures']} failure(s): "
                  f"{[e[:160] for e in res['errors']]}")  # fmt: skip


def _judge_shard(t: common.Tally, label: str, case: dict[str, Any], res: dict[str, Any]) -> None:
    _judge_named(t, label, res, [case["corrupt"]])
    t.add("shard_samples", res["good_delivered"] + res["corrupt_delivered"])
    t.add("items_failed", res["failures"])
    if res["good_delivered"] < res["good_expected"]:
        t.bad(
            "failed_checks", f"{label}: {res['good_expected'] - res['good_delivered']} samples of the good shard lost"
        )
    if res["good_wrong"]:
        t.bad("wrong_bytes", f"{label}: {res['good_wrong']} samples of the good shard with other bytes")


def _judge_files(t: common.Tally, label: str, case: dict[str, Any], res: dict[str, Any]) -> None:
    _judge_named(t, label, res, case["bad"] + [str(Path(case["root"]) / "dir.jpg")])
    t.add("files_delivered", len(res["delivered"]))
    want = len(case["good"])
    # the good files are decoded; delivered counts good + damaged-but-decodable
    if len(res["delivered"]) < want:
        t.bad("failed_checks", f"{label}: {len(res['delivered'])} delivered, fewer than the {want} good files")


def _judge_bomb(t: common.Tally, label: str, case: dict[str, Any], res: dict[str, Any]) -> None:
    bomb = case["files"][0]
    t.figures["wav_bomb_peak_rss_mb"] = res["peak_rss"] >> 20
    if res.get("exception"):
        t.bad("failed_checks", f"{label}: the loop raised: {res['exception'][:200]}")
    if [d for d in res["delivered"] if d[0] == 0]:
        t.bad("failed_checks", f"{label}: delivered a tensor of {res['delivered'][0][1]} (no output limit)")
    errs = [e for e in res["errors"] if bomb in e]
    if not errs:
        t.bad("failed_checks", f"{label}: no error naming the file: {res['errors']}")
    elif not any(w in e.lower() for e in errs for w in ("limit", "max_", "maximum", "too many", "exceeds")):
        t.bad("failed_checks", f"{label}: the error is not a limit error: {errs[0][:300]}")
    if not any(d[0] == 1 for d in res["delivered"]):
        t.bad("failed_checks", f"{label}: the good WAV next to it was lost")


if __name__ == "__main__":
    common.worker_main({"decode": w_decode, "table": w_table, "shard": w_shard, "files": w_files,
                        "wav_bomb": w_wav_bomb})  # fmt: skip
