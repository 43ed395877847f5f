"""A table topic on a broker whose only Kafka listener is SASL_SSL, with the authorizer
on: the table pipeline's Spark tasks fetch over TLS (pinned to the broker's
certificate) and authenticate as the broker's internal user, with no ACL granted to
it, while that user stays invisible and unchangeable to Kafka clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.broker import Broker
from helpers.certs import Pki, make_pki
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts

pytestmark = pytest.mark.timeout(300)

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
TOPIC = "secured_clicks"
RECORDS = 40
DEADLINE_S = 180.0
TIMEOUT = 15


@dataclass
class Secured:
    broker: Broker
    pki: Pki

    def client_config(self) -> dict[str, Any]:
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": ADMIN,
            "sasl.password": ADMIN_PASSWORD,
            "ssl.ca.location": str(self.pki.ca_cert),
        }

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.broker.bootstrap, **self.client_config()})


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root: Path = tmp_path_factory.mktemp("secured-table")
    pki = make_pki(root / "pki")
    b = Broker(root / "data")
    b.settings.update(
        {
            "listeners": f"SASL_SSL://127.0.0.1:{b.port}",
            "ssl.certificate.location": str(pki.server_cert),
            "ssl.key.location": str(pki.server_key),
            "authorizer.enable": "true",
            "security.bootstrap.user": ADMIN,
            "security.bootstrap.password": ADMIN_PASSWORD,
        }
    )
    try:
        b.start()
        yield Secured(b, pki)
        b.stop()
    finally:
        b.close()


def table_rows(broker: Broker) -> list[dict[str, Any]]:
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    try:
        catalog = cat.load_catalog(cat.CatalogSettings.from_config(config))
        table = cat.load_table(catalog, "default", TOPIC)
    except Exception:  # not created yet
        return []
    rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
    return rows


def test_the_pipeline_fetches_over_sasl_ssl_as_the_broker(secured: Secured) -> None:
    admin = secured.admin()
    configs = {"table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
               "table.topic.convert.value.type": "string"}  # fmt: skip
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1, config=configs)]).values():
        f.result(TIMEOUT)
    base = recent_ts()
    produced = confluent_produce(
        secured.broker.bootstrap,
        TOPIC,
        [Record(f"k{i}".encode(), f"v{i}".encode(), (), base + i, i % 2) for i in range(RECORDS)],
        **secured.client_config(),
    )
    deadline = time.monotonic() + DEADLINE_S
    rows = table_rows(secured.broker)
    while len(rows) < RECORDS and time.monotonic() < deadline:
        secured.broker.assert_alive()
        time.sleep(0.5)
        rows = table_rows(secured.broker)
    log = secured.broker.stderr_text()
    assert "tabletopic.pipeline_listener listener=SASL_SSL protocol=SASL_SSL" in log
    assert len(rows) == RECORDS, log[-3000:]
    got = {(r["_kafka_metadata"]["partition"], r["_kafka_metadata"]["offset"]): r for r in rows}
    for rec in produced:
        assert got[(rec.partition, rec.offset)]["_kafka_value"] == rec.value.decode()
    assert "sasl.failed" not in log


def test_the_internal_user_is_not_a_kafka_user(secured: Secured) -> None:
    admin = secured.admin()
    described = admin.describe_user_scram_credentials().result(TIMEOUT)
    assert set(described) == {ADMIN}
    upsert = UserScramCredentialUpsertion(
        "__floe_pipeline", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"guess"
    )
    with pytest.raises(KafkaException, match=r"Usernames starting __floe are Floe's"):
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(TIMEOUT)
