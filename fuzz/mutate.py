"""Mutations: from one seed and one frame seed to one hostile frame, with a label.

Every frame is a pure function of (corpus, frame seed): :class:`Mutator` reseeds its
random generator from the frame's seed before choosing anything, so a frame that broke
the broker can be rebuilt from the seed printed in the report (the report also keeps
the bytes, since captured seeds differ between runs).

Families, chosen per frame by weight:

- ``field``: rewrite one field found by :mod:`fuzz.layout`: integers to their edge
  values, string/bytes lengths and array counts to lies, varints to huge, overlong or
  unterminated encodings, string contents to non-UTF-8 or internal topic names,
  nullable markers to invalid values, tagged sections to unknown, duplicate or
  oversized tags.
- ``batch``: a Produce request of a random advertised version carrying a forged record
  set (:mod:`fuzz.batches`) for a plain, compacted, internal or missing topic.
- ``header``: unadvertised versions, unknown or negative api keys, another API's body
  under this API's key, lying client id lengths, garbage in header tags.
- ``havoc``: byte flips, insertions, deletions, truncation, span duplication.
- ``size``: the 4-byte frame size lies (terminal: the connection is half-closed after
  it, since the broker's framing is desynchronised by design).
"""

from __future__ import annotations

import functools
import random
import struct
from dataclasses import dataclass

from fuzz import batches, layout
from fuzz.layout import Span
from fuzz.seeds import INTERNAL_TOPICS, Seed, Topic
from fuzz.wire import (
    I16,
    I32,
    INT_LIMITS,
    array_len,
    bytes_field,
    overlong_uvarint,
    request_header,
    string,
    uvarint,
)

WEIGHTS = {"field": 50, "batch": 43, "header": 3, "havoc": 3, "size": 1}
"""Most frames are well-framed but hostile in value (they keep the connection open, so
many pass per connection); the structural families each still get tens of thousands of
frames in a long run."""
STRUCTURAL_SHARE = 0.12
"""Of ``field`` mutations, the share that rewrites a length, count, varint, tag section
or nullable marker (the rest rewrite values: integers, names, bytes, record sets)."""
_STRUCTURAL = frozenset(
    {
        layout.LEN16,
        layout.LEN32,
        layout.ULEN,
        layout.COUNT32,
        layout.UCOUNT,
        layout.MARKER,
        layout.TAGS,
        layout.TAGCOUNT,
        layout.TAG,
        layout.TAGSIZE,
    }
)


@dataclass(frozen=True, slots=True)
class Frame:
    """One mutated request ready to send.

    Attributes:
        data: the framed bytes.
        label: what was mutated (family, seed API/version, details).
        terminal: send nothing after it on this connection (framing is broken).
        likely_close: the broker will probably close the connection on it (a structural
            lie): the sender puts such frames last in its pipeline.
        internal_produce: a Produce whose every record set targets an internal topic
            (an error-free answer to it is a finding of its own).
    """

    data: bytes
    label: str
    terminal: bool = False
    likely_close: bool = False
    internal_produce: bool = False


def _evil_ints(width: int, current: int) -> list[int]:
    lo, hi = INT_LIMITS[width]
    return [lo, hi, -1, 0, 1, 2, current + 1, current - 1, hi - 1, lo + 1, -2, 0x7F, 0x80]


def _int_bytes(width: int, value: int) -> bytes:
    lo, hi = INT_LIMITS[width]
    value = ((value - lo) % (hi - lo + 1)) + lo
    return value.to_bytes(width, "big", signed=True)


def _varint_lie(rng: random.Random, current: int) -> tuple[bytes, str]:
    choice = rng.randrange(8)
    if choice == 0:
        return uvarint(0), "0"
    if choice == 1:
        return uvarint(current + rng.choice([1, 2, 100])), "+n"
    if choice == 2:
        return uvarint(max(current - 1, 0)), "-1"
    if choice == 3:
        value = rng.choice([2**31 - 1, 2**31, 2**32 - 1, 2**35 - 1, 2**63])
        return uvarint(value), f"huge={value}"
    if choice == 4:
        width = rng.choice([5, 6, 10, 11])
        return overlong_uvarint(current, width), f"overlong{width}"
    if choice == 5:
        return b"\xff" * rng.choice([1, 4, 5, 10]), "unterminated"
    if choice == 6:
        return uvarint(1 << 28), "1<<28"
    return uvarint(rng.randrange(1 << 14)), "random"


