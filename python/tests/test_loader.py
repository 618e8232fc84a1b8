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
            Squares(10), batch_size=4, drop_last=True, transform=lambda s: (s[0] * 2, s[1]), output="numpy", rank=1, world_size=2
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
