"""Record batches, honest and forged, with CRCs recomputed so they pass the first check.

A v2 batch (see ``floe.protocol.batch`` for the layout) carries counts, offset deltas,
lengths, a codec, producer id/epoch/sequence and timestamps that the broker must not
trust. :func:`forge` returns one batch with one or more of them lying, and a short
label saying which; the CRC32C is then recomputed (except by the ``bad-crc`` forgery),
so the lie reaches the validation that is supposed to catch it.

Compression bombs are built directly in the compressed format (zstd RLE blocks, gzip
members of repeated full-flush deflate blocks, lz4 frames of one repeated block), so
a bomb inflating to gigabytes costs the fuzzer milliseconds and a few hundred KB.
"""

from __future__ import annotations

import functools
import random
import struct
import time
import zlib
from dataclasses import dataclass

import cramjam
import crc32c

from fuzz.wire import I32, varint

_HEAD = struct.Struct(">qiibIhiqqqhii")
_AFTER_CRC = 21  # the CRC covers bytes 21.. of the batch

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MAX = 2**31 - 1


def wrap32(value: int) -> int:
    """``value`` as the int32 it becomes on the wire (two's complement wrap)."""
    return ((value + 2**31) % 2**32) - 2**31


@dataclass
class Record:
    """One record as the wire writes it (every field may be forged)."""

    offset_delta: int
    timestamp_delta: int = 0
    key: bytes | None = b"k"
    value: bytes | None = b"v"
    headers: tuple[tuple[bytes | None, bytes | None], ...] = ()
    attributes: int = 0
    length_adjust: int = 0
    """Added to the record's true length prefix (a lying length)."""


def encode_record(r: Record) -> bytes:
    body = bytearray()
    body.append(r.attributes & 0xFF)
    body += varint(r.timestamp_delta)
    body += varint(r.offset_delta)
    body += varint(-1) if r.key is None else varint(len(r.key)) + r.key
    body += varint(-1) if r.value is None else varint(len(r.value)) + r.value
    body += varint(len(r.headers))
    for hk, hv in r.headers:
        body += varint(-1) if hk is None else varint(len(hk)) + hk
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body) + r.length_adjust) + bytes(body)


@dataclass
class Batch:
    """The header fields of a v2 batch plus its (possibly compressed) record bytes."""

    records: bytes
    count: int
    last_offset_delta: int
    attributes: int = 0
    base_offset: int = 0
    leader_epoch: int = -1
    magic: int = 2
    base_timestamp: int = 0
    max_timestamp: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    length_adjust: int = 0
    bad_crc: bool = False

    def encode(self) -> bytes:
        length = 49 + len(self.records)  # bytes after batchLength
        head = bytearray(
            _HEAD.pack(
                self.base_offset,
                wrap32(length + self.length_adjust),
                wrap32(self.leader_epoch),
                self.magic,
                0,
                self.attributes,
                wrap32(self.last_offset_delta),
                self.base_timestamp,
                self.max_timestamp,
                self.producer_id,
                self.producer_epoch,
                wrap32(self.base_sequence),
                wrap32(self.count),
            )
        )
        data = head + self.records
        crc = crc32c.crc32c(memoryview(data)[_AFTER_CRC:])
        if self.bad_crc:
            crc ^= 0x5A5A5A5A
        struct.pack_into(">I", data, 17, crc)
        return bytes(data)


def compress(codec: str, data: bytes) -> bytes:
    """Compress ``data`` the way Kafka clients do for ``codec``."""
    if codec == "gzip":
        return bytes(cramjam.gzip.compress(data))
    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data))
    return data


def now_ms() -> int:
    return int(time.time() * 1000)


def honest(
    n: int = 3,
    codec: str = "none",
    keys: bool = True,
    value_size: int = 16,
    ts: int | None = None,
) -> Batch:
    """A well-formed batch of ``n`` records (what a correct producer sends)."""
    ts = now_ms() if ts is None else ts
    body = b"".join(
        encode_record(
            Record(
                i,
                key=b"key-%d" % i if keys else None,
                value=(b"v%d-" % i).ljust(value_size, b"x"),
                headers=((b"h", b"1"),),
            )
        )
        for i in range(n)
    )
    return Batch(
        compress(codec, body),
        n,
        n - 1,
        attributes=CODECS[codec],
        base_timestamp=ts,
        max_timestamp=ts,
    )


# --- bombs ------------------------------------------------------------------------------


def zstd_bomb(inflated: int) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes per 128 KiB of zeros, no content size."""
    block = 128 * 1024
    frame = bytearray(b"\x28\xb5\x2f\xfd")
    frame.append(0x00)  # frame header descriptor: no content size, no checksum, window
    frame.append(0x58)  # window descriptor: 128 MiB window (exponent 17 + 10)
    blocks, rest = divmod(inflated, block)
    rle = ((block << 3) | (1 << 1)).to_bytes(3, "little") + b"\x00"
    frame += rle * blocks
    last = (rest << 3) | (1 << 1) | 1
    frame += last.to_bytes(3, "little") + b"\x00"
    return bytes(frame)


def _zeros_deflate_piece() -> bytes:
    """Raw deflate of 1 MiB of zeros ending in a full flush (repeatable verbatim)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    c.compress(chunk)
    c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    return piece


