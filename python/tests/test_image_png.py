"""decode_image on PNGs against Pillow: 8-bit pixels identical, alpha kept
by mode="rgba", 16-bit samples kept by dtype="uint16"."""

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spdl_go import PipelineBuilder, ops

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from datasets import _png_write  # noqa: E402  (the benchmark's 16-bit PNG writer)


def decode_all(paths: list[str], **opts) -> list[np.ndarray]:
    p = PipelineBuilder().add_source(paths).pipe(ops.decode_image(**opts), output_order="input").add_sink().build()
    try:
        return [np.from_dlpack(t).copy() for t in p]
    finally:
        p.close()


def photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Smooth fields plus noise: every PNG filter type gets chosen."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) * 127 // (h + w)], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    d = tmp_path_factory.mktemp("png")
    rng = np.random.default_rng(3)
    rgb = photo(rng, 181, 243)
    alpha = rng.integers(0, 256, (181, 243), dtype=np.uint8)
    files = {
        "rgb": Image.fromarray(rgb),
        "rgba": Image.fromarray(np.dstack([rgb, alpha])),
        "gray": Image.fromarray(rgb[..., 0]),
        "la": Image.fromarray(np.dstack([rgb[..., 1], alpha]), "LA"),
        "palette": Image.fromarray(rgb).quantize(64),
        "interlaced": Image.fromarray(rgb),
    }
    out = {}
    for name, im in files.items():
        path = d / f"{name}.png"
        im.save(path, interlace=name == "interlaced", **({"transparency": 5} if name == "palette" else {}))
        out[name] = str(path)
    return out


@pytest.mark.parametrize("name", ["rgb", "rgba", "gray", "la", "palette", "interlaced"])
@pytest.mark.parametrize("mode", ["rgb", "rgba", "gray"])
def test_8bit_png_matches_pillow(pngs, name, mode):
    (got,) = decode_all([pngs[name]], mode=mode)
    im = Image.open(pngs[name])
    want = np.asarray(im.convert({"rgb": "RGB", "rgba": "RGBA", "gray": "L"}[mode]))
    if mode == "gray":
        want = want[..., None]
    if mode == "gray" and im.mode not in ("L", "LA"):
        # Pillow's L is the same ITU-R 601-2 luma but rounds its fixed point
        # differently: at most 1 apart.
        assert np.abs(got.astype(int) - want).max() <= 1
    else:
        np.testing.assert_array_equal(got, want)


def test_jpeg_rgba_is_opaque(tmp_path):
    rgb = photo(np.random.default_rng(1), 64, 80)
    Image.fromarray(rgb).save(tmp_path / "a.jpg", quality=90)
    (rgba,) = decode_all([str(tmp_path / "a.jpg")], mode="rgba")
    (plain,) = decode_all([str(tmp_path / "a.jpg")])
    assert rgba.shape == (64, 80, 4) and (rgba[..., 3] == 255).all()
    np.testing.assert_array_equal(rgba[..., :3], plain)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_16bit_png_to_uint16_is_exact(tmp_path, channels):
    rng = np.random.default_rng(channels)
    a = rng.integers(0, 65536, (37, 51, channels), dtype=np.uint16)
    path = tmp_path / "a16.png"
    _png_write(path, a[..., 0] if channels == 1 else a)
    mode = {1: "gray", 3: "rgb", 4: "rgba"}[channels]
    (got,) = decode_all([str(path)], mode=mode, dtype="uint16")
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, a)
    if channels == 1:
        # Pillow reads 16-bit gray as I;16.
        np.testing.assert_array_equal(got[..., 0], np.asarray(Image.open(path)))
    # uint8 rounds each sample; a centre crop of uint16 is the same pixels.
    (u8,) = decode_all([str(path)], mode=mode)
    np.testing.assert_array_equal(u8, ((a.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8))
    (crop,) = decode_all([str(path)], mode=mode, dtype="uint16", crop="center", crop_size=(20, 30))
    np.testing.assert_array_equal(crop, a[8:28, 10:40])


def test_uint16_batches_mixed_depths(tmp_path, pngs):
    a = np.random.default_rng(0).integers(0, 65536, (181, 243, 3), dtype=np.uint16)
    _png_write(tmp_path / "wide.png", a)
    p = (
        PipelineBuilder()
        .add_source([pngs["rgb"], str(tmp_path / "wide.png")])
        .pipe(ops.decode_image(dtype="uint16", crop="center", crop_size=64), output_order="input")
        .aggregate(2)
        .pipe(ops.collate())
        .add_sink()
        .build()
    )
    (batch,) = list(p)
    p.close()
    x = np.from_dlpack(batch)
    assert x.shape == (2, 64, 64, 3) and x.dtype == np.uint16
    rgb8 = np.asarray(Image.open(pngs["rgb"]))
    np.testing.assert_array_equal(x[0], rgb8[58:122, 90:154].astype(np.uint16) * 257)
    np.testing.assert_array_equal(x[1], a[58:122, 90:154])


@pytest.mark.parametrize(
    "opts,match",
    [({"dtype": "uint16", "short_side": 8}, "uint16 cannot be resized"), ({"dtype": "float32"}, '"dtype" must be')],
)
def test_bad_options_fail_at_build(opts, match):
    with pytest.raises(ValueError, match=match):
        PipelineBuilder().add_source([]).pipe(ops.decode_image(**opts)).add_sink().build()


def test_corrupt_16bit_png_fails_its_item_only(tmp_path, pngs):
    a = np.random.default_rng(5).integers(0, 65536, (40, 50, 3), dtype=np.uint16)
    _png_write(tmp_path / "good.png", a)
    data = (tmp_path / "good.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    bomb = bytearray(data)
    bomb[16:24] = (60000).to_bytes(4, "big") * 2
    (tmp_path / "bomb.png").write_bytes(bytes(bomb))
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "png.jpg").write_bytes(data)  # wrong extension: sniffed, decoded
    paths = [str(tmp_path / n) for n in ("good.png", "cut.png", "bomb.png", "empty.png", "png.jpg")]
    p = (
        PipelineBuilder()
        .add_source(paths)
        .pipe(ops.decode_image(dtype="uint16", mode="rgba"), name="decode", output_order="input")
        .add_sink()
        .build(max_failures=-1)
    )
    out = [np.from_dlpack(t) for t in p]
    errs = "\n".join(p.stats().recent_errors)
    p.close()
    assert len(out) == 2
    for x in out:
        np.testing.assert_array_equal(x[..., :3], a)
        assert (x[..., 3] == 65535).all()
    assert "cut.png" in errs and "truncated" in errs
    assert "bomb.png" in errs and "60000x60000" in errs
    assert "empty.png" in errs
