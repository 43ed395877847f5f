"""The table of Kafka APIs Floe implements, and ApiVersions (18) built from it.

The versions advertised are exactly the ones each handler implements; a request for
any other (key, version) is answered by the server as unsupported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from floe.broker import (
    acls,
    cluster,
    configs,
    fetch,
    group_offsets,
    groups,
    list_offsets,
    metadata,
    partitions,
    produce,
    reassignments,
    sasl,
    topics,
    txn,
    users,
)
from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.errors import ErrorCode

Handler = Callable[[Broker, RequestContext, Any], Reply]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler


def _api_versions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return api_versions_response(ctx.response_class)


APIS: dict[int, Api] = {
    a.key: a
    for a in (
        Api(0, "Produce", 3, 11, produce.handle),
        Api(1, "Fetch", 4, 16, fetch.handle),
        Api(2, "ListOffsets", 1, 10, list_offsets.handle),
        Api(3, "Metadata", 0, 13, metadata.handle),
        Api(8, "OffsetCommit", 2, 9, group_offsets.handle_commit),
        Api(9, "OffsetFetch", 1, 9, group_offsets.handle_fetch),
        Api(10, "FindCoordinator", 0, 5, groups.handle_find_coordinator),
        Api(11, "JoinGroup", 0, 9, groups.handle_join),
        Api(12, "Heartbeat", 0, 4, groups.handle_heartbeat),
        Api(13, "LeaveGroup", 0, 5, groups.handle_leave),
        Api(14, "SyncGroup", 0, 5, groups.handle_sync),
        Api(15, "DescribeGroups", 0, 5, groups.handle_describe),
        Api(16, "ListGroups", 0, 5, groups.handle_list),
        Api(17, "SaslHandshake", 0, 1, sasl.handle_handshake),
        Api(18, "ApiVersions", 0, 4, _api_versions),
        Api(19, "CreateTopics", 2, 7, topics.handle_create),
        Api(20, "DeleteTopics", 1, 6, topics.handle_delete),
        Api(21, "DeleteRecords", 0, 2, partitions.handle_delete_records),
        Api(22, "InitProducerId", 0, 5, txn.handle_init_producer_id),
        Api(23, "OffsetForLeaderEpoch", 2, 4, partitions.handle_offset_for_leader_epoch),
        Api(28, "TxnOffsetCommit", 0, 4, group_offsets.handle_txn_commit),
        Api(29, "DescribeAcls", 1, 3, acls.handle_describe),
        Api(30, "CreateAcls", 1, 3, acls.handle_create),
        Api(31, "DeleteAcls", 1, 3, acls.handle_delete),
        Api(24, "AddPartitionsToTxn", 0, 3, txn.handle_add_partitions),
        Api(25, "AddOffsetsToTxn", 0, 4, txn.handle_add_offsets),
        Api(26, "EndTxn", 0, 4, txn.handle_end_txn),
        Api(27, "WriteTxnMarkers", 1, 1, txn.handle_write_txn_markers),
        Api(32, "DescribeConfigs", 1, 4, configs.handle_describe),
        Api(33, "AlterConfigs", 0, 2, configs.handle_alter),
        Api(35, "DescribeLogDirs", 1, 4, cluster.handle_describe_log_dirs),
        Api(36, "SaslAuthenticate", 0, 2, sasl.handle_authenticate),
        Api(37, "CreatePartitions", 0, 3, topics.handle_create_partitions),
        Api(42, "DeleteGroups", 0, 2, groups.handle_delete),
        Api(44, "IncrementalAlterConfigs", 0, 1, configs.handle_incremental),
        Api(45, "AlterPartitionReassignments", 0, 1, reassignments.handle_alter),
        Api(46, "ListPartitionReassignments", 0, 0, reassignments.handle_list),
        Api(47, "OffsetDelete", 0, 0, group_offsets.handle_delete),
        Api(50, "DescribeUserScramCredentials", 0, 0, users.handle_describe),
        Api(51, "AlterUserScramCredentials", 0, 0, users.handle_alter),
        Api(60, "DescribeCluster", 0, 2, cluster.handle_describe_cluster),
        Api(61, "DescribeProducers", 0, 0, txn.handle_describe_producers),
        Api(65, "DescribeTransactions", 0, 0, txn.handle_describe_transactions),
        Api(66, "ListTransactions", 0, 2, txn.handle_list_transactions),
    )
}


def supports(api_key: int, api_version: int) -> bool:
    api = APIS.get(api_key)
    return api is not None and api.min_version <= api_version <= api.max_version


def api_versions_response(response_class: type, error_code: ErrorCode = ErrorCode.none) -> Any:
    """An ApiVersionsResponse of the given class listing every implemented API."""
    return build(
        response_class,
        {
            "error_code": error_code,
            "api_keys": [
                {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                for a in APIS.values()
            ],
            "throttle_time": timedelta(0),
        },
    )
