"""spdl_go.io, the eager API: each loader gives what its op gives in a
pipeline, with the same errors; the plain-format parsers agree with numpy,
wave and tarfile; every entry point survives corrupt input (truncated,
flipped, zero bytes, wrong extension, bombs) with an error naming it; and
calls run in parallel from many threads without the GIL."""

from __future__ import annotations

import io as pyio
import logging
import shutil
import struct
import subprocess
import tarfile
import threading
import time
import wave
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import spdl_go
from spdl_go import PipelineBuilder, ops
from spdl_go import io as sio

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make test media")


def run_op(items: list, op: ops.NativeOp) -> list[np.ndarray]:
    p = PipelineBuilder().add_source(items).pipe(op, output_order="input").add_sink().build()
    with p.auto_stop():
        return [np.from_dlpack(x) for x in p]


def gradient(h: int, w: int, c: int = 3, dtype: str = "uint8") -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    planes = [(x * 7 + y * 3 + k * 50) % 256 for k in range(c)]
    return np.stack(planes, -1).astype(dtype)


def png_bytes(a: np.ndarray) -> bytes:
    b = pyio.BytesIO()
    Image.fromarray(a).save(b, format="PNG")
    return b.getvalue()


def jpeg_bytes(a: np.ndarray, quality: int = 90) -> bytes:
    b = pyio.BytesIO()
    Image.fromarray(a).save(b, format="JPEG", quality=quality)
    return b.getvalue()


def flip(b: bytes, at: int) -> bytes:
    x = bytearray(b)
    for i in range(at, min(at + 16, len(x))):
        x[i] ^= 0xFF
    return bytes(x)


# ---- load_image / load_audio / load_video: the ops, eagerly -------------------


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    out = []
    for i, (h, w) in enumerate([(40, 60), (64, 48), (33, 77)]):
        a = gradient(h, w)
        p = tmp_path / f"img{i}.{'png' if i % 2 else 'jpg'}"
        p.write_bytes(png_bytes(a) if i % 2 else jpeg_bytes(a))
        out.append(p)
    return out


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"mode": "gray"}, {"size": (20, 30)}, {"short_side": 24, "crop": "center", "crop_size": 16}],
)
def test_load_image_is_decode_image(images, kwargs, no_leaks):
    want = run_op([str(p) for p in images], ops.decode_image(**kwargs))
    for p, w in zip(images, want, strict=True):
        assert np.array_equal(np.from_dlpack(sio.load_image(p, **kwargs)), w)
        assert np.array_equal(np.from_dlpack(sio.load_image(p.read_bytes(), **kwargs)), w)


def test_load_image_returns_a_zero_copy_tensor(images):
    t = sio.load_image(images[1])
    assert isinstance(t, spdl_go.Tensor) and t.shape == (64, 48, 3) and t.dtype == "uint8"
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr
    torch = pytest.importorskip("torch")
    assert torch.from_dlpack(t).data_ptr() == t.data_ptr


def test_load_image_errors_are_the_ops(images, tmp_path):
    with pytest.raises(ValueError, match='mode "cmyk"'):
        sio.load_image(images[0], mode="cmyk")
    with pytest.raises(TypeError):
        sio.load_image(images[0], no_such_option=1)
    with pytest.raises(RuntimeError, match="missing.jpg"):
        sio.load_image(tmp_path / "missing.jpg")
    with pytest.raises(TypeError, match="path"):
        sio.load_image(123)  # type: ignore[arg-type]


