"""The web console: server-rendered pages (Jinja2) on the admin port, over the same
:class:`~floe.admin.Admin` facade as the admin API.

Pages render what the facade answers at request time; the small script
(``static/console.js``) refreshes live numbers from the JSON API every few seconds and
sends the forms (create/delete topic, table toggle, SQL) to it. Templates and static
files are package data (installed with Floe, nothing from a CDN: works offline).

Every page asks the request's :class:`~floe.admin.access.Viewer` (set by the admin
gate) what its principal may see and do: lists leave out what it may not describe, a
page it may not read answers 403, and buttons for what it may not do are not rendered
(the API refuses them anyway). The SQL page is only for the SQL grant.

Only the composition root installs it (:func:`install_console`); nothing imports it.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.staticfiles import StaticFiles

from floe import __version__
from floe.admin import Admin, AdminError, ForbiddenError, NotFoundError
from floe.admin.access import viewer
from floe.admin.routes import overview_of, visible_topics
from floe.admin.tables import STATUS_DISABLED
from floe.config.tabletopic import COMMIT_INTERVAL_MS, CONVERT_TYPES, CONVERT_VALUE_TYPE
from floe.coordinator.group.coordinator import TOPIC as OFFSETS_TOPIC
from floe.coordinator.txn.coordinator import TOPIC as TXN_TOPIC
from floe.registry.api.authz import topic_of
from floe.security.acl import CLUSTER_NAME, AclOperation, ResourceType

HERE = Path(__file__).parent
PAGES = (
    ("/", "Overview"),
    ("/topics", "Topics"),
    ("/schemas", "Schemas"),
    ("/groups", "Groups"),
    ("/sql", "SQL"),
)


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tojson_data"] = lambda v: json.dumps(_plain(v))
    env.filters["bytes"] = human_bytes
    env.globals["CLUSTER"] = CLUSTER_NAME  # the resource name of cluster ACLs
    return env


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def install_console(app: FastAPI, admin: Admin) -> None:
    """Serve the console's pages at ``/`` and its assets at ``/static`` on ``app``."""
    env = _env()
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="console-static")

    op, topic_type, group_type = AclOperation, ResourceType.TOPIC, ResourceType.GROUP

    def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        who = viewer(request)
        pages = [(href, label) for href, label in PAGES if href != "/sql" or who.sql_allowed]
        html = env.get_template(template).render(
            pages=pages, path=request.url.path, version=__version__, viewer=who, **context
        )
        return HTMLResponse(html, status_code=status, headers={"X-Frame-Options": "DENY"})

    def failed(request: Request, exc: AdminError) -> HTMLResponse:
        status = 400
        if isinstance(exc, NotFoundError):
            status = 404
        elif isinstance(exc, ForbiddenError):
            status = 403
        return page(request, "error.html", status, message=str(exc))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def overview(request: Request) -> HTMLResponse:
        who = viewer(request)
        topics = visible_topics(admin, who)
        every_table = await admin.tables.status()
        await admin.groups.refreshed()
        totals = overview_of(admin, topics, every_table, who)
        tables = [t for t in every_table if who.may(op.DESCRIBE, topic_type, t.topic)]
        cluster = (
            admin.cluster() if who.may(op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else None
        )
        owned = Counter(o.owner for o in cluster.ownership) if cluster else Counter()
        ownership = cluster.ownership if cluster else []
        group_partitions = Counter(o.owner for o in ownership if o.topic == OFFSETS_TOPIC)
        txn_partitions = Counter(o.owner for o in ownership if o.topic == TXN_TOPIC)
        table_rounds = Counter(
            t.coordinator for t in (cluster.table_coordinators if cluster else [])
        )
        return page(
            request,
            "overview.html",
            cluster=cluster,
            totals=totals,
            table_topics=sum(t.table_topic for t in topics),
            owned=owned,
            group_partitions=group_partitions,
            txn_partitions=txn_partitions,
            table_rounds=table_rounds,
            not_live=sorted(owned.keys() - {b.node_id for b in cluster.brokers}) if cluster else [],
            topics=topics,
            tables=tables,
        )

    @app.get("/topics", response_class=HTMLResponse, include_in_schema=False)
    async def topics(request: Request) -> HTMLResponse:
        rows = []
        for t in visible_topics(admin, viewer(request)):
            detail = admin.topics.describe(t.topic)
            values = {c.name: c.value for c in detail.configs}
            rows.append(
                {
                    "summary": t,
                    "interval": values.get(COMMIT_INTERVAL_MS.name),
                    "mode": values.get(CONVERT_VALUE_TYPE.name),
                }
            )
        return page(
            request,
            "topics.html",
            rows=rows,
            modes=CONVERT_TYPES,
            default_interval=COMMIT_INTERVAL_MS.default,
        )

    @app.get("/topics/{topic}", response_class=HTMLResponse, include_in_schema=False)
    async def topic(request: Request, topic: str) -> HTMLResponse:
        who = viewer(request)
        try:
            who.require(op.DESCRIBE, topic_type, topic)
            detail = admin.topics.describe(topic)
        except AdminError as exc:
            return failed(request, exc)
        if not who.may(op.DESCRIBE_CONFIGS, topic_type, topic):
            detail = dataclasses.replace(detail, configs=[], overrides={})
        status = None
        if detail.table_topic or any(c.startswith("table.topic.") for c in detail.overrides):
            try:
                status = (await admin.tables.status(topic))[0]
            except NotFoundError:
                status = None
        return page(
            request,
            "topic.html",
            topic=detail,
            table=status,
            table_live=status is not None and status.status != STATUS_DISABLED,
        )

    @app.get("/schemas", response_class=HTMLResponse, include_in_schema=False)
    async def schemas(request: Request) -> HTMLResponse:
        return page(
            request,
            "schemas.html",
            subjects=[
                s
                for s in admin.schemas.subjects()
                if viewer(request).may(op.DESCRIBE, topic_type, topic_of(s.subject))
            ],
            enabled=admin.schemas.registry is not None,
        )

    @app.get("/schemas/{subject}", response_class=HTMLResponse, include_in_schema=False)
    async def subject(request: Request, subject: str) -> HTMLResponse:
        try:
            viewer(request).require(op.READ, topic_type, topic_of(subject))
            detail = admin.schemas.subject(subject)
        except AdminError as exc:
            return failed(request, exc)
        return page(request, "subject.html", subject=detail)

    @app.get("/groups", response_class=HTMLResponse, include_in_schema=False)
    async def groups(request: Request) -> HTMLResponse:
        who = viewer(request)
        await admin.groups.refreshed()
        listed = [g for g in admin.groups.all() if who.may(op.DESCRIBE, group_type, g.group)]
        return page(request, "groups.html", groups=listed)

    @app.get("/groups/{group}", response_class=HTMLResponse, include_in_schema=False)
    async def group(request: Request, group: str) -> HTMLResponse:
        who = viewer(request)
        try:
            who.require(op.DESCRIBE, group_type, group)
            await admin.groups.refreshed()
            detail = admin.groups.describe(group)
        except AdminError as exc:
            return failed(request, exc)
        # the topics its offsets may be reset on (READ on the group and the topic)
        topics = []
        if who.may(op.READ, group_type, group):
            mine = {p.topic for p in detail.partitions}
            topics = sorted(
                t.topic
                for t in admin.topics.all()
                if who.may(op.READ, topic_type, t.topic) and (t.topic in mine or not mine)
            )
        return page(request, "group.html", group=detail, topics=topics)

    @app.get("/sql", response_class=HTMLResponse, include_in_schema=False)
    async def sql(request: Request, q: str = "") -> HTMLResponse:
        try:
            viewer(request).require_sql()
        except AdminError as exc:
            return failed(request, exc)
        tables = await admin.tables.status()
        return page(request, "sql.html", tables=tables, statement=q)
