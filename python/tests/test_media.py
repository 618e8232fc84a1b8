"""Native media ops from Python: probing, and image/audio/video batches."""

import shutil
import subprocess

import numpy as np
import pytest

import spdl_go
from spdl_go import PipelineBuilder, ops

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make test media")


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=8:duration=3", "-c:v", "libx264", "-g", "4", "-pix_fmt", "yuv420p", str(d / "clip.mp4"))
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
