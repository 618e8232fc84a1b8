"""decode_video decodes only what the sampled frames need (skipping frames
nothing shown references, jumping over keyframes) and returns the same
frames as a full decode; it applies rotation and pixel aspect when asked,
and does not take an MP3's cover art for a video."""

import shutil
import subprocess

import numpy as np
import pytest

from spdl_go import PipelineBuilder, media, ops

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg CLI to make test media")


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


def has_encoder(name: str) -> bool:
    out = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True).stdout
    return any(line.split()[1:2] == [name] for line in out.splitlines() if line.strip())


def decode(path, op):
    """Runs op on one file in a pipeline; returns its frames as numpy."""
    p = PipelineBuilder().add_source([str(path)]).pipe(op).add_sink().build()
    try:
        (out,) = list(p)
        return np.from_dlpack(out).copy()
    finally:
        p.close()


def decode_error(path, op) -> str:
    """Runs op on one file that must fail; returns the error recorded."""
    p = PipelineBuilder().add_source([str(path)]).pipe(op).add_sink().build()
    try:
        assert list(p) == []
        st = p.stats()
        assert st.failures == 1
        return "\n".join(st.recent_errors)
    finally:
        p.close()


CLIPS = {
    # B-frames (b-pyramid), a GOP of 12: 8 GOPs.
    "bframes.mp4": ["-g", "12", "-bf", "3", "-x264-params", "b-pyramid=normal:scenecut=0"],
    # Open GOPs: leading B-frames reference the GOP before.
    "opengop.mp4": ["-x264-params", "open-gop=1:keyint=12:min-keyint=12:scenecut=0:bframes=3"],
}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    if not has_encoder("libx264"):
        pytest.skip("ffmpeg has no libx264")
    d = tmp_path_factory.mktemp("fast")
    for name, args in CLIPS.items():
        ffmpeg(
            "-f", "lavfi", "-i", "testsrc2=s=96x64:r=25:d=4,noise=alls=12:allf=t",
            "-c:v", "libx264", "-pix_fmt", "yuv420p", *args, str(d / name),
        )  # fmt: skip
    return d


@pytest.mark.parametrize("name", sorted(CLIPS))
@pytest.mark.parametrize(
    "indices",
    [[0, 14, 28, 43, 57, 71, 85, 99], [99, 0, 50, 13, 13, 26, 77], [11, 12, 13, 23, 24, 25], [60], [1, 2, 3]],
)
def test_sampled_frames_equal_a_full_decode(clips, name, indices):
    full = decode(clips / name, ops.decode_video())
    assert full.shape == (100, 64, 96, 3)
    got = decode(clips / name, ops.decode_video(indices=indices))
    np.testing.assert_array_equal(got, full[indices])


def test_num_frames_resized_equal_a_full_decode(clips):
    full = decode(clips / "bframes.mp4", ops.decode_video(size=(32, 48)))
    got = decode(clips / "bframes.mp4", ops.decode_video(num_frames=8, size=(32, 48)))
    ks = [(2 * i * 99 + 7) // 14 for i in range(8)]
    np.testing.assert_array_equal(got, full[ks])


def test_rotation_and_sar(tmp_path):
    if not has_encoder("libx264"):
        pytest.skip("ffmpeg has no libx264")
    base = tmp_path / "base.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=64x48:r=8:d=1", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(base))
    rot = tmp_path / "rot.mp4"
    # A display matrix of 90 degrees clockwise. FFmpeg 5's CLI writes it from
    # the "rotate" tag (which it reads counter-clockwise); FFmpeg 6 and later
    # ignore that tag and take -display_rotation (counter-clockwise) instead.
    ffmpeg("-i", str(base), "-c", "copy", "-metadata:s:v:0", "rotate=270", str(rot))
    if media.probe(str(rot)).streams[0].rotation != 90:
        rot.unlink()
        ffmpeg("-display_rotation:v:0", "270", "-i", str(base), "-c", "copy", str(rot))
    assert media.probe(str(rot)).streams[0].rotation == 90
    plain = decode(rot, ops.decode_video(indices=[0, 3]))
    turned = decode(rot, ops.decode_video(indices=[0, 3], apply_rotation=True))
    assert plain.shape == (2, 48, 64, 3) and turned.shape == (2, 64, 48, 3)
    np.testing.assert_array_equal(turned, np.rot90(plain, k=-1, axes=(1, 2)))
    assert decode(rot, ops.decode_video(num_frames=1, apply_rotation=True, size=(20, 10))).shape == (1, 20, 10, 3)

    sar = tmp_path / "sar.mp4"
    ffmpeg(
        "-f", "lavfi", "-i", "testsrc2=s=64x48:r=8:d=1,setsar=4/3", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(sar)
    )
    assert decode(sar, ops.decode_video(num_frames=2)).shape == (2, 48, 64, 3)
    assert decode(sar, ops.decode_video(num_frames=2, apply_sar=True)).shape == (2, 48, 85, 3)


def test_cover_art_is_not_a_video(tmp_path):
    if not has_encoder("libmp3lame"):
        pytest.skip("ffmpeg has no libmp3lame")
    cover = tmp_path / "cover.png"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=32x32", "-frames:v", "1", str(cover))
    mp3 = tmp_path / "song.mp3"
    ffmpeg(
        "-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-i", str(cover), "-map", "0", "-map", "1",
        "-c:a", "libmp3lame", "-c:v", "png", "-disposition:v", "attached_pic", str(mp3),
    )  # fmt: skip
    msg = decode_error(mp3, ops.decode_video(num_frames=1))
    assert str(mp3) in msg and "cover art" in msg
    audio = decode(mp3, ops.decode_audio())
    assert audio.shape[-1] > 40000


def test_option_types(clips):
    with pytest.raises(Exception, match="apply_rotation"):
        decode(clips / "bframes.mp4", ops.decode_video(apply_rotation="yes"))  # type: ignore[arg-type]
