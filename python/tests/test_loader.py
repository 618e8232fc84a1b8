"""spdl_go.DataLoader: the torch DataLoader's shape over a spdl-go pipeline."""

import numpy as np
import pytest

import spdl_go


class Squares:
    """Map-style dataset: sample i is (a float32 vector of i's, i*i)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full((3,), i, np.float32), i * i


def test_epochs_of_shuffled_batches_like_torch(no_leaks):
    torch = pytest.importorskip("torch")
    with spdl_go.DataLoader(Squares(10), batch_size=4, shuffle=True, seed=1, num_threads=2) as loader:
        assert len(loader) == 3
        orders = []
        for _ in range(2):
            ids = []
            for x, y in loader:
                assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.shape[1:] == (3,)
                assert torch.equal(x[:, 0].to(torch.int64) ** 2, y)
                ids += x[:, 0].to(torch.int64).tolist()
            assert sorted(ids) == list(range(10))
            orders.append(ids)
        assert orders[0] != orders[1], "two epochs in the same order"


def test_same_batches_as_torch_dataloader_without_shuffle(no_leaks):
    torch = pytest.importorskip("torch")
    ours = spdl_go.DataLoader(Squares(10), batch_size=4, num_threads=3)
    theirs = torch.utils.data.DataLoader(Squares(10), batch_size=4)
    for (a, b), (c, d) in zip(ours, theirs, strict=True):
        assert torch.equal(a, c) and torch.equal(b, d)
    ours.close()


def test_drop_last_transform_numpy_and_ranks(no_leaks):
    batches = list(
        spdl_go.DataLoader(
            Squares(10),
            batch_size=4,
            drop_last=True,
            transform=lambda s: (s[0] * 2, s[1]),
            output="numpy",
            rank=1,
            world_size=2,
        )
    )
    # rank 1 of 2 gets samples 1, 3, 5, 7, 9: one full batch of 4
    assert len(batches) == 1
    x, y = batches[0]
    assert isinstance(x, np.ndarray) and x[:, 0].tolist() == [2, 6, 10, 14]
    assert y.tolist() == [1, 9, 25, 49]


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"dataset": [1, 2], "batch_size": 0}, ValueError, "batch_size"),
        ({"dataset": iter([1]), "batch_size": 1}, TypeError, "__len__ and __getitem__"),
        ({"dataset": [], "batch_size": 1}, ValueError, "empty"),
        ({"dataset": [1], "batch_size": 1, "output": "jax"}, ValueError, "output"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        spdl_go.DataLoader(**kwargs)


def ids_of(batch):
    x, _ = batch
    return np.asarray(x)[:, 0].astype(int).tolist()


def loader(n=30, **kw):
    kw.setdefault("batch_size", 4)
    return spdl_go.DataLoader(Squares(n), shuffle=True, seed=7, output="numpy", **kw)


def roundtrip(state):
    import json

    return json.loads(json.dumps(state))


def test_resume_mid_epoch_continues_the_same_order(no_leaks):
    with loader() as full:
        epoch0 = [i for b in full for i in ids_of(b)]
        epoch1 = [i for b in full for i in ids_of(b)]
    with loader(num_threads=3) as first:
        it = iter(first)
        seen = [i for _ in range(3) for i in ids_of(next(it))]
        state = roundtrip(first.state_dict())
        it.close()
    assert state["progress"]["epoch"] == 0
    with loader(num_threads=1) as second:  # another thread count
        second.load_state_dict(state)
        rest = [i for b in second for i in ids_of(b)]
        assert seen + rest == epoch0
        assert [i for b in second for i in ids_of(b)] == epoch1


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2), (2, 3)])
def test_resume_on_another_world_size_covers_the_epoch_once(before, after, no_leaks):
    n = 30
    olds = [loader(n, rank=r, world_size=before) for r in range(before)]
    seen = []
    for k, ld in enumerate(olds):
        it = iter(ld)
        for _ in range(2 + k):  # ranks at different steps are fine too
            seen += ids_of(next(it))
    state = roundtrip(spdl_go.DataLoader.merge_states([ld.local_state() for ld in olds]))
    for ld in olds:
        ld.close()
    news = [loader(n, rank=r, world_size=after) for r in range(after)]
    for ld in news:
        ld.load_state_dict(state)
        seen += [i for b in ld for i in ids_of(b)]
        ld.close()
    # Without padding every sample comes exactly once; padding (when the
    # rest does not split evenly) repeats a few.
    assert set(seen) == set(range(n))
    remaining = n - sum(2 + k for k in range(before)) * 4
    pads = -remaining % after
    assert len(seen) == n + pads


def test_state_of_another_dataset_is_refused(no_leaks):
    with loader(30) as a, loader(31) as b:
        with pytest.raises(ValueError, match="n=30"):
            b.load_state_dict(a.state_dict())
        with pytest.raises(ValueError, match="not a spdl_go.DataLoader or ResumableSource state"):
            b.load_state_dict({"epoch": 1})
