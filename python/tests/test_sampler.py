"""sources.sampler: seeded per-epoch order and distributed split, in Go."""

import pytest

from spdl_go import PipelineBuilder, ops, sources


def build(src, *stages):
    # Continuous: these tests read epoch after epoch (a new order each).
    b = PipelineBuilder().add_source(src, continuous=True)
    for s in stages:
        b = b.pipe(s, output_order="input")
    return b.add_sink(4).build()


@pytest.mark.parametrize("n,world,drop_last", [(23, 3, False), (23, 3, True), (24, 4, False), (5, 8, False)])
def test_ranks_split_every_epoch_without_overlap(n, world, drop_last, no_leaks):
    pipes = [
        build(sources.sampler(n, shuffle=True, seed=3, rank=r, world_size=world, drop_last=drop_last))
        for r in range(world)
    ]
    for _epoch in range(2):
        per_rank = [list(p) for p in pipes]
        assert len({len(x) for x in per_rank}) == 1, "ranks got different counts"
        seen = [i for x in per_rank for i in x]
        if drop_last:
            assert len(seen) == len(set(seen)) == n - n % world
        else:
            assert set(seen) == set(range(n))
            assert len(seen) == -(-n // world) * world  # padded by repeating a few
    for p in pipes:
        p.close()


def test_order_depends_on_seed_and_epoch(no_leaks):
    p = build(sources.sampler(100, shuffle=True, seed=1))
    e0, e1 = list(p), list(p)
    assert sorted(e0) == sorted(e1) == list(range(100))
    assert e0 != e1, "two epochs in the same order"
    q = build(sources.sampler(100, shuffle=True, seed=1))
    assert list(q) == e0, "the same seed and epoch gave another order"
    r = build(sources.sampler(100, shuffle=True, seed=1, epoch=1))
    assert list(r) == e1, "starting at epoch 1 does not give epoch 1's order"
    assert list(build(sources.sampler(10))) == list(range(10))
    for x in (p, q, r):
        x.close()


def test_samples_are_handed_out_as_given(no_leaks):
    data = [(f"img{i}.jpg", i % 3, {"id": i, "tags": ["a", b"b"]}) for i in range(12)]
    p = build(sources.sampler(data, shuffle=True, seed=2), ops.identity())
    for _ in range(2):
        got = list(p)
        assert sorted(got, key=lambda s: s[2]["id"]) == data
    p.close()


def test_rank_and_world_size_from_torchrun_environment(monkeypatch, no_leaks):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sources.distributed_env() == (1, 2)
    p = build(sources.sampler(10))
    assert list(p) == [1, 3, 5, 7, 9]
    p.close()
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match=r"RANK=2 must be in \[0, WORLD_SIZE=2\)"):
        sources.sampler(10)


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: sources.sampler(0), ValueError, "dataset size must be >= 1"),
        (lambda: sources.sampler([]), ValueError, "empty"),
        (lambda: sources.sampler("abc"), TypeError, "dataset size or a sequence"),
        (lambda: sources.sampler(5, rank=2, world_size=2), ValueError, "rank must be in"),
        (lambda: sources.sampler(5, seed=-1), ValueError, "seed"),
        (lambda: sources.sampler(["a.jpg", object()]), TypeError, "sample 1 .*not a plain value"),
        (lambda: sources.sampler([1 << 70]), TypeError, "sample 0 .*64 bits"),
    ],
)
def test_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


TORCHRUN_SCRIPT = """
import json, os, sys
import torch.distributed as dist
from spdl_go import PipelineBuilder, ops, sources

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
n = int(sys.argv[2])
p = (PipelineBuilder()
     .add_source(sources.sampler([("sample", i) for i in range(n)], shuffle=True, seed=11), continuous=True)  # rank from the group
     .pipe(ops.identity(), concurrency=2)
     .aggregate(4)
     .add_sink(3)
     .build())
epochs = []
for epoch in range(2):
    ids = [label for batch in p for _, label in batch]
    everyone = [None] * world
    dist.all_gather_object(everyone, ids)
    epochs.append(everyone)
p.close()
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"world": world, "epochs": epochs}, f)
dist.destroy_process_group()
"""


def _needs_torch_distributed() -> None:
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")


@pytest.mark.timeout(240)
def test_torchrun_two_ranks_cover_each_epoch_exactly_once(tmp_path):
    # A real distributed job: torchrun starts 2 processes that join a gloo
    # group; each reads its share through sources.sampler.
    _needs_torch_distributed()
    import json
    import subprocess
    import sys

    script, out = tmp_path / "job.py", tmp_path / "out.json"
    script.write_text(TORCHRUN_SCRIPT)
    n = 101
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc_per_node=2",
        str(script),
        str(out),
        str(n),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["world"] == 2
    orders = []
    for ranks in res["epochs"]:
        a, b = ranks
        assert len(a) == len(b) == 51, "ranks got different counts"  # 101 over 2: one padded
        assert set(a) | set(b) == set(range(n))
        assert len(set(a) & set(b)) <= 1, "ranks overlap beyond the one padding sample"
        orders.append(a)
    assert orders[0] != orders[1], "both epochs in the same order"


RESUME_SCRIPT = """
import json, sys
import numpy as np
import torch.distributed as dist
import spdl_go

class Squares:
    def __len__(self): return 50
    def __getitem__(self, i): return np.full((2,), i, np.int64), i

phase, path = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
loader = spdl_go.DataLoader(Squares(), batch_size=3, shuffle=True, seed=5, output="numpy", num_threads=2)
ids = []
if phase == "save":
    it = iter(loader)
    for _ in range(4):
        ids += next(it)[1].tolist()
    state = loader.state_dict()  # gathers every rank's progress
else:
    with open(path) as f:
        loader.load_state_dict(json.load(f)["state"])
    ids = [i for _, y in loader for i in y.tolist()]
    state = None
everyone = [None] * world
dist.all_gather_object(everyone, ids)
loader.close()
if rank == 0:
    out = {"state": state, "ids": everyone} if phase == "save" else {"ids": everyone}
    with open(path if phase == "save" else path + ".rest", "w") as f:
        json.dump(out, f)
dist.destroy_process_group()
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_torchrun_resume_on_another_world_size(before, after, tmp_path):
    _needs_torch_distributed()
    import json
    import subprocess
    import sys

    script, path = tmp_path / "job.py", tmp_path / "state.json"
    script.write_text(RESUME_SCRIPT)

    def run(phase, nproc):
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc_per_node={nproc}",
            str(script),
            phase,
            str(path),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]

    run("save", before)
    saved = json.loads(path.read_text())
    run("resume", after)
    rest = json.loads((tmp_path / "state.json.rest").read_text())
    seen = [i for ids in saved["ids"] for i in ids] + [i for ids in rest["ids"] for i in ids]
    # 50 samples, 4 batches of 3 per rank before: the rest splits evenly
    # over 1 or 2 ranks, so every sample comes exactly once.
    assert sorted(seen) == list(range(50))
    assert len({len(ids) for ids in rest["ids"]}) == 1, "resumed ranks got different counts"
