"""kill -9 of a process appending to a store: every acknowledged batch survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from localstore_helpers import T, broker_config

from floe.protocol.batch import scan
from floe.protocol.records import decode_batch
from floe.storage.local import LocalStore
from floe.types import Offset, PartitionId

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from floe.config.loader import load_config
    from floe.protocol.batch import scan
    from floe.protocol.records import Record, encode_batch
    from floe.storage.local import LocalStore
    from floe.types import PartitionId, TopicName

    tmp = Path(sys.argv[1])
    store = LocalStore(tmp / "data", load_config(tmp / "floe.toml", {}, {}))
    t = TopicName("t")
    store.create_topic(t, 1, {"segment.bytes": "20000", "index.interval.bytes": "500"})
    plog = store.partition(t, PartitionId(0))
    i = 0
    while True:
        recs = [Record(j, i, b"k", b"%d" % (i + j) * 20) for j in range(3)]
        buf = bytearray(encode_batch(recs, base_offset=0))
        result = plog.append(buf, scan(buf), i)
        print(result.last_offset, flush=True)
        i += 3
    """
)


def test_acknowledged_appends_survive_kill_9(tmp_path: Path) -> None:
    config = broker_config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked >= 3000:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    store = LocalStore(tmp_path / "data", config)
    try:
        plog = store.partition(T, PartitionId(0))
        assert len(plog.segments) > 3
        assert plog.log_end_offset > acked
        pos = 0
        while pos < plog.log_end_offset:
            data = plog.read(Offset(pos), 1 << 20)
            for h in scan(data):
                for r in decode_batch(data, h):
                    assert r.value == b"%d" % r.offset * 20
                pos = h.next_offset
    finally:
        store.close()
