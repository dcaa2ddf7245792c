"""The GPU reference resample backward's source lists (gpu_reference/resample.py ``sources``): for each input
position, the output positions whose sample reads it, ascending and padded with -1 to the longest list.
Hand-worked tables."""

from __future__ import annotations

import numpy as np

from sigdnn.plan_builders.gpu_reference.resample import sources


def test_each_input_lists_its_outputs_ascending_padded_to_the_longest() -> None:
    index = np.array([0, 0, 1, 2, 2, 2])  # outputs 0, 1 read input 0; 2 reads 1; 3, 4, 5 read 2
    assert sources(index, 3).tolist() == [[0, 1, -1], [2, -1, -1], [3, 4, 5]]


def test_unsorted_samples_and_an_input_no_output_reads() -> None:
    index = np.array([2, 0, 2, 0, 3])  # input 1 is skipped (a shrinking nearest sample)
    assert sources(index, 4).tolist() == [[1, 3], [-1, -1], [0, 2], [4, -1]]


def test_one_output_per_input_is_one_column_and_no_outputs_still_one() -> None:
    assert sources(np.array([1, 0, 2]), 3).tolist() == [[1], [0], [2]]
    assert sources(np.array([], np.int64), 2).tolist() == [[-1], [-1]]
