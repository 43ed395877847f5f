"""Which failures a cluster broker waits out (leaves, then joins again) and which stop
it (:func:`floe.app.passes`). A broker that exited on the first two needed a
supervisor to come back (the chaos suite saw a member exit on a bucket read cut in the
middle of its start: obstore's error reached the top unwrapped; and a broker restarted
after a metadata-store restart find its former run's registration alive past a session
timeout, as etcd gives leases their full TTL again when it restarts); one that looped on
the last two would hide a mistake an operator must fix."""

from __future__ import annotations

import pytest
from obstore.exceptions import GenericError, PermissionDeniedError

from floe.app import passes
from floe.cluster.interface import (
    BrokerIdTakenError,
    MetadataUnavailableError,
    RegistrationLapsedError,
)
from floe.errors import ConfigError
from floe.storage.interface import NotOwnerError, StorageError
from floe.storage.object.layout import CorruptObjectError


@pytest.mark.parametrize(
    "exc",
    [
        MetadataUnavailableError("etcd at 127.0.0.1:2379: connection reset by peer"),
        RegistrationLapsedError("the registration lapsed"),
        NotOwnerError("this broker was fenced"),
        StorageError("cannot read the bucket: connection refused"),
        GenericError("Error performing GET ... after 3 retries"),
        BrokerIdTakenError("broker id 3 is registered and alive"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_unreachable_store_or_bucket_or_a_fencing_passes(exc: Exception) -> None:
    assert passes(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ConfigError("cluster.metadata.url needs storage.type = s3"),
        CorruptObjectError("wal/2/00000000000000000721-2.wal: bad CRC"),
        PermissionDeniedError("Access Denied"),
        OSError(98, "Address already in use"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_mistake_or_a_corrupt_object_stops_the_broker(exc: Exception) -> None:
    assert not passes(exc)
