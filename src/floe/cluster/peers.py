"""Requests one broker of a cluster sends another over the Kafka protocol: the
transaction coordinator (on the writer) writing a transaction's markers to the partitions
other brokers lead (WriteTxnMarkers), as Kafka's coordinators do.

One connection per call: a transaction ends with one request per leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from floe.cluster.membership import Membership
from floe.errors import ErrorCode, FloeError, KafkaError
from floe.protocol.client import (
    ResponseError,
    decode_response,
    encode_request,
    marker_results,
    write_txn_markers_request,
)
from floe.protocol.framing import SIZE, FrameTooLargeError, read_frame_size
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

Partitions = list[tuple[str, int]]
DONE = frozenset(
    {ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_producer_epoch}
)
"""Marker answers that end the work on a partition: written, the topic is gone, or a
newer producer epoch fenced the transaction there (nothing to mark: a coordinator skips
it on its own partitions too)."""

CLIENT_ID = "floe-broker"
MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest response accepted (a WriteTxnMarkers answer is a few bytes per partition)."""


class PeerError(FloeError):
    """The other broker could not be reached, or did not answer in time or sensibly."""


async def call(host: str, port: int, body: Any, timeout_s: float) -> Any:
    """Send ``body`` (a kio request) to the broker at ``host:port`` and return its kio
    response.

    Raises:
        PeerError: no connection, no (whole) answer within ``timeout_s``, or an answer
            that is not a response to the request.
    """
    where = f"{host}:{port}"
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(encode_request(body, 1, CLIENT_ID))
                await writer.drain()
                size = read_frame_size(await reader.readexactly(SIZE.size), MAX_FRAME_BYTES)
                frame = await reader.readexactly(size)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError:
        raise PeerError(f"broker {where}: no answer within {timeout_s:g} s") from None
    except (OSError, asyncio.IncompleteReadError, FrameTooLargeError) as exc:
        raise PeerError(f"broker {where}: {exc}") from None
    try:
        correlation, response = decode_response(body, frame)
    except ResponseError as exc:
        raise PeerError(f"broker {where}: {exc}") from None
    if correlation != 1:
        raise PeerError(f"broker {where}: an answer to request {correlation}, not 1")
    return response


def marker_writer(
    membership: Membership, timeout_s: float
) -> Callable[[Partitions, int, int, bool, int], Awaitable[Partitions]]:
    """The transaction coordinator's way to partitions other brokers lead: one
    WriteTxnMarkers per owner (as the last lease renewal saw the owners), answering the
    partitions to try again (no live owner, no answer, or another error: the
    coordinator retries after the owners were read again).

    Raises:
        KafkaError: TRANSACTION_COORDINATOR_FENCED: a partition's leader has seen a
            marker of a newer coordinator for this producer (this broker is not the
            coordinator any more: it must stop).
    """

    async def write(
        partitions: Partitions, producer_id: int, epoch: int, commit: bool, coordinator: int
    ) -> Partitions:
        live = {b.broker_id: b for b in membership.view.brokers}
        again: Partitions = []
        by_owner: dict[int, Partitions] = defaultdict(list)
        for topic, partition in partitions:
            owner = membership.owner(TopicName(topic), PartitionId(partition))
            if owner is None or owner not in live or owner == membership.me.broker_id:
                again.append((topic, partition))  # moving: the next view tells where
            else:
                by_owner[owner].append((topic, partition))
        for owner, keys in sorted(by_owner.items()):
            peer = live[owner]
            request = write_txn_markers_request(producer_id, epoch, commit, keys, coordinator)
            try:
                codes = marker_results(await call(peer.host, peer.port, request, timeout_s))
            except PeerError as exc:
                log.warning("txn.remote_markers_failed broker=%d error=%s", owner, exc)
                again += keys
                continue
            if ErrorCode.transaction_coordinator_fenced in codes.values():
                raise KafkaError(
                    f"broker {owner} has markers of a newer transaction coordinator than "
                    f"epoch {coordinator} for producer {producer_id}",
                    ErrorCode.transaction_coordinator_fenced,
                )
            failed = [k for k in keys if codes.get(k, ErrorCode.unknown_server_error) not in DONE]
            if failed:
                log.warning(
                    "txn.remote_markers_refused broker=%d partitions=%s codes=%s",
                    owner, ",".join(f"{t}-{p}" for t, p in failed),
                    ",".join(codes.get(k, ErrorCode.unknown_server_error).name for k in failed),
                )  # fmt: skip
            again += failed
        return again

    return write
