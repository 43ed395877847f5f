"""``floe schema``: register, list, get, compat and config against a running Floe, with
one-line errors and exit code 1 on failure."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from helpers.broker import Broker, floe_bin
from helpers.registry import avro_record


def floe_schema(broker: Broker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [floe_bin(), "schema", *args, "--registry", broker.registry_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_round_trip(broker: Broker, tmp_path: Path) -> None:
    subject = f"cli-{uuid.uuid4().hex[:8]}"
    v1 = tmp_path / "v1.avsc"
    v1.write_text(avro_record("R", {"name": "a", "type": "string"}))
    bad = tmp_path / "bad.avsc"
    bad.write_text(avro_record("R", {"name": "a", "type": "int"}))
    proto = tmp_path / "m.proto"
    proto.write_text('syntax = "proto3";\nmessage M { int32 a = 1; }\n')

    done = floe_schema(broker, "register", subject, str(v1))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"registered {subject} version 1 id ")
    done = floe_schema(broker, "register", f"{subject}-p", str(proto), "--output", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["version"] == 1
    done = floe_schema(broker, "get", f"{subject}-p")
    assert "PROTOBUF" in done.stdout.splitlines()[0] and "message M" in done.stdout
    assert subject in floe_schema(broker, "list").stdout.splitlines()
    assert floe_schema(broker, "compat", subject, str(v1)).stdout.strip() == "compatible"
    done = floe_schema(broker, "compat", subject, str(bad))
    assert done.returncode == 1 and done.stdout.startswith("incompatible")
    assert floe_schema(broker, "config", subject).stdout.strip() == "BACKWARD"
    assert floe_schema(broker, "config", subject, "--level", "full").stdout.strip() == "FULL"
    done = floe_schema(broker, "get", subject, "1", "--output", "json")
    assert json.loads(done.stdout)["subject"] == subject

    done = floe_schema(broker, "register", subject, str(bad))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("floe schema: error: ") and "(error code 409)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = floe_schema(broker, "get", f"nope-{subject}")
    assert done.returncode == 1 and "(error code 40401)" in done.stderr
    done = floe_schema(broker, "register", subject, str(tmp_path / "missing.avsc"))
    assert done.returncode == 1 and "cannot read" in done.stderr


def test_cli_unreachable_registry(tmp_path: Path) -> None:
    done = subprocess.run(
        [floe_bin(), "schema", "list", "--registry", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("floe schema: error: cannot reach the registry")
    assert "Traceback" not in done.stderr
