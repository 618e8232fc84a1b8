"""Native media ops from Python: probing, and image/audio/video batches."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import spdl_go
from spdl_go import PipelineBuilder, ops

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make test media")


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


def h264(lavfi: str, out: Path, *filters: str) -> None:
    """Encodes a lavfi source as H.264, a keyframe every 4 frames."""
    ffmpeg("-f", "lavfi", "-i", lavfi, *filters, "-c:v", "libx264", "-g", "4", "-pix_fmt", "yuv420p", str(out))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    h264("testsrc=size=64x48:rate=8:duration=3", d / "clip.mp4")
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000:duration=1", str(d / "tone.flac"))
    ffmpeg("-f", "lavfi", "-i", "color=c=0xC81E5A:size=40x30", "-frames:v", "1", str(d / "solid.png"))
    (d / "notes.txt").write_text("not media at all\n" * 10)
    return d


def test_probe_video_audio_image(media):
    v = spdl_go.media.probe(media / "clip.mp4").first("video")
    assert (v.codec, v.width, v.height, v.frames, v.frame_rate) == ("h264", 64, 48, 24, 8.0)
    a = spdl_go.media.probe(media / "tone.flac").first("audio")
    assert (a.codec, a.sample_rate, a.channels) == ("flac", 16000, 1)
    assert abs(a.duration - 1.0) < 0.05 or abs(spdl_go.media.probe(media / "tone.flac").duration - 1.0) < 0.05
    i = spdl_go.media.probe((media / "solid.png").read_bytes(), name="solid.png").first("video")
    assert (i.codec, i.width, i.height) == ("png", 40, 30)


@pytest.mark.parametrize("name,match", [("missing.mp4", "missing.mp4"), ("notes.txt", "notes.txt")])
def test_probe_errors_name_the_file(media, name, match):
    with pytest.raises(ValueError, match=match):
        spdl_go.media.probe(media / name)


def dominant_frequency(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


def test_audio_batches_from_python(media, tmp_path):
    files = []
    for i, f in enumerate([300, 500, 700]):
        p = tmp_path / f"tone{i}.mp3"
        ffmpeg("-f", "lavfi", "-i", f"sine=frequency={f}:sample_rate=22050:duration=1.5", "-ac", "2", str(p))
        files.append((str(p), f))
    p = (
        PipelineBuilder()
        .add_source(files)
        .pipe(
            ops.decode_audio(sample_rate=16000, num_channels=1, num_samples=16000), concurrency=2, output_order="input"
        )
        .aggregate(3)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink()
        .build()
    )
    ((audio, freqs),) = list(p)
    p.close()
    torch = pytest.importorskip("torch")
    a = torch.from_dlpack(audio)
    assert a.shape == (3, 1, 16000) and a.dtype == torch.float32
    assert a.data_ptr() == audio.data_ptr
    want = torch.from_dlpack(freqs).tolist()
    assert want == [300, 500, 700]
    for clip, f in zip(a.numpy(), want, strict=True):
        assert abs(dominant_frequency(clip[0], 16000) - f) < 0.02 * f


def test_audio_lowpass_filter_width(media):
    # A shorter resampling filter (torchaudio's default width) keeps the
    # tone and changes the samples a little; bad widths are refused when
    # the op is made, naming the option.
    from spdl_go import io

    path = str(media / "tone.flac")
    full = np.from_dlpack(io.load_audio(path, sample_rate=8000)).copy()
    short = np.from_dlpack(io.load_audio(path, sample_rate=8000, lowpass_filter_width=6)).copy()
    assert full.shape == short.shape == (1, 8000)
    assert 0 < np.abs(full - short).max() < 0.05
    assert abs(dominant_frequency(short[0], 8000) - 440) < 10
    for bad in (0, 65, 2.5):
        with pytest.raises(ValueError, match="lowpass_filter_width"):
            io.load_audio(path, sample_rate=8000, lowpass_filter_width=bad)


def test_audio_bad_input_fails_its_item_only(media):
    p = (
        PipelineBuilder()
        .add_source([str(media / "tone.flac"), str(media / "notes.txt"), str(media / "nope.wav")])
        .pipe(ops.decode_audio(), name="audio")
        .add_sink()
        .build()
    )
    out = list(p)
    st = p.stats()
    p.close()
    assert len(out) == 1 and out[0].shape == (1, 16000)
    assert st.failures == 2
    errs = "\n".join(st.recent_errors)
    assert "notes.txt" in errs and "nope.wav" in errs


def test_video_clip_batches(tmp_path):
    # A counter video: frame k is gray level 8k, so frame identity is checkable.
    clips = []
    for i in range(2):
        p = tmp_path / f"counter{i}.mp4"
        h264("color=c=black:size=64x48:rate=8:duration=3", p, "-vf", "geq=lum='mod(N*8,256)':cb=128:cr=128")
        clips.append({"video": str(p), "id": i})
    p = (
        PipelineBuilder()
        .add_source(clips)
        .pipe(ops.decode_video(indices=[3, 10, 20], mode="gray", size=(24, 32)), concurrency=2, output_order="input")
        .aggregate(2)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink()
        .build()
    )
    (batch,) = list(p)
    p.close()
    frames = np.from_dlpack(batch["video"])
    assert frames.shape == (2, 3, 24, 32, 1) and frames.dtype == np.uint8
    levels = frames.reshape(2, 3, -1).mean(axis=2)
    # luma 8k in limited range; "gray" is full range: (y - 16) * 255 / 219
    want = [(8 * k - 16) * 255 / 219 for k in (3, 10, 20)]
    for clip_levels in levels:
        np.testing.assert_allclose(clip_levels, want, atol=4)
    assert np.from_dlpack(batch["id"]).tolist() == [0, 1]


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    from PIL import Image

    d = tmp_path_factory.mktemp("jpegs")
    items = []
    for i in range(40):
        h, w = (375, 500) if i % 3 else (500, 375)
        # A solid colour per class, so decoded content is checkable.
        label = i % 4
        colour = [(200, 30, 90), (20, 180, 40), (10, 20, 230), (128, 128, 128)][label]
        img = np.empty((h, w, 3), np.uint8)
        img[:] = colour
        path = d / f"img{i:03d}.jpg"
        Image.fromarray(img).save(path, quality=95)
        items.append((str(path), label, colour))
    return items


def test_imagenet_style_pipeline_yields_torch_batches(jpegs):
    torch = pytest.importorskip("torch")
    p = (
        PipelineBuilder()
        .add_source([(path, label) for path, label, _ in jpegs])
        .pipe(
            ops.decode_image(short_side=256, crop="center", crop_size=(224, 224)), concurrency=2, output_order="input"
        )
        .aggregate(32)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink(buffer_size=2)
        .build(num_threads=3)
    )
    batches = list(p)
    p.close()
    assert [b[0].shape for b in batches] == [(32, 224, 224, 3), (8, 224, 224, 3)]
    images, labels = batches[0]
    x, y = torch.from_dlpack(images), torch.from_dlpack(labels)
    assert x.dtype == torch.uint8 and x.data_ptr() == images.data_ptr  # zero-copy
    assert y.dtype == torch.int64 and y.tolist() == [label for _, label, _ in jpegs[:32]]
    for k in range(32):
        mean = x[k].float().mean(dim=(0, 1))
        assert torch.allclose(mean, torch.tensor(jpegs[k][2], dtype=torch.float32), atol=4), (k, mean)


def test_image_transforms_chain(jpegs):
    p = (
        PipelineBuilder()
        .add_source([{"path": path, "label": label} for path, label, _ in jpegs[:4]])
        .pipe(ops.read_file(key="path", output_key="image"))
        .pipe(ops.decode_image())
        .pipe(ops.random_resized_crop((64, 64), seed=1, rng_key="path"))
        .pipe(ops.random_hflip(seed=1))
        .pipe(ops.normalize())
        .aggregate(4)
        .pipe(ops.collate())
        .add_sink()
        .build()
    )
    (batch,) = list(p)
    p.close()
    x = np.from_dlpack(batch["image"])
    assert x.shape == (4, 3, 64, 64) and x.dtype == np.float32
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    want = (np.array(jpegs[0][2], np.float32) / 255 - mean) / std
    np.testing.assert_allclose(x[0].mean(axis=(1, 2)), want, atol=0.05)
    import pyarrow as pa

    assert pa.array(batch["label"]).to_pylist() == [0, 1, 2, 3]


def test_corrupt_image_fails_only_its_item(jpegs, media):
    good = jpegs[0][0]
    truncated = media / "truncated.jpg"
    truncated.write_bytes(Path(good).read_bytes()[:300])
    p = (
        PipelineBuilder()
        .add_source([good, str(truncated), str(media / "notes.txt"), str(media / "solid.png")])
        .pipe(ops.decode_image(), name="decode")
        .add_sink()
        .build()
    )
    out = list(p)
    errs = "\n".join(p.stats().recent_errors)
    p.close()
    assert sorted(t.shape for t in out) == [(30, 40, 3), (500, 375, 3)]
    assert "truncated.jpg" in errs and "notes.txt" in errs
    png = next(t for t in out if t.shape == (30, 40, 3))
    from PIL import Image

    np.testing.assert_array_equal(np.from_dlpack(png), np.asarray(Image.open(media / "solid.png").convert("RGB")))


def test_decode_error_names_the_file_read_in_the_path_s_place(tmp_path):
    # sources.files yields (path, index); read_file() puts the bytes where
    # the path was, so only the bytes reach decode_image: its failure must
    # still name the file they were read from.
    from PIL import Image

    from spdl_go import sources

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "good.png")
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    (tmp_path / "empty.png").write_bytes(b"")
    p = (
        PipelineBuilder()
        .add_source(sources.files(str(tmp_path / "*.png"), with_index=True))
        .pipe(ops.read_file())
        .pipe(ops.decode_image())
        .add_sink(2)
        .build(max_failures=-1)
    )
    try:
        assert len(list(p)) == 1
        errors = p.stats().recent_errors
        assert len(errors) == 2, errors
        for name in ("bad.png", "empty.png"):
            assert sum(str(tmp_path / name) in e for e in errors) == 1, errors
    finally:
        p.close()
