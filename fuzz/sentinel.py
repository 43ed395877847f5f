"""The sentinel: a well-behaved client that must keep working while the fuzzer attacks.

Run as its own process (``python -m fuzz.sentinel``) so that the fuzzer's event loop
never delays its callbacks: an idempotent confluent-kafka producer with ``acks=all``
writes a numbered record every ``1/rate`` s, and a consumer in a group reads them back
and commits its position once a second (synchronously). Every second it prints one JSON
line: produce latencies (librdkafka's own, produce() to acknowledgement), end-to-end
latencies (record timestamp to consumer), commit latencies, and any error.

Acknowledged records go to ``acked.txt`` (``partition offset value``) and committed
offsets to ``committed.json`` in ``--out``; :func:`verify` checks both against the
broker after its kill -9 and restart. A line ``stop`` on stdin ends the run cleanly.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

TOPIC = "fuzz-sentinel"
GROUP = "fuzz-sentinel-group"
PARTITIONS = 2
COMMIT_EVERY_S = 1.0


def _config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", **extra}


def ensure_topic(bootstrap: str, topic: str) -> None:
    """Create the sentinel topic (an existing one is fine).

    Raises:
        ck.KafkaException: the broker refused for another reason.
    """
    admin = AdminClient(_config(bootstrap))
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)
    for future in futures.values():
        try:
            future.result(timeout=30)
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise


class Sentinel:
    """Producer + group consumer; owned by the process's main thread (the stdin reader
    thread only sets ``stopping``)."""

    def __init__(self, bootstrap: str, topic: str, group: str, rate: float, out: Path) -> None:
        self.topic = topic
        self.rate = rate
        self.out = out
        self.stopping = threading.Event()
        self.producer = ck.Producer(
            _config(
                bootstrap,
                acks="all",
                **{
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    "message.timeout.ms": 60000,
                    "request.timeout.ms": 30000,
                },
            )
        )
        self.consumer = ck.Consumer(
            _config(
                bootstrap,
                **{
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 100,
                    "session.timeout.ms": 30000,
                    "heartbeat.interval.ms": 1000,
                },
            )
        )
        self.consumer.subscribe([topic])
        self.acked_file = (out / "acked.txt").open("a")
        self.produce_ms: list[float] = []
        self.e2e_ms: list[float] = []
        self.commit_ms: list[float] = []
        self.errors: list[str] = []
        self.seq = 0
        self.acked = 0
        self.consumed = 0
        self.pending: dict[int, float] = {}
        self.positions: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.attempted: dict[int, int] = {}

    def _on_delivery(self, err: ck.KafkaError | None, msg: ck.Message) -> None:
        seq = int(msg.value() or b"-1")
        self.pending.pop(seq, None)
        if err is not None:
            self.errors.append(f"produce: {err}")
            return
        self.acked += 1
        latency = msg.latency()
        if latency is not None:
            self.produce_ms.append(latency * 1000)
        self.acked_file.write(f"{msg.partition()} {msg.offset()} {seq}\n")

    def _consume(self, timeout: float) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error() is not None:
            self.errors.append(f"consume: {msg.error()}")
            return
        _, ts = msg.timestamp()
        self.e2e_ms.append(time.time() * 1000 - ts)
        self.consumed += 1
        self.positions[msg.partition() or 0] = (msg.offset() or 0) + 1

    def _commit(self) -> None:
        if not self.positions:
            return
        offsets = [ck.TopicPartition(self.topic, p, o) for p, o in self.positions.items()]
        self.attempted.update(self.positions)
        self._save()
        t0 = time.monotonic()
        try:
            done = self.consumer.commit(offsets=offsets, asynchronous=False)
        except ck.KafkaException as exc:
            self.errors.append(f"commit: {exc}")
            return
        self.commit_ms.append((time.monotonic() - t0) * 1000)
        for tp in done or []:
            if tp.error is not None:
                self.errors.append(f"commit {tp.partition}: {tp.error}")
            else:
                self.committed[tp.partition] = tp.offset
        self._save()

    def _save(self) -> None:
        state = {"committed": self.committed, "attempted": self.attempted}
        (self.out / "committed.json").write_text(json.dumps(state))

    def _report(self, final: bool = False) -> None:
        oldest = min(self.pending.values(), default=time.monotonic())
        line = {
            "t": time.time(),
            "produce_ms": [round(x, 2) for x in self.produce_ms],
            "e2e_ms": [round(x, 2) for x in self.e2e_ms],
            "commit_ms": [round(x, 2) for x in self.commit_ms],
            "errors": self.errors[:20],
            "acked": self.acked,
            "consumed": self.consumed,
            "pending_oldest_ms": round((time.monotonic() - oldest) * 1000, 1),
            "committed": self.committed,
            "final": final,
        }
        print(json.dumps(line), flush=True)
        self.produce_ms, self.e2e_ms, self.commit_ms, self.errors = [], [], [], []

    def run(self) -> None:
        interval = 1.0 / self.rate
        next_send = next_report = next_commit = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= next_send:
                self.seq += 1
                self.pending[self.seq] = now
                try:
                    self.producer.produce(
                        self.topic, str(self.seq).encode(), on_delivery=self._on_delivery
                    )
                except BufferError as exc:
                    self.errors.append(f"produce: {exc}")
                next_send += interval
            self.producer.poll(0)
            self._consume(min(0.01, max(0.0, next_send - time.monotonic())))
            if now >= next_commit:
                self._commit()
                next_commit = now + COMMIT_EVERY_S
            if now >= next_report:
                self._report()
                next_report = now + 1.0
        self._finish()

    def _finish(self) -> None:
        left = self.producer.flush(30)
        if left:
            self.errors.append(f"produce: {left} records never acknowledged")
        deadline = time.monotonic() + 15
        while self.consumed < self.acked and time.monotonic() < deadline:
            self._consume(0.1)
        self._commit()
        self.acked_file.close()
        self._report(final=True)
        self.consumer.close()


class SentinelProcess:
    """The parent's handle on the sentinel child: starts it, collects its JSON lines in a
    thread, stops it with ``stop`` on its stdin (owned by the run)."""

    def __init__(self, bootstrap: str, out: Path) -> None:
        self.out = out
        self.lines: list[dict[str, Any]] = []
        self.stderr = out / "sentinel.stderr"
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "fuzz.sentinel", "--bootstrap", bootstrap]
        cmd += ["--topic", TOPIC, "--group", GROUP, "--out", str(out)]
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                continue

    def ready(self) -> bool:
        return any(line["e2e_ms"] for line in self.lines) and any(
            line["committed"] for line in self.lines
        )

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.ready():
                return True
            time.sleep(0.1)
        return self.ready()

    def stop(self, timeout: float = 90) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._thread.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self) -> str:
        try:
            return "\n".join(self.stderr.read_text(errors="replace").splitlines()[-10:])
        except OSError:
            return ""


def _read_stdin(stopping: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stopping.set()


def verify(bootstrap: str, topic: str, group: str, out: Path, timeout: float = 60) -> list[str]:
    """Check every acknowledged record and the group's committed offsets on the broker.

    Returns the problems found (empty when everything is intact).
    """
    expected: dict[tuple[int, int], str] = {}
    acked_path = out / "acked.txt"
    for line in acked_path.read_text().splitlines() if acked_path.exists() else []:
        part, off, value = line.split()
        expected[(int(part), int(off))] = value
    state = json.loads((out / "committed.json").read_text())
    committed = {int(k): v for k, v in state["committed"].items()}
    attempted = {int(k): v for k, v in state["attempted"].items()}
    problems: list[str] = []
    consumer = ck.Consumer(
        _config(bootstrap, **{"group.id": f"{group}-verify", "enable.auto.commit": False})
    )
    try:
        parts = sorted({p for p, _ in expected} | set(committed) | {0})
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        last = {p: max((o for q, o in expected if q == p), default=-1) for p in parts}
        seen: dict[tuple[int, int], str] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
            (p, last[p]) not in seen for p in parts if last[p] >= 0
        ):
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            key = (msg.partition() or 0, msg.offset() or 0)
            seen[key] = (msg.value() or b"").decode(errors="replace")
        missing = [k for k in expected if k not in seen]
        wrong = [k for k in expected if k in seen and seen[k] != expected[k]]
        if missing:
            problems.append(
                f"{len(missing)} of {len(expected)} acknowledged records missing "
                f"after restart (first: partition {missing[0][0]} offset {missing[0][1]})"
            )
        if wrong:
            problems.append(f"{len(wrong)} acknowledged records changed (first: {wrong[0]})")
        group_consumer = ck.Consumer(_config(bootstrap, **{"group.id": group}))
        try:
            tps = [ck.TopicPartition(topic, p) for p in committed]
            now = {tp.partition: tp.offset for tp in group_consumer.committed(tps, timeout=30)}
        finally:
            group_consumer.close()
        for p, offset in committed.items():
            # A commit whose answer was lost may have landed: anything from the last
            # acknowledged commit to the last attempted one is intact.
            got = now.get(p)
            if got is None or not offset <= got <= attempted.get(p, offset):
                problems.append(
                    f"group {group} partition {p}: committed {offset}, broker now says {got}"
                )
    except ck.KafkaException as exc:
        problems.append(f"verify failed: {exc}")
    finally:
        consumer.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.sentinel")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--rate", type=float, default=20.0, help="records per second")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ensure_topic(args.bootstrap, args.topic)
    sentinel = Sentinel(args.bootstrap, args.topic, args.group, args.rate, args.out)
    threading.Thread(target=_read_stdin, args=(sentinel.stopping,), daemon=True).start()
    sentinel.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
