"""spdl_go.torch and spdl_go.jax: batches in the user's framework."""

import numpy as np
import pytest

from spdl_go import PipelineBuilder, ops

torch = pytest.importorskip("torch")
from spdl_go.torch import as_iterable_dataset, to_torch  # noqa: E402


def batches(n=40, size=8):
    return (
        PipelineBuilder()
        .add_source([(np.full((2, 3), i, np.float32), i) for i in range(n)], continuous=True)  # an epoch per iteration
        .pipe(ops.identity(), output_order="input")
        .aggregate(size)
        .pipe(ops.collate(numbers="tensor"))
        .add_sink(3)
        .build()
    )


def test_dataloader_over_a_pipeline_yields_torch_tensors(no_leaks):
    p = batches()
    dl = torch.utils.data.DataLoader(as_iterable_dataset(p), batch_size=None)
    for _ in range(2):  # an epoch per iteration
        seen = []
        for x, y in dl:
            assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.shape[1:] == (2, 3)
            assert isinstance(y, torch.Tensor) and y.dtype == torch.int64
            assert torch.equal(x[:, 0, 0].to(torch.int64), y)
            seen += y.tolist()
        assert seen == list(range(40))
    p.close()


def test_to_torch_is_zero_copy_and_keeps_structure(no_leaks):
    p = batches()
    x, y = next(iter(p))
    ptr = x.data_ptr
    out = to_torch({"batch": (x, [y]), "name": "b0"})
    assert out["name"] == "b0"
    tx, (ty,) = out["batch"]
    assert tx.data_ptr() == ptr
    assert ty.tolist() == list(range(8))
    del x, y, tx, ty, out
    p.close()


# None: Python's default start method, "fork" before 3.14 and "forkserver"
# from 3.14 on Linux. With "fork" the worker finds itself in a child; with
# the others the dataset is pickled in the parent, and refuses.
@pytest.mark.parametrize("method", [None, "fork", "forkserver", "spawn"])
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_dataloader_workers_are_refused_clearly(method):
    p = batches()
    dl = torch.utils.data.DataLoader(
        as_iterable_dataset(p), batch_size=None, num_workers=1, multiprocessing_context=method
    )
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(dl))
    p.close()


def test_as_iterable_dataset_checks_its_argument():
    with pytest.raises(TypeError, match="spdl_go Pipeline"):
        as_iterable_dataset([1, 2])


def test_jax_conversion(no_leaks):
    pytest.importorskip("jax")
    from spdl_go.jax import to_jax

    p = batches()
    x, y = to_jax(next(iter(p)))
    assert x.shape == (8, 2, 3) and y.tolist() == list(range(8))
    del x, y
    p.close()