def gzip_bomb(inflated_mib: int) -> bytes:
    """One gzip member of ``inflated_mib`` MiB of zeros from a repeated deflate block."""
    piece = _zeros_deflate_piece()
    crc = 0
    chunk = bytes(1 << 20)
    for _ in range(inflated_mib):
        crc = zlib.crc32(chunk, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    body = piece * inflated_mib + b"\x03\x00"  # final empty fixed-Huffman block
    size = (inflated_mib << 20) & 0xFFFFFFFF
    return header + body + struct.pack("<II", crc, size)


def lz4_bomb(inflated_mib: int) -> bytes:
    """An lz4 frame of repeated compressed 4 MiB blocks of zeros."""
    import lz4.frame  # type: ignore[import-untyped]

    chunk = bytes(4 << 20)
    ctx = lz4.frame.create_compression_context()
    head = lz4.frame.compress_begin(ctx, block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    block = lz4.frame.compress_chunk(ctx, chunk)
    tail = lz4.frame.compress_flush(ctx, end_frame=True)
    return bytes(head + block * max(1, inflated_mib // 4) + tail)


def bomb_record_prefix(value_size: int) -> bytes:
    """A record header announcing a ``value_size``-byte value: decompressed, the bomb's
    zeros are one plausible record instead of garbage."""
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(value_size)
    return varint(len(body) + value_size + 1) + body


class Bombs:
    """Compressed payloads that inflate far past any sane limit, built once per run."""

    def __init__(self, inflated_mib: int) -> None:
        self.inflated_mib = inflated_mib
        size = inflated_mib << 20
        zstd_plain = zstd_bomb(size)
        self.payloads: dict[str, tuple[int, bytes]] = {
            "zstd": (CODECS["zstd"], zstd_plain),
            "zstd-record": (
                CODECS["zstd"],
                bytes(cramjam.zstd.compress(bomb_record_prefix(size))) + zstd_plain,
            ),
            "gzip": (CODECS["gzip"], gzip_bomb(min(inflated_mib, 512))),
            "lz4": (CODECS["lz4"], lz4_bomb(min(inflated_mib, 128))),
        }

    def batch(self, rng: random.Random) -> tuple[str, Batch]:
        name = rng.choice(list(self.payloads))
        codec, payload = self.payloads[name]
        count = rng.choice([1, 1, 1000, I32_MAX])
        ts = now_ms()
        return f"bomb-{name}", Batch(payload, count, count - 1, codec, 0, -1, 2, ts, ts)


# --- forgeries --------------------------------------------------------------------------


def _evil_int(rng: random.Random, bits: int) -> int:
    lo: int = -(2 ** (bits - 1))
    hi: int = 2 ** (bits - 1) - 1
    return rng.choice([lo, hi, -1, 0, 1, hi - 1, lo + 1, rng.randint(lo, hi)])


@functools.cache
def _plain_record(i: int) -> bytes:
    return encode_record(Record(i, key=b"k%d" % i, value=b"value-%d" % i))


def _records(rng: random.Random, n: int, label: list[str]) -> bytes:
    """Records of which one may lie about its own structure."""
    if n == 0:
        return b""
    liar = rng.randrange(n)
    r = Record(liar, key=b"k%d" % liar, value=b"value-%d" % liar)
    lie = rng.randrange(9)
    if lie == 0:
        r.length_adjust = rng.choice([-3, -1, 1, 7, 1 << 20, -(1 << 20)])
        label.append("record-length")
    elif lie == 1:
        r.offset_delta = _evil_int(rng, 32)
        label.append("record-offset-delta")
    elif lie == 2:
        r.timestamp_delta = _evil_int(rng, 64)
        label.append("record-timestamp-delta")
    elif lie == 3:
        r.headers = tuple(
            (rng.choice([b"\xff\xfe", b"\xc3\x28", b"ok", None, b"\xed\xa0\x80"]), b"x")
            for _ in range(rng.randint(1, 4))
        )
        label.append("header-bad-key")
    elif lie == 4:
        r.key = None
        label.append("null-key")
    elif lie == 5:
        r.attributes = rng.randrange(256)
        label.append("record-attributes")
    else:
        label.append("honest-records")
    raw = encode_record(r)
    if lie == 6:
        flipped = bytearray(raw)
        flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        raw = bytes(flipped)
        label[-1] = "record-byte-flip"
    elif lie == 7:
        # a varint with a huge value (the key length) inside an otherwise fine record
        body = b"\x00" + varint(0) + varint(liar) + varint(I32_MAX) + b"xx"
        raw = varint(len(body)) + body
        label[-1] = "record-huge-key-length"
    return b"".join(raw if i == liar else _plain_record(i) for i in range(n))


def forge(rng: random.Random, bombs: Bombs | None) -> tuple[str, bytes]:
    """One forged record set (usually one batch); returns (label, bytes)."""
    label: list[str] = []
    choice = rng.randrange(100)
    if bombs is not None and choice < 2:
        name, b = bombs.batch(rng)
        return name, b.encode()
    if choice < 5:
        return "legacy-v0-v1", legacy_message_set(rng)
    n = rng.choice([0, 1, 1, 2, 3, 5, 50])
    codec = rng.choice(["none", "none", "none", "gzip", "snappy", "lz4", "zstd"])
    body = _records(rng, n, label)
    ts = now_ms()
    batch = Batch(
        compress(codec, body),
        n,
        n - 1,
        attributes=CODECS[codec],
        base_timestamp=ts,
        max_timestamp=ts,
    )
    if codec != "none":
        label.append(codec)
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        _lie(rng, batch, label)
    out = batch.encode()
    if rng.random() < 0.05:
        out += honest(2).encode()  # two batches in one record set
        label.append("two-batches")
    elif rng.random() < 0.03:
        out += out[: rng.randrange(1, 61)]  # a trailing partial batch
        label.append("partial-tail")
    return "+".join(label) or "honest", out


def _lie(rng: random.Random, b: Batch, label: list[str]) -> None:
    which = rng.randrange(15)
    if which == 0:
        b.count = rng.choice([0, -1, b.count + 1, max(b.count - 1, 0), I32_MAX, 2**31 - 2])
        label.append(f"count={b.count}")
    elif which == 1:
        b.last_offset_delta = _evil_int(rng, 32)
        label.append(f"last-offset-delta={b.last_offset_delta}")
    elif which == 2:
        b.attributes = (b.attributes & ~7) | rng.choice([5, 6, 7])
        label.append(f"codec={b.attributes & 7}")
    elif which == 3:
        b.attributes = rng.choice([0x10, 0x20, 0x30, 0x40, 0x08, 0x7FFF, -1])
        label.append(f"attributes={b.attributes}")
    elif which == 4:
        b.producer_id = rng.choice([0, 1, 2, 1000, rng.randrange(1 << 20), I64_MAX, -2])
        b.producer_epoch = rng.choice([0, 1, -1, 32767, -32768])
        b.base_sequence = rng.choice([0, 1, 5, -1, I32_MAX, -2])
        label.append(f"pid={b.producer_id}/{b.producer_epoch}/{b.base_sequence}")
    elif which == 5:
        b.base_timestamp = rng.choice([-1, -2, 0, I64_MIN, I64_MAX, now_ms() + 10**12, 1])
        b.max_timestamp = rng.choice([b.base_timestamp, -1, I64_MAX, 0])
        label.append(f"timestamp={b.base_timestamp}")
    elif which == 6:
        b.length_adjust = rng.choice([-1, 1, -49, 4096, I32_MAX - 100, -(2**31)])
        label.append(f"batch-length{b.length_adjust:+d}")
    elif which == 7:
        b.magic = rng.choice([0, 1, 3, 127, -1])
        label.append(f"magic={b.magic}")
    elif which == 8:
        b.bad_crc = True
        label.append("bad-crc")
    elif which == 9:
        b.base_offset = rng.choice([-1, 1, I64_MAX, I64_MIN, 10**12])
        label.append(f"base-offset={b.base_offset}")
    elif which == 10:
        b.leader_epoch = _evil_int(rng, 32)
        label.append("leader-epoch")
    elif which == 11:
        if b.attributes & 7 and b.records:
            raw = bytearray(b.records)
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            b.records = bytes(raw)
            label.append("corrupt-compressed")
        else:
            b.records = b.records[: rng.randrange(len(b.records) + 1)]
            label.append("truncated-records")
    elif which == 12:
        many = rng.choice([1000, 20000])
        b.records = _many_records(many)
        b.count, b.last_offset_delta = many, many - 1
        label.append(f"many-records={many}")
    elif which == 13:
        # a control batch with a garbage control record
        b.attributes |= 0x20
        b.records = encode_record(Record(0, key=b"\x00\x00\x00\x07", value=b"\xff"))
        b.count, b.last_offset_delta = 1, 0
        label.append("control-garbage")
    else:
        b.records = b.records + bytes(rng.randrange(1, 64))
        label.append("trailing-bytes-in-batch")


@functools.cache
def _many_records(n: int) -> bytes:
    return b"".join(encode_record(Record(i, key=None, value=b"")) for i in range(n))


def legacy_message_set(rng: random.Random) -> bytes:
    """A magic v0/v1 message (zlib CRC32), possibly with a lying size or codec."""
    magic = rng.choice([0, 1])
    attributes = rng.choice([0, 0, 1, 2, 3, 7])
    key, value = b"legacy", b"message"
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += struct.pack(">q", now_ms())
    body += I32.pack(len(key)) + key + I32.pack(len(value)) + value
    crc = zlib.crc32(body)
    message = struct.pack(">I", crc) + body
    size = len(message) + rng.choice([0, 0, -1, 5, I32_MAX - 20])
    return struct.pack(">qi", 0, wrap32(size)) + message