def _bomb_png(w: int, h: int) -> bytes:
    """A PNG header declaring w x h pixels, followed by a little data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")
    )


def test_load_image_corrupt_inputs(images, tmp_path):
    good = images[0].read_bytes()
    cases = {
        "zero.jpg": b"",
        "truncated.jpg": good[: len(good) // 3],
        "flipped.jpg": flip(good, 2),  # the SOI/APP markers
        "text.jpg": b"this is not an image at all" * 10,
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(RuntimeError, match=name.replace(".", r"\.")):
            sio.load_image(p)
        with pytest.raises(RuntimeError, match=name.replace(".", r"\.")):
            sio.load_image(data, name=name)
    # A PNG named .jpg decodes: formats are sniffed, not taken from the name.
    wrong = tmp_path / "really_a_png.jpg"
    wrong.write_bytes(images[1].read_bytes())
    assert np.array_equal(np.from_dlpack(sio.load_image(wrong)), np.from_dlpack(sio.load_image(images[1])))
    # A bomb: 100k x 100k pixels declared; refused before allocating.
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_bomb_png(100_000, 100_000))
    with pytest.raises(RuntimeError, match="bomb.png"):
        sio.load_image(bomb)
    with pytest.raises(RuntimeError, match="bomb.png"):
        sio.load_image(_bomb_png(1000, 1000), max_pixels=10_000, name="bomb.png")


def write_wav(path: Path, rate: int, n: int, channels: int = 1) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        samples = (np.sin(np.arange(n * channels) * 0.05) * 10000).astype("<i2")
        w.writeframes(samples.tobytes())
    return path


def test_load_audio_is_decode_audio(tmp_path, no_leaks):
    p = write_wav(tmp_path / "a.wav", 8000, 8000, channels=2)
    for kwargs in [{}, {"sample_rate": 16000, "num_channels": 1}, {"start": 0.25, "duration": 0.5}]:
        (want,) = run_op([str(p)], ops.decode_audio(**kwargs))
        assert np.array_equal(np.from_dlpack(sio.load_audio(p, **kwargs)), want)
        assert np.array_equal(np.from_dlpack(sio.load_audio(p.read_bytes(), **kwargs)), want)
    # SPDL's timestamp=(start, end) is start and duration.
    (want,) = run_op([str(p)], ops.decode_audio(start=0.25, duration=0.5))
    assert np.array_equal(np.from_dlpack(sio.load_audio(p, (0.25, 0.75))), want)
    with pytest.raises(ValueError, match="not both"):
        sio.load_audio(p, (0.0, 1.0), start=0.5)
    with pytest.raises(ValueError, match="max_samples"):
        sio.load_audio(p, max_samples=0)
    with pytest.raises(RuntimeError, match=r"a\.wav.*over max_samples \(100\)"):
        sio.load_audio(p, max_samples=100)


def test_load_audio_corrupt_inputs(tmp_path):
    good = write_wav(tmp_path / "good.wav", 8000, 4000).read_bytes()
    for name, data in {"zero.wav": b"", "truncated.wav": good[:30], "flipped.wav": flip(good, 0)}.items():
        with pytest.raises(RuntimeError, match=name.replace(".", r"\.")):
            sio.load_audio(data, name=name)


@needs_ffmpeg
def test_load_video_is_decode_video(tmp_path, no_leaks):
    clip = tmp_path / "clip.mp4"
    subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=8:duration=2"]
        + ["-c:v", "libx264", "-pix_fmt", "yuv420p", str(clip)],
        check=True,
    )
    for kwargs in [{"num_frames": 4}, {"indices": [0, 5, 9], "size": (24, 32)}]:
        (want,) = run_op([str(clip)], ops.decode_video(**kwargs))
        assert np.array_equal(np.from_dlpack(sio.load_video(clip, **kwargs)), want)
        assert np.array_equal(np.from_dlpack(sio.load_video(clip.read_bytes(), **kwargs)), want)
    assert sio.load_video(clip, (0.5, 1.0)).shape == (4, 48, 64, 3)
    assert sio.probe(clip).first("video").width == 64
    with pytest.raises(RuntimeError, match="clip.mp4"):
        sio.load_video(clip, max_output_bytes=1000)
    data = clip.read_bytes()
    for name, bad in {"zero.mp4": b"", "truncated.mp4": data[:200], "flipped.mp4": flip(data, 0)}.items():
        with pytest.raises(RuntimeError, match=name.replace(".", r"\.")):
            sio.load_video(bad, name=name)


# ---- load_image_batch -----------------------------------------------------------


def test_load_image_batch(images, no_leaks):
    batch = sio.load_image_batch(images, size=(20, 30), num_threads=2)
    assert batch.shape == (3, 20, 30, 3)
    got = np.from_dlpack(batch)
    for i, p in enumerate(images):
        assert np.array_equal(got[i], np.from_dlpack(sio.load_image(p, size=(20, 30))))
    # SPDL's width and height.
    assert sio.load_image_batch([p.read_bytes() for p in images], width=30, height=20).shape == (3, 20, 30, 3)
    assert sio.load_image_batch(images, short_side=16, crop="center", crop_size=16, mode="gray").shape == (3, 16, 16, 1)


def test_load_image_batch_errors(images, caplog):
    with pytest.raises(ValueError, match="empty"):
        sio.load_image_batch([], size=(8, 8))
    with pytest.raises(ValueError, match="both width and height"):
        sio.load_image_batch(images, width=8)
    with pytest.raises(RuntimeError, match="a batch needs one size"):
        sio.load_image_batch(images)
    srcs = [images[0], b"junk", images[1]]
    with pytest.raises(RuntimeError, match=r"item 1 \(<4 bytes>\)"):
        sio.load_image_batch(srcs, size=(8, 8))
    with pytest.raises(RuntimeError, match=r"item 1 \(junk.jpg\)"):
        sio.load_image_batch(srcs, size=(8, 8), names=["a", "junk.jpg", "b"])
    with caplog.at_level(logging.WARNING, logger="spdl_go.io"):
        batch = sio.load_image_batch(srcs, size=(8, 8), strict=False)
    assert batch.shape == (2, 8, 8, 3)
    assert "item 1" in caplog.text
    with pytest.raises(RuntimeError, match="every item failed"):
        sio.load_image_batch([b"", b"x"], size=(8, 8), strict=False)


# ---- threads and the GIL -----------------------------------------------------------


def test_many_threads_at_once(images, no_leaks):
    want = [np.from_dlpack(sio.load_image(p, size=(16, 16))).copy() for p in images]
    npy = pyio.BytesIO()
    np.save(npy, np.arange(1000, dtype="float32"))
    npy_bytes = npy.getvalue()

    def work(i: int) -> None:
        k = i % len(images)
        assert np.array_equal(np.from_dlpack(sio.load_image(images[k], size=(16, 16))), want[k])
        assert np.from_dlpack(sio.load_npy(npy_bytes))[999] == 999
        assert sio.load_image_batch(images, size=(8, 8), num_threads=2).shape == (3, 8, 8, 3)

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(work, range(200)))


def test_calls_release_the_gil(tmp_path):
    # A call that takes a while; a Python thread must keep running all along
    # it. Holding the GIL, the call would let the thread run for at most one
    # switch interval (5 ms): a few of the 10 ms buckets below, not most.
    big = tmp_path / "big.png"
    big.write_bytes(png_bytes(gradient(1000, 1000)))
    done = threading.Event()
    seen: set[int] = set()

    def count() -> None:
        while not done.is_set():
            seen.add(int(time.perf_counter() * 100))

    t = threading.Thread(target=count)
    t.start()
    time.sleep(0.02)
    try:
        start = time.perf_counter()
        sio.load_image_batch([big] * 16, num_threads=1)
        end = time.perf_counter()
    finally:
        done.set()
        t.join()
    buckets = range(int(start * 100) + 1, int(end * 100))
    assert len(buckets) >= 8, f"the call took only {end - start:.3f} s"
    ran = sum(b in seen for b in buckets)
    assert ran >= len(buckets) // 2, (ran, len(buckets))


# ---- encode_image / save_image -----------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [gradient(30, 40), gradient(30, 40, 4), gradient(30, 40, 1)[..., 0], gradient(30, 40, 1), gradient(7, 5) * 0],
    ids=["rgb", "rgba", "gray2d", "gray3d", "black"],
)
def test_png_round_trip(array, tmp_path):
    data = sio.encode_image(array, "png")
    back = np.asarray(Image.open(pyio.BytesIO(data)))
    assert np.array_equal(back, array.reshape(back.shape))
    sio.save_image(tmp_path / "x.png", array)
    assert (tmp_path / "x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if array.ndim == 3 and array.shape[2] == 3:
        assert np.array_equal(np.from_dlpack(sio.load_image(tmp_path / "x.png")), array)


def test_png_16bit_and_bgr():
    g16 = (np.arange(600, dtype="uint16") * 109).reshape(20, 30)
    back = np.asarray(Image.open(pyio.BytesIO(sio.encode_image(g16, "png"))))
    assert back.dtype.kind in "iu" and np.array_equal(back.astype("uint16"), g16)
    rgb = gradient(10, 12)
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    back = np.asarray(Image.open(pyio.BytesIO(sio.encode_image(bgr, "png", pix_fmt="bgr24"))))
    assert np.array_equal(back, rgb)


def test_jpeg_encode(tmp_path):
    y, x = np.mgrid[0:64, 0:80]
    a = np.stack([x * 3, y * 3, (x + y) * 1.5], -1).astype("uint8")  # smooth
    hi = sio.encode_image(a, "jpeg", quality=95)
    lo = sio.encode_image(a, "jpeg", quality=20)
    assert hi[:2] == b"\xff\xd8" and len(lo) < len(hi)
    back = np.asarray(Image.open(pyio.BytesIO(hi))).astype(int)
    assert np.abs(back - a).mean() < 1.5
    # As good as Pillow's libjpeg-turbo at the same settings.
    pil = pyio.BytesIO()
    Image.fromarray(a).save(pil, format="JPEG", quality=95, subsampling="4:2:0")
    ref = np.asarray(Image.open(pil)).astype(int)
    assert np.abs(back - a).mean() <= np.abs(ref - a).mean() * 1.05 + 0.05
    # Our decoder reads it back the same as Pillow does (both libjpeg-turbo).
    assert np.array_equal(np.from_dlpack(sio.load_image(hi)), back.astype("uint8"))
    # Non-contiguous inputs and torch tensors work.
    strided = gradient(64, 160)[:, ::2]
    assert np.asarray(Image.open(pyio.BytesIO(sio.encode_image(strided, "png")))).tolist() == strided.tolist()
    torch = pytest.importorskip("torch")
    assert sio.encode_image(torch.from_numpy(a), "jpeg", quality=95) == hi
    # save_image picks the format from the extension.
    sio.save_image(tmp_path / "x.JPG", a, quality=95)
    assert (tmp_path / "x.JPG").read_bytes() == hi
    g = sio.encode_image(gradient(8, 8, 1), "jpeg")
    assert Image.open(pyio.BytesIO(g)).mode == "L"


def test_encode_errors(tmp_path):
    for bad, match in [
        (np.zeros((4, 4, 3), "float32"), "uint8"),
        (np.zeros((4, 4, 2), "uint8"), "shape"),
        (np.zeros((4,), "uint8"), "shape"),
        (np.zeros((0, 4, 3), "uint8"), "cannot be encoded"),
        (np.zeros((4, 4), "uint16"), "JPEG holds 8-bit"),
    ]:
        with pytest.raises(ValueError, match=match):
            sio.encode_image(bad, "jpeg")
    with pytest.raises(ValueError, match="quality"):
        sio.encode_image(gradient(4, 4), "jpeg", quality=101)
    with pytest.raises(ValueError, match='format must be "jpeg" or "png"'):
        sio.encode_image(gradient(4, 4), "gif")
    with pytest.raises(ValueError, match="extension"):
        sio.save_image(tmp_path / "x.gif", gradient(4, 4))
    with pytest.raises(ValueError, match="__dlpack__"):
        sio.encode_image([[1, 2], [3, 4]], "png")


# ---- load_npy / load_npz -------------------------------------------------------------


def npy_bytes(a: np.ndarray) -> bytes:
    b = pyio.BytesIO()
    np.save(b, a)
    return b.getvalue()


@pytest.mark.parametrize(
    "array",
    [
        np.arange(24, dtype="float32").reshape(2, 3, 4),
        np.asfortranarray(np.arange(24, dtype="int64").reshape(2, 3, 4)),
        np.arange(12, dtype=">i4").reshape(3, 4),
        np.array([True, False, True]),
        np.float64(3.5),
        np.zeros((0, 3), dtype="uint16"),
        np.arange(10, dtype="float16"),
        np.arange(5, dtype="uint8"),
    ],
    ids=["f32", "fortran", "bigendian", "bool", "scalar", "empty", "f16", "u8"],
)
def test_load_npy_matches_numpy(array, tmp_path, no_leaks):
    data = npy_bytes(np.asarray(array))
    got = np.from_dlpack(sio.load_npy(data))
    assert got.shape == np.shape(array) and np.array_equal(got, array)
    assert got.dtype == np.asarray(array).dtype.newbyteorder("=")
    (tmp_path / "a.npy").write_bytes(data)
    assert np.array_equal(np.from_dlpack(sio.load_npy(tmp_path / "a.npy")), array)
    assert np.array_equal(np.from_dlpack(sio.load_npy(bytearray(data))), array)
    assert np.array_equal(np.from_dlpack(sio.load_npy(memoryview(data))), array)


def test_load_npy_corrupt(tmp_path):
    good = npy_bytes(np.arange(100, dtype="float64").reshape(10, 10))
    npz = pyio.BytesIO()
    np.savez(npz, x=np.arange(3))
    cases = {
        "zero bytes": (b"", "empty input"),
        "truncated data": (good[:-8], "truncated data"),
        "truncated header": (good[:20], "truncated header"),
        "flipped header": (flip(good, 20), "npy"),
        "wrong format (an npz)": (npz.getvalue(), "not a .npy file"),
        "object dtype": (npy_bytes(np.array([{}], dtype=object)), "unsupported dtype"),
        "unicode dtype": (npy_bytes(np.array(["a"])), "unsupported dtype"),
        "bomb shape": (good.replace(b"(10, 10)", b"(10**9,)")[: len(good)], "npy"),
    }
    for data, match in cases.values():
        with pytest.raises(ValueError, match=match):
            sio.load_npy(data)
    bad = tmp_path / "bad.npy"
    bad.write_bytes(good[:-8])
    with pytest.raises(ValueError, match="bad.npy"):
        sio.load_npy(bad)


def test_load_npz(tmp_path, no_leaks):
    x, y = np.arange(10), np.sin(np.arange(12.0)).reshape(3, 4)
    for save in (np.savez, np.savez_compressed):
        b = pyio.BytesIO()
        save(b, x=x, y=y)
        d = sio.load_npz(b.getvalue())
        assert list(d) == ["x", "y"]
        assert np.array_equal(np.from_dlpack(d["x"]), x) and np.array_equal(np.from_dlpack(d["y"]), y)
        (tmp_path / "a.npz").write_bytes(b.getvalue())
        assert np.array_equal(np.from_dlpack(sio.load_npz(tmp_path / "a.npz")["y"]), y)


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    b = pyio.BytesIO()
    with zipfile.ZipFile(b, "w", method) as z:
        for k, v in members.items():
            z.writestr(k, v)
    return b.getvalue()


def test_load_npz_limit_and_corrupt():
    # 64 MiB of zeros: about 64 KiB compressed.
    bomb = _zip({"z.npy": npy_bytes(np.zeros(64 << 20, "uint8"))})
    assert len(bomb) < 1 << 20
    before = spdl_go.memory_stats()["live_bytes"]
    with pytest.raises(ValueError, match=r"over max_uncompressed_bytes \(1000000\)"):
        sio.load_npz(bomb, max_uncompressed_bytes=1_000_000)
    assert spdl_go.memory_stats()["live_bytes"] <= before
    assert np.from_dlpack(sio.load_npz(bomb, max_uncompressed_bytes=80 << 20)["z"]).shape == (64 << 20,)
    with pytest.raises(ValueError, match=">= 0"):
        sio.load_npz(bomb, max_uncompressed_bytes=-1)
    # The same bomb with its declared sizes rewritten small: inflating stops there.
    liar = bytearray(bomb)
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = liar.index(sig)
        liar[i + at : i + at + 4] = struct.pack("<I", 100)
    with pytest.raises(ValueError, match="z.npy"):
        sio.load_npz(bytes(liar), max_uncompressed_bytes=1_000_000)
    good = _zip({"x.npy": npy_bytes(np.arange(1000))})
    corrupt = bytearray(good)
    corrupt[60] ^= 0xFF  # inside the compressed data: a checksum or inflate error
    cases = {
        "zero bytes": (b"", "empty input"),
        "truncated": (good[: len(good) // 2], "not a zip archive"),
        "flipped": (bytes(corrupt), "x.npy"),
        "wrong format (an npy)": (npy_bytes(np.arange(3)), "not a zip archive"),
        "not npy members": (_zip({"x.txt": b"hello"}), "not an .npy file"),
        "bad npy member": (_zip({"x.npy": b"\x93NUMPY garbage"}, zipfile.ZIP_STORED), 'member "x.npy"'),
    }
    for data, match in cases.values():
        with pytest.raises(ValueError, match=match):
            sio.load_npz(data)


# ---- load_wav ----------------------------------------------------------------------------


def raw_wav(fmt: int, channels: int, rate: int, bits: int, data: bytes) -> bytes:
    fmt_chunk = struct.pack("<HHIIHH", fmt, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + b"data" + struct.pack("<I", len(data))
    return b"RIFF" + struct.pack("<I", len(body) + len(data)) + body + data


def test_load_wav(tmp_path, no_leaks):
    p = write_wav(tmp_path / "s.wav", 8000, 800, channels=2)
    with wave.open(str(p)) as w:
        want = np.frombuffer(w.readframes(800), "<i2").reshape(800, 2)
    got = np.from_dlpack(sio.load_wav(p.read_bytes()))
    assert got.dtype == np.int16 and np.array_equal(got, want)
    assert np.array_equal(np.from_dlpack(sio.load_wav(p)), want)
    assert np.array_equal(np.from_dlpack(sio.load_wav(p, 0.01, 0.02)), want[80:240])
    assert np.array_equal(np.from_dlpack(sio.load_wav(p, time_offset_seconds=0.05)), want[400:])
    f = np.linspace(-1, 1, 30, dtype="<f4").reshape(10, 3)
    assert np.array_equal(np.from_dlpack(sio.load_wav(raw_wav(3, 3, 100, 32, f.tobytes()))), f)
    u8 = np.arange(20, dtype="uint8").reshape(20, 1)
    assert np.array_equal(np.from_dlpack(sio.load_wav(raw_wav(1, 1, 100, 8, u8.tobytes()))), u8)


def test_load_wav_corrupt():
    good = raw_wav(1, 2, 8000, 16, bytes(400))
    cases = {
        "zero bytes": (b"", "empty input"),
        "truncated": (good[:-10], "truncated"),
        "flipped": (flip(good, 0), "not a RIFF WAVE"),
        "wrong format (a png)": (png_bytes(gradient(4, 4)), "not a RIFF WAVE"),
        "24-bit": (raw_wav(1, 1, 8000, 24, bytes(30)), "24 bits"),
        "mu-law": (raw_wav(7, 1, 8000, 8, bytes(30)), "format code"),
    }
    for data, match in cases.values():
        with pytest.raises(ValueError, match=match):
            sio.load_wav(data)
    with pytest.raises(ValueError, match="past the end"):
        sio.load_wav(good, 10.0)
    with pytest.raises(ValueError, match="finite"):
        sio.load_wav(good, float("nan"))
    with pytest.raises(ValueError, match="duration_seconds must be >= 0"):
        sio.load_wav(good, 0.0, -1.0)


# ---- iter_tarfile ------------------------------------------------------------------------


def tar_bytes(files: dict[str, bytes]) -> bytes:
    b = pyio.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as t:
        d = tarfile.TarInfo("dir")
        d.type = tarfile.DIRTYPE
        t.addfile(d)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, pyio.BytesIO(data))
    return b.getvalue()


def test_iter_tarfile(tmp_path):
    files = {"dir/a.jpg": b"jpeg bytes", "dir/a.cls": b"3", "x" * 150 + ".txt": b"long name", "empty": b""}
    data = tar_bytes(files)
    got = list(sio.iter_tarfile(data))
    assert [(n, bytes(v)) for n, v in got] == list(files.items())
    assert all(isinstance(v, memoryview) for _, v in got)
    assert [(n, v) for n, v in sio.iter_tarfile(pyio.BytesIO(data))] == list(files.items())
    (tmp_path / "a.tar").write_bytes(data)
    assert [(n, v) for n, v in sio.iter_tarfile(tmp_path / "a.tar")] == list(files.items())
    with tarfile.open(fileobj=pyio.BytesIO(data)) as t:
        assert [m.name for m in t.getmembers() if m.isfile()] == [n for n, _ in got]


def test_iter_tarfile_corrupt():
    good = tar_bytes({"a.jpg": b"x" * 1000, "b.jpg": b"y" * 10})
    bad_header = bytearray(good)
    # Blocks: the directory's header, a.jpg's header, its 1000 bytes in two
    # blocks, b.jpg's header at 2048.
    bad_header[2048 + 100] ^= 0xFF  # b.jpg's mode: its checksum fails
    cases = {
        "zero bytes": (b"", "empty input"),
        "truncated contents": (good[: 1024 + 300], "truncated"),
        "truncated header": (good[: 2048 + 200], "truncated"),
        "flipped header": (bytes(bad_header), "tar"),
        "wrong format (a zip)": (_zip({"x.npy": b"1" * 600}), "not a tar archive"),
    }
    for data, match in cases.values():
        with pytest.raises(ValueError, match=match):
            list(sio.iter_tarfile(data))


# ---- probe ---------------------------------------------------------------------------------


def test_probe(images, tmp_path):
    info = sio.probe(images[1])
    assert info.first("video") is not None and info.first("video").width == 48
    wav = write_wav(tmp_path / "a.wav", 8000, 800)
    a = sio.probe(wav.read_bytes(), name="a.wav").first("audio")
    assert a is not None and a.sample_rate == 8000
    for name, data in {"zero.wav": b"", "junk.wav": b"not media " * 50, "truncated.wav": wav.read_bytes()[:20]}.items():
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            sio.probe(data, name=name)
    with pytest.raises(ValueError, match="missing.mp4"):
        sio.probe(tmp_path / "missing.mp4")
