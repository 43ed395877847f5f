"""``python -m fuzz replay FILE``: resend a finding's frames, one per connection.

FILE is the ``--repro`` output of a run (one JSON object per line with the frame's
``hex``, label and frame seed). Against a fresh ``floe up`` (or ``--bootstrap``), each
frame goes on its own connection; after each, the broker must still be alive and under
the RSS budget. The first frame that kills it (or pushes RSS over) is printed: that is
the minimal reproducer.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from fuzz import target, topics
from fuzz.wire import I32


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("replay", help="resend the frames of a run's findings")
    p.add_argument("file", type=Path, help="the run's --repro file (JSON lines)")
    p.add_argument("--kind", help="only findings of this kind (e.g. broker-died)")
    p.add_argument("--index", type=int, help="only the frame with this index")
    p.add_argument("--bootstrap", help="an already running broker (host:port) instead")
    p.add_argument("--rss-budget-mb", type=int, default=1024)


def send_one(host: str, port: int, data: bytes, timeout: float = 3.0) -> str:
    """Send one frame; 'reply <bytes>', 'closed' or 'no answer'."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(data)
        try:
            head = s.recv(4)
            if len(head) < 4:
                return "closed"
            size = I32.unpack(head)[0]
            body = s.recv(min(size, 64))
            return f"reply of {size} bytes: {body[:16].hex()}"
        except TimeoutError:
            return "no answer"
        except ConnectionResetError:
            return "closed (reset)"


def main(args: Any) -> int:
    frames = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    if args.kind:
        frames = [f for f in frames if f["kind"] == args.kind]
    if args.index is not None:
        frames = [f for f in frames if f["index"] == args.index]
    if not frames:
        print("no frames to replay")
        return 2
    broker = None
    if args.bootstrap:
        host, _, port_text = args.bootstrap.rpartition(":")
        port = int(port_text)
    else:
        from fuzz.run import BROKER_SETTINGS

        broker = target.FloeProcess(Path(tempfile.mkdtemp(prefix="floe-replay-")), BROKER_SETTINGS)
        broker.start()
        host, port = broker.host, broker.port
        topics.create_fuzz_topics(host, port)
        print(f"fresh broker at {broker.bootstrap} (log: {broker.log_path})")
    try:
        for f in frames:
            data = bytes.fromhex(f["hex"])
            try:
                outcome = send_one(host, port, data)
            except OSError as exc:
                outcome = f"connect/send failed: {exc}"
            time.sleep(0.2)
            state = ""
            if broker is not None:
                if not broker.alive():
                    print(f"frame #{f['index']} KILLED the broker ({f['label'][:120]})")
                    print(broker.tail(20))
                    return 1
                rss = target.sample(broker.pid).rss_bytes
                state = f"RSS {rss / 2**20:.0f} MiB"
                if rss > args.rss_budget_mb << 20:
                    print(f"frame #{f['index']} pushed RSS over budget: {state}")
                    return 1
            print(f"#{f['index']} [{f['kind']}] {outcome}; {state}  {f['label'][:100]}")
    finally:
        if broker is not None:
            broker.close()
    print("no frame killed the broker")
    return 0
