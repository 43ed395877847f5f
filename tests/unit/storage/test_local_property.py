"""Property: whatever batches are appended, a reopened store reads them back."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from localstore_helpers import NOW, T, append, broker_config

from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.storage.local import LocalStore
from floe.types import Offset, PartitionId

batch_spec = st.tuples(
    st.integers(1, 5),  # records
    st.integers(0, 300),  # value size
    st.sampled_from([0, 1, 2, 3, 4]),  # compression
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(batch_spec, min_size=1, max_size=25),
    segment_bytes=st.integers(200, 3000),
    interval=st.integers(0, 500),
    clean=st.booleans(),
)
def test_append_reopen_read_back(
    specs: list[tuple[int, int, int]], segment_bytes: int, interval: int, clean: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        config = broker_config(Path(tmp))
        store = LocalStore(data_dir, config)
        store.create_topic(
            T, 1, {"segment.bytes": str(segment_bytes), "index.interval.bytes": str(interval)}
        )
        plog = store.partition(T, PartitionId(0))
        written: list[bytes] = []
        for i, (n, size, compression) in enumerate(specs):
            recs = [Record(j, NOW + i, b"k%d" % j, bytes([i % 256]) * size) for j in range(n)]
            buf = bytearray(encode_batch(recs, base_offset=0, compression=compression))
            append(plog, bytes(buf))
            written.append(bytes(buf))
        expected = plog.read(Offset(0), 1 << 30)
        if clean:
            store.close()
        reopened = LocalStore(data_dir, config)
        try:
            plog = reopened.partition(T, PartitionId(0))
            out = b""
            pos = 0
            while pos < plog.log_end_offset:
                chunk = plog.read(Offset(pos), 1 << 30)
                out += chunk
                pos = scan(chunk)[-1].next_offset
            assert pos == sum(n for n, _, _ in specs)
            batches = scan(out)
            assert [out[h.position + 8 : h.position + h.size] for h in batches] == [
                w[8:] for w in written
            ]  # identical bytes apart from the assigned base offset
            offsets = [h.base_offset for h in batches]
            assert offsets == sorted(offsets)
            assert out[: len(expected)] == expected
            for h in scan(out):
                found = plog.read(Offset(h.base_offset), 1)
                assert found == out[h.position : h.position + h.size]
        finally:
            reopened.close()
            if not clean:
                store.close()