_NAMES: list[bytes] = [
    *(t.encode() for t in INTERNAL_TOPICS),
    b"",
    b".",
    b"..",
    b"../../../../tmp/fuzz",
    b"a/b",
    b"fuzz\x00nul",
    b"x" * 250,
    b"y" * 249,
    b"z" * 40000,
    "t\u00f6pic-\u2603".encode(),
    b"fuzz-plain",
    b"fuzz-compact",
    b"__consumer_offsets-0",
    b"fuzz-auto-%d",
]


_NOT_UTF8 = (b"\xff\xfe\xfd", b"\xed\xa0\x80", b"fuzz\xc3(")
_NAMES += _NOT_UTF8


class Mutator:
    """Turns (frame seed) into a :class:`Frame`; owned by the sending loop.

    Args:
        seeds: the corpus (each with spans).
        advertised: api key -> (min, max) version the broker advertises.
        topics: targets of forged batches.
        bombs: compression bombs, or None to leave them out.
        run_seed: mixed into every frame seed.
    """

    def __init__(
        self,
        seeds: list[Seed],
        advertised: dict[int, tuple[int, int]],
        topics: list[Topic],
        bombs: batches.Bombs | None,
        run_seed: int,
        *,
        auto_topics: int = 64,
    ) -> None:
        if not seeds:
            raise ValueError("empty seed corpus")
        self.seeds = seeds
        self.advertised = advertised
        self.topics = topics
        self.bombs = bombs
        self.run_seed = run_seed
        self.auto_topics = auto_topics
        self.rng = random.Random()
        self._families = list(WEIGHTS)
        self._weights = list(WEIGHTS.values())
        self._produce_versions = list(range(advertised[0][0], advertised[0][1] + 1))
        self._keys = sorted(advertised)
        self._pools = [
            (
                [i for i in range(4, len(s.spans)) if s.spans[i].kind not in _STRUCTURAL],
                [i for i in range(4, len(s.spans)) if s.spans[i].kind in _STRUCTURAL],
            )
            for s in seeds
        ]

    def frame_seed(self, index: int) -> int:
        return (self.run_seed << 32) ^ index

    def make(self, index: int, correlation_id: int) -> Frame:
        """The frame for ``index``, with ``correlation_id`` in its header."""
        rng = self.rng
        rng.seed(self.frame_seed(index))
        family = rng.choices(self._families, self._weights)[0]
        if family == "batch":
            return self._batch(rng, correlation_id)
        seed_no = rng.randrange(len(self.seeds))
        seed = self.seeds[seed_no]
        data = bytearray(seed.framed)
        I32.pack_into(data, 8, correlation_id)
        tag = f"{seed.origin}:{seed.api_key}v{seed.version}:{seed.target}"
        if family == "field":
            label = self._field(rng, seed, self._pools[seed_no], data)
        elif family == "header":
            label = self._header(rng, seed, data)
        elif family == "havoc":
            label = self._havoc(rng, data)
        else:
            return Frame(self._size_lie(rng, data), f"size:{tag}", True, True)
        I32.pack_into(data, 0, len(data) - 4)
        closer = family != "field" or label.startswith("~")
        return Frame(bytes(data), f"{family}:{tag}:{label}", likely_close=closer)

    # --- families -------------------------------------------------------------------

    def _field(
        self, rng: random.Random, seed: Seed, pools: tuple[list[int], list[int]], data: bytearray
    ) -> str:
        """Rewrite 1-3 fields (spans 0-3, the size, api key, version and correlation id,
        are left to the header family)."""
        spans = seed.spans
        structural = rng.random() < STRUCTURAL_SHARE
        pool = pools[structural]
        if not pool:
            return "~" + self._havoc(rng, data)
        picks = sorted({rng.choice(pool) for _ in range(rng.choice([1, 1, 1, 2, 3]))}, reverse=True)
        labels = []
        last_start = len(data) + 1
        for i in picks:
            start, end, new, what = self._rewrite(rng, spans, i, data)
            if end > last_start:
                continue  # overlaps a span already rewritten
            data[start:end] = new
            labels.append(f"{spans[i].name}.{spans[i].kind}={what}")
            last_start = start
            structural = structural or what.startswith("~")
        return ("~" if structural else "") + ",".join(labels)

    def _rewrite(
        self, rng: random.Random, spans: list[Span], i: int, data: bytearray
    ) -> tuple[int, int, bytes, str]:
        """(start, end, replacement, label) for span ``i``."""
        span = spans[i]
        old = bytes(data[span.start : span.end])
        kind = span.kind
        width = span.end - span.start
        new: bytes
        if kind == layout.INT and width in INT_LIMITS:
            current = int.from_bytes(old, "big", signed=True)
            value = rng.choice(_evil_ints(width, current))
            new, what = _int_bytes(width, value), str(value)
        elif kind == layout.BOOL:
            value = rng.choice([0, 1, 1, 0, 2, 255])
            new, what = bytes([value]), str(value) if value < 2 else f"~{value}"
        elif kind == layout.INT:  # uuid
            new = rng.choice([bytes(width), b"\xff" * width, rng.randbytes(width)])
            what = "uuid"
        elif kind == layout.LEN16:
            value = rng.choice([-2, -1, 0, 1, 0x7FFF, -0x8000, I16.unpack(old)[0] + 1])
            new, what = I16.pack(value), str(value)
        elif kind in (layout.LEN32, layout.COUNT32):
            current = I32.unpack(old)[0]
            value = rng.choice([-2, -1, 0, current + 1, current - 1, 2**31 - 1, 1 << 24])
            new, what = _int_bytes(4, value), str(value)
        elif kind in (layout.ULEN, layout.UCOUNT, layout.TAGCOUNT, layout.TAG, layout.TAGSIZE):
            new, what = _varint_lie(rng, _read_uvarint(old))
        elif kind == layout.STR:
            prefix = spans[i - 1]
            if old and rng.random() < 0.1:
                bad = bytearray(old)
                bad[rng.randrange(len(bad))] = rng.choice([0xFF, 0xC3, 0x80, 0x00, 0xED])
                new, what = bytes(bad), "~non-utf8"
            elif prefix.kind in (layout.LEN16, layout.ULEN) and prefix.end == span.start:
                name = rng.choice(_NAMES)
                if name in _NOT_UTF8:
                    return (
                        prefix.start,
                        span.end,
                        string(name, prefix.kind == layout.ULEN),
                        "~non-utf8",
                    )
                if b"%d" in name:
                    name = name.replace(b"%d", b"%d" % rng.randrange(self.auto_topics))
                flexible = prefix.kind == layout.ULEN
                if not flexible:
                    name = name[:0x7FFF]
                return prefix.start, span.end, string(name, flexible), f"name={name[:40]!r}"
            else:
                new, what = rng.randbytes(width), "random"
        elif kind == layout.BYTES:
            if not old or rng.random() < 0.5:
                new, what = rng.randbytes(rng.choice([0, 1, 8, 64, 4096])), "garbage-bytes"
            else:
                flipped = bytearray(old)
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
                new, what = bytes(flipped), "bitflip-bytes"
        elif kind == layout.RECORDS:
            label, records = batches.forge(rng, self.bombs)
            prefix = spans[i - 1]
            if prefix.end == span.start and rng.random() < 0.8:
                flexible = prefix.kind == layout.ULEN
                return prefix.start, span.end, bytes_field(records, flexible), f"[{label}]"
            new, what = records, f"[{label}]+stale-length"
        elif kind == layout.MARKER:
            value = rng.choice([0, 2, -2, 127, -128])
            new, what = _int_bytes(1, value), str(value)
        elif kind == layout.TAGS:
            new, what = self._tags(rng)
        else:
            new, what = rng.randbytes(width), "random"
        return span.start, span.end, new, what

    def _tags(self, rng: random.Random) -> tuple[bytes, str]:
        choice = rng.randrange(5)
        if choice == 0:
            tags = [(rng.choice([0, 1, 2, 100, 2**20, 2**31 - 1]), rng.randbytes(rng.randrange(8)))]
            label = "unknown-tag"
        elif choice == 1:
            tags = [(7, b"a"), (7, b"b")]
            label = "duplicate-tag"
        elif choice == 2:
            tags = [(3, b""), (1, b"")]
            label = "unordered-tags"
        elif choice == 3:
            return uvarint(1) + uvarint(0) + uvarint(2**31), "tag-size-huge"
        else:
            many = rng.choice([1000, 50000])
            return _many_tags(many), f"many-tags={many}"
        out = bytearray(uvarint(len(tags)))
        for tag, value in tags:
            out += uvarint(tag) + uvarint(len(value)) + value
        return bytes(out), label

    def _header(self, rng: random.Random, seed: Seed, data: bytearray) -> str:
        choice = rng.randrange(7)
        low, high = self.advertised.get(seed.api_key, (0, 0))
        if choice == 0:
            version = rng.choice([low - 1, high + 1, high + 2, -1, 32767, -32768, 100])
            I16.pack_into(data, 6, version)
            return f"version={version}"
        if choice == 1:
            key = rng.choice([-1, -32768, 32767, 17, 4, 5, 6, 7, 50, 67, 68, 74, 1000])
            I16.pack_into(data, 4, key)
            return f"api_key={key}"
        if choice == 2:
            # another API's body under this header: a confused schema
            key = rng.choice(self._keys)
            k_low, k_high = self.advertised[key]
            version = rng.randint(k_low, k_high)
            struct.pack_into(">hh", data, 4, key, version)
            return f"as={key}v{version}"
        if choice == 3:
            value = rng.choice([-2, -32768, 32767, 1000, 5])
            I16.pack_into(data, 12, value)
            return f"client_id_len={value}"
        if choice == 4:
            client = rng.choice([b"\xff\xfe", b"\xc0\x80", b"a" * 5000])
            old_len = I16.unpack_from(data, 12)[0]
            data[12 : 14 + max(old_len, 0)] = I16.pack(len(client)) + client
            return f"client_id={client[:8]!r}"
        if choice == 5:
            cid = rng.choice([-1, 0, 2**31 - 1, -(2**31)])
            I32.pack_into(data, 8, cid)
            return f"correlation_id={cid}"
        # header v2 tagged fields (unknown to every version), or a forged v2 header on v1
        old_len = I16.unpack_from(data, 12)[0]
        pos = 14 + max(old_len, 0)
        junk = uvarint(1) + uvarint(rng.choice([0, 5, 2**20])) + uvarint(3) + b"abc"
        data[pos:pos] = junk
        return "header-tags"

    def _havoc(self, rng: random.Random, data: bytearray) -> str:
        ops = []
        for _ in range(rng.choice([1, 1, 2, 4, 8])):
            if len(data) <= 12:
                break
            op = rng.randrange(6)
            pos = rng.randrange(8, len(data))
            if op == 0:
                data[pos] ^= 1 << rng.randrange(8)
                ops.append("flip")
            elif op == 1:
                data[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80])
                ops.append("byte")
            elif op == 2:
                data[pos:pos] = rng.randbytes(rng.choice([1, 2, 4, 16]))
                ops.append("insert")
            elif op == 3:
                del data[pos : pos + rng.choice([1, 2, 4, 16])]
                ops.append("delete")
            elif op == 4:
                del data[max(pos, 12) :]
                ops.append("truncate")
            else:
                end = min(len(data), pos + rng.choice([4, 16, 64]))
                data[pos:pos] = data[pos:end] * rng.choice([1, 2, 100])
                ops.append("repeat")
        return "+".join(ops)

    def _size_lie(self, rng: random.Random, data: bytearray) -> bytes:
        actual = len(data) - 4
        size = rng.choice(
            [
                -1,
                -(2**31),
                0,
                1,
                3,
                actual - 1,
                actual + 1,
                actual + 1000,
                2**31 - 1,
                100 * 1024 * 1024,
                1 << 24,
            ]
        )
        I32.pack_into(data, 0, size)
        if rng.random() < 0.3:
            return bytes(data[: rng.randrange(1, len(data))])  # and cut short
        return bytes(data)

    def _batch(self, rng: random.Random, correlation_id: int) -> Frame:
        version = rng.choice(self._produce_versions)
        flexible = version >= 9
        topic = rng.choice(self.topics)
        name = topic.name.encode()
        if topic.kind == "missing":
            name = b"fuzz-auto-%d" % rng.randrange(self.auto_topics)
        partition = rng.choice([0, 0, 0, 1, topic.partitions - 1, -1, topic.partitions, 2**31 - 1])
        acks = rng.choice([-1, -1, 1, 1, 0, 2, -2, 32767])
        label, records = batches.forge(rng, self.bombs)
        txn = None if rng.random() < 0.9 else b"fuzz-txn"
        body = bytearray(string(txn, flexible))
        body += I16.pack(acks) + I32.pack(rng.choice([1000, 0, 30000, -1]))
        body += array_len(1, flexible) + string(name, flexible)
        body += array_len(1, flexible) + I32.pack(partition)
        body += bytes_field(records, flexible)
        if flexible:
            body += b"\x00\x00\x00"  # partition, topic and request tagged fields
        head = request_header(0, version, correlation_id, b"fuzz", flexible)
        data = I32.pack(len(head) + len(body)) + head + bytes(body)
        return Frame(
            data,
            f"batch:produce v{version} {topic.kind}:{name[:32].decode(errors='replace')}"
            f"/{partition} acks={acks}:{label}",
            internal_produce=topic.kind == "internal" and acks != 0,
        )


@functools.cache
def _many_tags(count: int) -> bytes:
    return uvarint(count) + b"".join(uvarint(i) + b"\x00" for i in range(count))


def _read_uvarint(raw: bytes) -> int:
    value = shift = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        shift += 7
    return value
