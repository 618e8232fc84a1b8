"""The demo (``python -m spdl_go.demo``): its dataset, its crop parameters,
its failure budget, and a short end-to-end run whose printed output is checked."""

import math
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest

import spdl_go
from spdl_go import demo

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

BROKEN = {
    "broken-truncated.jpg": "truncated image data",
    "broken-empty.jpg": "empty input",
    "broken-not-a-jpeg.jpg": "not an image",
    "broken-garbage.jpg": "corrupt image data",
}


def test_generate_writes_class_folders_and_broken_files_once(tmp_path):
    root, broken = demo.generate(tmp_path, 20, seed=1, threads=2)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert classes == [f"class{c:02d}" for c in range(demo.CLASSES)]
    good = sorted(root.glob("*/img*.jpg"))
    assert len(good) == 20
    sizes = set()
    for path in good:
        with Image.open(path) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            assert 320 <= max(im.size) <= 800 and min(im.size) >= 180, (path, im.size)
            sizes.add(im.size)
            im.load()
    assert len(sizes) > 10  # varied sizes, not one
    assert sorted(p.name for p in broken) == sorted(BROKEN)
    for path in broken:
        with pytest.raises(OSError):
            with Image.open(path) as im:
                im.load()

    # Reused: nothing is rewritten.
    stamps = {p: p.stat().st_mtime_ns for p in root.rglob("*.jpg")}
    assert demo.generate(tmp_path, 20, seed=1) == (root, broken)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*.jpg")} == stamps

    # An interrupted generation (no completion marker) is done again.
    (root / demo._DONE).unlink()
    good[0].unlink()
    demo.generate(tmp_path, 20, seed=1, threads=1)
    assert good[0].exists() and (root / demo._DONE).exists()


def test_generated_images_depend_only_on_seed_and_index(tmp_path):
    a, _ = demo.generate(tmp_path / "a", 12, seed=3, threads=1)
    b, _ = demo.generate(tmp_path / "b", 12, seed=3, threads=2)
    c, _ = demo.generate(tmp_path / "c", 12, seed=4, threads=2)
    names = sorted(p.relative_to(a) for p in a.rglob("img*.jpg"))
    assert all((a / n).read_bytes() == (b / n).read_bytes() for n in names)
    assert any((a / n).read_bytes() != (c / n).read_bytes() for n in names)


def test_generate_refuses_fewer_images_than_classes(tmp_path):
    with pytest.raises(ValueError, match="at least 10"):
        demo.generate(tmp_path, 3)


@pytest.mark.parametrize(
    "width, height, fallback",
    [
        (500, 375, None),
        (375, 500, None),
        (64, 64, None),
        (2000, 10, (10, 13)),  # too wide for any ratio: torchvision's centre fallback, h = height, w = h * 4/3
        (10, 2000, (13, 10)),  # too tall: w = width, h = w / (3/4)
    ],
)
def test_random_resized_crop_params_follow_torchvision(width, height, fallback):
    rng = np.random.default_rng(0)
    for _ in range(200):
        top, left, h, w = demo._rrc_params(rng, width, height)
        assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
        if fallback is None:
            # sqrt rounding moves area and aspect by at most a pixel a side
            assert demo.SCALE[0] * width * height * 0.9 <= h * w <= demo.SCALE[1] * width * height
            assert demo.RATIO[0] * 0.9 <= w / h <= demo.RATIO[1] * 1.1
        else:
            assert (h, w) == fallback and top == (height - h) // 2 and left == (width - w) // 2


def _broken_folder(root, good_per_class, broken_per_class):
    src = Image.fromarray(np.full((40, 60, 3), 128, np.uint8))
    for c in range(3):
        d = root / f"c{c}"
        d.mkdir(parents=True)
        for i in range(good_per_class):
            src.save(d / f"ok{i}.jpg")
        for i in range(broken_per_class):
            (d / f"bad{i}.jpg").write_bytes(b"<html>not found</html>")
    return root


