"""HostMemory, the reference backend's buffers: arena and workspace, snapshots, and what it says when refusing.

The executor's tests run it end to end; these pin what they cannot see: that arena views share the
arena's memory, that a snapshot outlives the slot it copied, that a host too small for a tensor is an
ExecutionError naming it, and the layout hint's wording and condition.
"""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.dtypes import DataType
from sigdnn.errors import ExecutionError, VariantPackError
from sigdnn.executor.host import HostMemory

F32 = DataType.FLOAT32


def tensor(dims: tuple[int, ...], strides: tuple[int, ...] | None = None) -> sigdnn.Tensor:
    return sigdnn.Graph("g", io_dtype="float32").tensor("t", dims, strides)


def test_arena_views_share_its_memory() -> None:
    memory = HostMemory()
    arena = memory.arena(64)
    assert isinstance(arena, np.ndarray) and arena.dtype == np.uint8 and arena.nbytes == 64
    a = memory.view(arena, 0, tensor((2, 4)), F32)
    b = memory.view(arena, 16, tensor((4,)), F32)  # overlaps a's second row
    a[...] = 0
    b[...] = 7
    assert a[1].tolist() == [7, 7, 7, 7] and a[0].tolist() == [0, 0, 0, 0]
    assert np.shares_memory(a, arena) and np.shares_memory(b, arena)


def test_workspace_only_when_asked() -> None:
    memory = HostMemory()
    assert memory.workspace(0) is None
    ws = memory.workspace(100)
    assert isinstance(ws, np.ndarray) and ws.dtype == np.uint8 and ws.nbytes == 100


def test_a_snapshot_outlives_the_slot_it_copied() -> None:
    memory = HostMemory()
    slot = np.arange(6, dtype=np.float32).reshape(2, 3)
    copy = memory.snapshot(slot)
    slot[...] = -1
    assert copy.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_a_host_too_small_is_an_execution_error_naming_the_tensor() -> None:
    memory = HostMemory()
    with pytest.raises(ExecutionError, match=r"cannot allocate the \d+-byte arena for virtual tensors"):
        memory.arena(1 << 62)
    huge = sigdnn.Graph("g", io_dtype="float32").tensor("huge", (1 << 31, 1 << 31))
    with pytest.raises(ExecutionError, match=r"cannot allocate output tensor 'huge' \(uid \d+\) float32\[2147483648, "):
        memory.new_output(huge, F32)


def accept_message(shape: tuple[int, ...], dims: tuple[int, ...]) -> str:
    with pytest.raises(VariantPackError) as e:
        HostMemory().accept(np.zeros(shape, np.float32), tensor(dims), F32, writable=False)
    return str(e.value)


def test_the_layout_hint_is_given_for_a_permutation_of_the_dims_only() -> None:
    hint = (
        "; arrays take the logical dims (N, C, spatial...) whatever the memory layout: for a channels-last "
        "array pass a view in logical order, e.g. a.transpose(0, 3, 1, 2)"
    )
    assert accept_message((1, 8, 8, 3), (1, 3, 8, 8)).endswith("does not match the graph's dims [1, 3, 8, 8]" + hint)
    for shape in ((1, 8, 8, 4), (3, 8, 8), (1, 3, 8, 8, 1)):  # same rank other sizes; same sizes other rank
        message = accept_message(shape, (1, 3, 8, 8))
        assert message.endswith("does not match the graph's dims [1, 3, 8, 8]"), message
