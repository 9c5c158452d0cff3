"""CUDA-graph batch bucketing and padding: the parts that need no GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference.engine.cuda_graphs import (
    NUM_ROW_FIELDS,
    graph_batch_sizes,
    make_decode_graphs,
    pad_decode_inputs,
    padded_batch_size,
)
from inference.engine.step_inputs import StepInputs


def test_sizes_are_powers_of_two_up_to_max_num_seqs() -> None:
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(3) == [1, 2, 4]
    assert graph_batch_sizes(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert graph_batch_sizes(1000)[-1] == 512  # capped: larger batches run eagerly
    with pytest.raises(ValueError):
        graph_batch_sizes(0)


def test_a_batch_takes_the_smallest_size_that_holds_it() -> None:
    sizes = graph_batch_sizes(128)
    assert [padded_batch_size(n, sizes) for n in (1, 2, 3, 5, 8, 33, 128)] == [
        1, 2, 4, 8, 8, 64, 128,
    ]  # fmt: skip
    assert padded_batch_size(129, sizes) is None


def test_padding_rows_write_nothing_and_attend_to_nothing() -> None:
    step = StepInputs(
        input_ids=np.array([7, 8, 9]),
        positions=np.array([16, 3, 40]),
        slots=np.array([33, 51, 72]),
        query_start_loc=[0, 1, 2, 3],
        seq_lens=[17, 4, 41],
        block_tables=np.array([[4, 2, 0], [3, 0, 0], [9, 1, 4]]),
        block_size=16,
        sample_rows=[0, 1, 2],
    )
    packed = pad_decode_inputs(step, size=4, max_blocks=5)
    rows = packed[: NUM_ROW_FIELDS * 4].reshape(NUM_ROW_FIELDS, 4)
    tables = packed[NUM_ROW_FIELDS * 4 :].reshape(4, 5)
    assert rows[0].tolist() == [7, 8, 9, 0]
    assert rows[1].tolist() == [16, 3, 40, 0]
    assert rows[2].tolist() == [33, 51, 72, -1]  # the KV write skips slot -1
    assert rows[3].tolist() == [17, 4, 41, 0]  # attention over nothing
    assert tables.tolist() == [[4, 2, 0, 0, 0], [3, 0, 0, 0, 0], [9, 1, 4, 0, 0], [0] * 5]
    with pytest.raises(ValueError, match="do not fit"):
        pad_decode_inputs(step, size=2, max_blocks=5)
    with pytest.raises(ValueError, match="exceed"):
        pad_decode_inputs(step, size=4, max_blocks=2)
    chunk = StepInputs(
        input_ids=np.array([7, 8]),
        positions=np.array([0, 1]),
        slots=np.array([64, 65]),
        query_start_loc=[0, 2],
        seq_lens=[2],
        block_tables=np.array([[4]]),
        block_size=16,
        sample_rows=[1],
    )
    with pytest.raises(ValueError, match="pure decode"):
        pad_decode_inputs(chunk, size=4, max_blocks=5)


def test_no_graphs_on_a_cpu_or_when_eager_is_enforced() -> None:
    for device, eager in ((torch.device("cpu"), False), (torch.device("cuda"), True)):
        graphs = make_decode_graphs(
            torch.nn.Module(),  # type: ignore[arg-type]
            [],
            object(),  # type: ignore[arg-type]
            enforce_eager=eager,
            max_num_seqs=8,
            max_model_len=64,
            block_size=16,
            device=device,
        )
        assert graphs is None
