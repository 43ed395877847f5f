"""``floe produce``, ``floe consume``, ``--output yaml``, a ``[cli]`` profile and
``floe completion``, run as subprocesses against the session's ``floe up``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import yaml

from helpers.admin import unique_topic
from helpers.broker import Broker, floe_bin, free_port


def floe(
    *args: str, stdin: str | bytes = b"", cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [floe_bin(), *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=timeout,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("FLOE_")},
        check=False,
    )


def text(done: subprocess.CompletedProcess[bytes]) -> tuple[int, str, str]:
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_text_lines_with_keys_and_headers_round_trip(broker: Broker, tmp_path: Path) -> None:
    topic = unique_topic("cli-pc")
    b = ["--brokers", broker.bootstrap]
    assert text(floe("topic", "create", topic, "--admin", broker.admin_url))[0] == 0
    code, out, err = text(
        floe(
            "produce", topic, "--parse-key", ":", "--header", "h=1", "--header", "src=cli",
            "--output", "json", *b, stdin="k1:first\nk2:second:with colon\nk3:\n",
        )
    )  # fmt: skip
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary["records"] == 3
    assert summary["partitions"] == [{"partition": 0, "first_offset": 0, "last_offset": 2}]

    code, out, err = text(floe("consume", topic, "--from-beginning", "-o", "json", *b))
    assert (code, err) == (0, "")
    records = [json.loads(line) for line in out.splitlines()]
    for r in records:
        assert r.pop("timestamp") > 0
    headers = [{"key": "h", "value": "1"}, {"key": "src", "value": "cli"}]
    assert records == [
        {"topic": topic, "partition": 0, "offset": i, "key": k, "value": v, "headers": headers}
        for i, (k, v) in enumerate([("k1", "first"), ("k2", "second:with colon"), ("k3", "")])
    ]

    # -n stops early; --offset starts late; yaml is one list of records
    code, out, _ = text(floe("consume", topic, "--offset", "1", "-n", "1", "-o", "yaml", *b))
    assert code == 0
    [one] = yaml.safe_load(out)
    assert (one["offset"], one["key"], one["value"]) == (1, "k2", "second:with colon")


def test_avro_through_the_registry_decodes_with_auto(broker: Broker, tmp_path: Path) -> None:
    topic = unique_topic("cli-avro")
    schema = tmp_path / "user.avsc"
    schema.write_text(
        json.dumps(
            {
                "type": "record",
                "name": "User",
                "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
            }
        )
    )
    where = ["--brokers", broker.bootstrap, "--registry", broker.registry_url]
    missing = text(floe("produce", topic, *where, stdin="x\n"))
    assert missing[0] == 1 and missing[2].startswith(f"floe: error: unknown topic {topic} ")
    assert text(floe("topic", "create", topic, "--admin", broker.admin_url))[0] == 0
    lines = '{"name": "ann", "age": 31}\n\n{"name": "bob", "age": 42}\n'
    code, _, err = text(
        floe("produce", topic, "--format", "avro", "--schema", str(schema),
             "--key-field", "name", *where, stdin=lines)
    )  # fmt: skip
    assert (code, err) == (0, ""), err
    code, out, err = text(
        floe("consume", topic, "--from-beginning", "--format", "auto", "-o", "json", *where)
    )
    assert (code, err) == (0, "")
    assert [(r["key"], r["value"]) for r in map(json.loads, out.splitlines())] == [
        ("ann", {"name": "ann", "age": 31}),
        ("bob", {"name": "bob", "age": 42}),
    ]
    code, out, _ = text(floe("schema", "get", f"{topic}-value", "-o", "yaml", *where[2:]))
    assert code == 0 and yaml.safe_load(out)["version"] == 1

    bad = text(floe("produce", topic, "-f", "avro", "--schema", str(schema), *where, stdin="{}"))
    assert bad[0] == 1 and bad[2].startswith("floe: error: ") and bad[2].count("\n") == 1


def test_yaml_output_and_a_cli_profile_without_flags(broker: Broker, tmp_path: Path) -> None:
    topic = unique_topic("cli-prof")
    (tmp_path / "floe.toml").write_text(
        f'[cli]\nbrokers = "{broker.bootstrap}"\nregistry = "{broker.registry_url}"\n'
        f'admin = "{broker.admin_url}"\n'
    )
    code, _, err = text(floe("topic", "create", topic, "--partitions", "2", cwd=tmp_path))
    assert (code, err) == (0, "")
    code, out, err = text(floe("produce", topic, "--generate", "20", "--size", "64", cwd=tmp_path))
    assert (code, err) == (0, "")
    assert "Records: 20" in out and "Bytes:   1280" in out
    code, out, err = text(floe("topic", "describe", topic, "--output", "yaml", cwd=tmp_path))
    assert (code, err) == (0, "")
    described = yaml.safe_load(out)
    assert described["topic"] == topic
    assert sum(p["log_end"] for p in described["partitions"]) == 20
    code, out, err = text(floe("group", "list", "-o", "yaml", cwd=tmp_path))
    assert (code, err) == (0, "") and isinstance(yaml.safe_load(out)["groups"], list)
    code, out, err = text(floe("table", "status", "-o", "yaml", cwd=tmp_path))
    assert (code, err) == (0, "") and "tables" in yaml.safe_load(out)


def test_a_bad_broker_is_one_line_within_the_timeout(tmp_path: Path) -> None:
    nowhere = ["--brokers", f"127.0.0.1:{free_port()}", "--timeout", "3"]
    for command in (["consume", "t"], ["produce", "t"]):
        start = time.monotonic()
        code, out, err = text(floe(*command, *nowhere, stdin="x\n", cwd=tmp_path))
        assert time.monotonic() - start < 20
        assert (code, out) == (1, "")
        assert err.startswith("floe: error: cannot reach the brokers at 127.0.0.1:")
        assert err.count("\n") == 1 and "Traceback" not in err
    code, _, err = text(floe("--debug", "consume", "t", *nowhere, cwd=tmp_path))
    assert code == 1 and "Traceback" in err
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = text(floe("topic", "list", "--admin", url, cwd=tmp_path))
    assert (code, out) == (1, "")
    assert err == f"floe: cannot reach the admin API at {url}: connection refused\n"


def test_completion_scripts_name_the_commands() -> None:
    code, out, _ = text(floe("completion", "bash"))
    assert code == 0 and "complete -F _floe floe" in out
    for word in ("produce", "consume", "topic", "--from-beginning", "reset-offsets"):
        assert word in out
    syntax = subprocess.run(["bash", "-n"], input=out, text=True, check=False)
    assert syntax.returncode == 0
    code, out, _ = text(floe("completion", "zsh"))
    assert code == 0 and out.startswith("autoload -U +X bashcompinit")
