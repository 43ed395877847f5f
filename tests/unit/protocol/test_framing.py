"""Size prefix reading and its bounds."""

import pytest

from floe.protocol.framing import SIZE, FrameTooLargeError, read_frame_size


def test_reads_the_size() -> None:
    assert read_frame_size(SIZE.pack(1234), 4096) == 1234
    assert read_frame_size(memoryview(SIZE.pack(4096) + b"rest"), 4096) == 4096


@pytest.mark.parametrize("size", [4097, 2**31 - 1, -1, -(2**31)])
def test_rejects_sizes_outside_bounds(size: int) -> None:
    with pytest.raises(FrameTooLargeError) as info:
        read_frame_size(SIZE.pack(size), 4096)
    assert info.value.size == size
    assert info.value.max_size == 4096