def test_pipeline_fails_few_bad_files_alone_and_stops_on_a_broken_folder(tmp_path):
    few = _broken_folder(tmp_path / "few", 40, 1)  # 3 of 123: under the 5% budget
    p = demo.spdl_go_pipeline(few, crop=16, batch_size=8, threads=2, seed=0)
    with p.auto_stop():
        batches = list(p)
        st = p.stats()
    p.close()
    assert sum(len(np.from_dlpack(labels)) for _, labels in batches) == 120
    assert np.from_dlpack(batches[0][0]).shape[1:] == (16, 16, 3)
    assert st.failures == 3
    named = set(re.findall(r"c\d/bad0\.jpg", "\n".join(st.recent_errors)))
    assert len(st.recent_errors) == 3 and named == {"c0/bad0.jpg", "c1/bad0.jpg", "c2/bad0.jpg"}

    bad = _broken_folder(tmp_path / "bad", 4, 40)  # mostly broken: the budget stops the epoch
    p = demo.spdl_go_pipeline(bad, crop=16, batch_size=8, threads=2, seed=0)
    with pytest.raises(spdl_go.PipelineFailure, match="decode\\+crop"):
        with p.auto_stop():
            list(p)
    p.close()


def _floats(pattern, text):
    return [float(m.replace(",", "")) for m in re.findall(pattern, text)]


def test_demo_runs_end_to_end(tmp_path):
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "spdl_go.demo", "--images", "60", "--epochs", "3", "--batch-size", "8"]
    cmd += ["--crop", "32", "--threads", "2", "--workers", "1", "--data", str(tmp_path)]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert re.search(r"dataset: 64 files in 10 class folders .*\(generated in", out), out

    rates = {}
    for name in ("spdl-go", "DataLoader"):
        epochs = re.findall(rf"  {name} epoch\s+\d/3: (\d+) images in [\d.]+s = ([\d,]+) images/s, loss ([\d.]+)", out)
        assert [int(n) for n, _, _ in epochs] == [60, 60, 60], out
        rates[name] = [float(r.replace(",", "")) for _, r, _ in epochs]
        losses = [float(loss) for _, _, loss in epochs]
        assert all(math.isfinite(x) for x in losses)
        assert losses[-1] < losses[0], (name, losses)
    # Epochs alternate between the loaders.
    order = re.findall(r"  (spdl-go|DataLoader) epoch", out)
    assert order == ["spdl-go", "DataLoader"] * 3, order

    # The stats table: the decode stage saw every file and failed the broken ones; a bottleneck is named.
    assert re.search(r"decode\+crop\s+2\s+64\s+60\s+4\s", out), out
    assert re.search(r"\n  bottleneck: \S", out), out
    # Each broken file is named with its reason, by both loaders.
    ours = out[out.index("spdl-go failed items: 4 in that epoch") : out.index("DataLoader failed items: 4")]
    theirs = out[out.index("DataLoader failed items: 4") : out.index("\nimages/s ")]
    for name, reason in BROKEN.items():
        assert re.search(rf"\n  stage \"decode\+crop\".*{name}.*{reason}", ours), (name, ours)
        assert re.search(rf"\n  \S*{name}: \w+", theirs), (name, theirs)

    rows = {}
    for row in ("training loop", "loader alone, no model"):
        m = re.search(rf"  {row}\s+([\d,]+)\s+([\d,]+)\s+x([\d.]+)", out)
        assert m, (row, out)
        rows[row] = [float(g.replace(",", "")) for g in m.groups()]
        assert all(x > 0 for x in rows[row]), (row, rows[row])
    # Training: the median epoch after the first, and the median of the epoch pairs' ratios.
    ours, theirs, ratio = rows["training loop"]
    assert ours == pytest.approx(statistics.median(rates["spdl-go"][1:]), abs=1)  # printed rounded
    assert theirs == pytest.approx(statistics.median(rates["DataLoader"][1:]), abs=1)
    pairs = [a / b for a, b in zip(rates["spdl-go"][1:], rates["DataLoader"][1:], strict=True)]
    assert ratio == pytest.approx(statistics.median(pairs), rel=0.03, abs=0.01)
    assert re.search(r"engine memory after close: 0 bytes live", out), out
