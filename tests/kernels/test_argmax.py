"""The greedy argmax kernel against torch.argmax, ties and -inf included."""

import pytest
import torch
from llmbench.kernels import reference, triton_ops

from tests.kernels.paged_kv import DEVICE


@pytest.mark.parametrize("rows,vocab", [(1, 5000), (3, 4096), (4, 37)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_argmax_matches_torch(rows, vocab, dtype):
    logits = torch.randn(rows, vocab, device=DEVICE).to(dtype)
    got = triton_ops.argmax(logits)
    assert got.dtype == torch.int64
    assert torch.equal(got, reference.argmax(logits))


def test_ties_go_to_the_first_index_across_loop_iterations():
    logits = torch.zeros(3, 9000, device=DEVICE)
    logits[0, [8191, 100, 4097]] = 7.0  # the same max in three different loop blocks and lanes
    logits[1, [4096, 0]] = 2.0  # the same lane in two blocks
    logits[2] = float("-inf")
    logits[2, [8999, 5000]] = -1.0
    assert triton_ops.argmax(logits).tolist() == [100, 0, 5000]


def test_all_minus_inf_row_and_strided_rows():
    wide = torch.randn(2, 300, device=DEVICE)
    wide[1] = float("-inf")
    rows = wide[:, :200]
    assert triton_ops.argmax(rows).tolist() == reference.argmax(rows).tolist() == [rows[0].argmax().item(), 0]
    with pytest.raises(ValueError, match="unit-stride"):
        triton_ops.argmax(wide.T)


def test_a_nan_wins_as_in_torch():
    logits = torch.randn(2, 5000, device=DEVICE)
    logits[0, 4321] = float("nan")
    logits[1, [10, 4500]] = float("nan")
    assert triton_ops.argmax(logits).tolist() == reference.argmax(logits).tolist() == [4321, 10]


def test_no_rows():
    assert triton_ops.argmax(torch.zeros(0, 16, device=DEVICE)).shape == (0,)
