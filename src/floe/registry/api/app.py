"""The registry's REST routes (Confluent Schema Registry API) on Starlette.

Handlers parse the request, call :class:`~floe.registry.core.service.Registry` and
shape the response; every domain error is turned into a Confluent body by
:func:`_registry_error` with the codes of :mod:`.errors`, and nothing else here knows
an error code. Unknown failures answer 500 with error code 50001 and no stack trace
(the stack goes to the log).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from floe.registry.api.errors import STORE_ERROR, error_code, status_of
from floe.registry.core.errors import InvalidRequestError, InvalidSchemaError, RegistryError
from floe.registry.core.model import Reference, SchemaType, SchemaVersion, Subject
from floe.registry.core.service import NewSchema, Registry

log = logging.getLogger("floe.registry.api")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
DRAIN_FACTOR = 4
ACCEPTED_TYPES = (
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
)


class _BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type=CONTENT_TYPE)


def _error(code: int, message: str) -> Response:
    return _json({"error_code": code, "message": message}, status_of(code))


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def _subject(request: Request) -> Subject:
    return Subject(unquote(request.path_params["subject"]))


class _KeepEncodedSlashes:
    """Route on path segments as the client encoded them: a subject such as
    ``common/money.proto`` (what Confluent's protobuf serializer names reference
    subjects) arrives as ``common%2Fmoney.proto`` and must stay one segment. Each
    segment is decoded, then ``%`` and ``/`` re-escaped; :func:`_subject` and
    :func:`_param` decode them back."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            segments = raw.decode("latin-1").split("?", 1)[0].split("/")
            scope = dict(scope)
            scope["path"] = "/".join(
                unquote(seg).replace("%", "%25").replace("/", "%2F") for seg in segments
            )
        await self.app(scope, receive, send)


def _param(request: Request, name: str) -> str:
    return unquote(request.path_params[name])


class RegistryApp:
    """Builds the Starlette app around one :class:`Registry` (owned by the caller)."""

    def __init__(self, registry: Registry, max_body_bytes: int) -> None:
        self.registry = registry
        self.max_body_bytes = max_body_bytes

    async def _body(self, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type and content_type not in ACCEPTED_TYPES:
            raise _BodyError(415, f"Unsupported content type {content_type!r}")
        too_large = _BodyError(413, f"Request body larger than {self.max_body_bytes} bytes")
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > DRAIN_FACTOR * self.max_body_bytes:
            raise too_large  # not worth reading: the client sees the connection close
        body = bytearray()
        seen = 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > DRAIN_FACTOR * self.max_body_bytes:
                raise too_large
            if seen <= self.max_body_bytes:
                body += chunk
        if seen > self.max_body_bytes:
            # Read (and dropped) to the end, so a client that writes its whole body
            # before reading the answer gets the 413 instead of a reset connection.
            raise too_large
        try:
            data = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError as exc:
            raise _BodyError(400, f"Unexpected JSON input: {exc}") from None
        if not isinstance(data, dict):
            raise _BodyError(422, "The request body must be a JSON object")
        return data

    async def _new_schema(self, request: Request) -> tuple[NewSchema, dict[str, Any]]:
        body = await self._body(request)
        schema = body.get("schema")
        if not isinstance(schema, str) or not schema.strip():
            raise InvalidSchemaError("Empty schema" if not schema else "schema must be a string")
        try:
            schema_type = SchemaType(body.get("schemaType") or "AVRO")
        except ValueError:
            raise InvalidSchemaError(f"Unknown schema type {body.get('schemaType')!r}") from None
        refs = body.get("references") or []
        try:
            references = tuple(
                Reference(str(r["name"]), Subject(str(r["subject"])), int(r["version"]))
                for r in refs
            )
        except (KeyError, TypeError, ValueError):
            raise InvalidRequestError(
                "references must be a list of {name, subject, version}"
            ) from None
        return NewSchema(schema, schema_type, references), body

    # -- shapes -------------------------------------------------------------------
    def _schema_fields(self, sv: SchemaVersion, fmt: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if sv.schema_type is not SchemaType.AVRO:
            out["schemaType"] = sv.schema_type.value
        if sv.references:
            out["references"] = [r.to_json() for r in sv.references]
        text = sv.schema
        if fmt:
            text = self.registry.parsed(sv).formatted(fmt, sv.schema)
        out["schema"] = text
        return out

    def _version_body(self, sv: SchemaVersion, fmt: str | None = None) -> dict[str, Any]:
        return {
            "subject": sv.subject,
            "version": sv.version,
            "id": sv.schema_id,
            **self._schema_fields(sv, fmt),
        }

    # -- routes -------------------------------------------------------------------
    async def root(self, request: Request) -> Response:
        return _json({})

    async def health(self, request: Request) -> Response:
        return _json({"status": "UP"})

    async def subjects(self, request: Request) -> Response:
        prefix = request.query_params.get("subjectPrefix", "")
        return _json(self.registry.subjects(deleted=_flag(request, "deleted"), prefix=prefix))

    async def subject_versions(self, request: Request) -> Response:
        found = self.registry.versions(_subject(request), deleted=_flag(request, "deleted"))
        return _json([sv.version for sv in found])

    async def register(self, request: Request) -> Response:
        new, body = await self._new_schema(request)
        schema_id, version = body.get("id"), body.get("version")
        if (schema_id is not None and not isinstance(schema_id, int)) or (
            version is not None and not isinstance(version, int)
        ):
            raise InvalidRequestError("id and version must be integers")
        sv = await self.registry.register(
            _subject(request),
            new,
            normalize=_flag(request, "normalize"),
            schema_id=schema_id if schema_id not in (None, 0, -1) else None,
            version=version if version not in (None, 0, -1) else None,
        )
        return _json({"id": sv.schema_id})

    async def lookup(self, request: Request) -> Response:
        new, _ = await self._new_schema(request)
        sv = self.registry.lookup(_subject(request), new, deleted=_flag(request, "deleted"))
        return _json(self._version_body(sv))

    async def get_version(self, request: Request) -> Response:
        sv = self.registry.version(
            _subject(request), _param(request, "version"), deleted=_flag(request, "deleted")
        )
        return _json(self._version_body(sv, request.query_params.get("format")))

    async def get_version_schema(self, request: Request) -> Response:
        sv = self.registry.version(
            _subject(request), _param(request, "version"), deleted=_flag(request, "deleted")
        )
        return Response(sv.schema, media_type=CONTENT_TYPE)

    async def referenced_by(self, request: Request) -> Response:
        return _json(self.registry.referenced_by(_subject(request), _param(request, "version")))

    async def delete_subject(self, request: Request) -> Response:
        permanent = _flag(request, "permanent")
        return _json(await self.registry.delete_subject(_subject(request), permanent=permanent))

    async def delete_version(self, request: Request) -> Response:
        return _json(
            await self.registry.delete_version(
                _subject(request),
                _param(request, "version"),
                permanent=_flag(request, "permanent"),
            )
        )

    def _id(self, request: Request) -> int:
        try:
            return int(_param(request, "id"))
        except ValueError:
            raise HTTPException(404) from None

    async def schema_by_id(self, request: Request) -> Response:
        subject = request.query_params.get("subject") or None
        sv = self.registry.by_id(self._id(request), Subject(subject) if subject else None)
        body = self._schema_fields(sv, request.query_params.get("format"))
        return _json(body)

    async def schema_text_by_id(self, request: Request) -> Response:
        subject = request.query_params.get("subject") or None
        sv = self.registry.by_id(self._id(request), Subject(subject) if subject else None)
        return Response(sv.schema, media_type=CONTENT_TYPE)

    async def id_subjects(self, request: Request) -> Response:
        found = self.registry.id_usages(self._id(request), deleted=_flag(request, "deleted"))
        return _json(sorted({sv.subject for sv in found}))

    async def id_versions(self, request: Request) -> Response:
        found = self.registry.id_usages(self._id(request), deleted=_flag(request, "deleted"))
        return _json([{"subject": sv.subject, "version": sv.version} for sv in found])

    async def schema_types(self, request: Request) -> Response:
        return _json([t.value for t in SchemaType])

    async def schemas(self, request: Request) -> Response:
        prefix = request.query_params.get("subjectPrefix", "")
        deleted = _flag(request, "deleted")
        latest_only = _flag(request, "latestOnly")
        out = []
        for subject in self.registry.subjects(deleted=deleted, prefix=prefix):
            found = self.registry.versions(subject, deleted=deleted)
            out += [self._version_body(sv) for sv in (found[-1:] if latest_only else found)]
        offset = int(request.query_params.get("offset", "0") or 0)
        limit = int(request.query_params.get("limit", "-1") or -1)
        return _json(out[offset:] if limit < 0 else out[offset : offset + limit])

    def _config_subject(self, request: Request) -> Subject | None:
        subject = request.path_params.get("subject")
        return Subject(unquote(subject)) if subject is not None else None

    async def get_config(self, request: Request) -> Response:
        level = self.registry.get_config(
            self._config_subject(request), default_to_global=_flag(request, "defaultToGlobal")
        )
        return _json({"compatibilityLevel": level.value})

    async def put_config(self, request: Request) -> Response:
        body = await self._body(request)
        level = body.get("compatibility", body.get("compatibilityLevel"))
        result = await self.registry.set_config(self._config_subject(request), level)
        return _json({"compatibility": result.value})

    async def delete_config(self, request: Request) -> Response:
        old = await self.registry.delete_config(self._config_subject(request))
        return _json({"compatibilityLevel": old.value})

    async def get_mode(self, request: Request) -> Response:
        mode = self.registry.get_mode(
            self._config_subject(request), default_to_global=_flag(request, "defaultToGlobal")
        )
        return _json({"mode": mode.value})

    async def put_mode(self, request: Request) -> Response:
        body = await self._body(request)
        mode = await self.registry.set_mode(
            self._config_subject(request), body.get("mode"), force=_flag(request, "force")
        )
        return _json({"mode": mode.value})

    async def delete_mode(self, request: Request) -> Response:
        old = await self.registry.delete_mode(_subject(request))
        return _json({"mode": old.value})

    async def compatibility(self, request: Request) -> Response:
        new, _ = await self._new_schema(request)
        messages = self.registry.check(
            _subject(request),
            _param(request, "version") if "version" in request.path_params else None,
            new,
        )
        out: dict[str, Any] = {"is_compatible": not messages}
        if _flag(request, "verbose"):
            out["messages"] = messages
        return _json(out)

    # -- assembly -----------------------------------------------------------------
    def build(self, middleware: Sequence[Middleware] = ()) -> ASGIApp:
        """The ASGI app; ``middleware`` runs inside the router stack (where the scope
        carries the matched route: what request metrics label requests with)."""
        r = self
        subj = "/subjects/{subject}"
        ver = subj + "/versions/{version}"
        routes = [
            Route("/", r.root, methods=["GET"]),
            Route("/health", r.health, methods=["GET"]),
            Route("/subjects", r.subjects, methods=["GET"]),
            Route(subj, r.lookup, methods=["POST"]),
            Route(subj, r.delete_subject, methods=["DELETE"]),
            Route(subj + "/versions", r.subject_versions, methods=["GET"]),
            Route(subj + "/versions", r.register, methods=["POST"]),
            Route(ver, r.get_version, methods=["GET"]),
            Route(ver, r.delete_version, methods=["DELETE"]),
            Route(ver + "/schema", r.get_version_schema, methods=["GET"]),
            Route(ver + "/referencedby", r.referenced_by, methods=["GET"]),
            Route("/schemas", r.schemas, methods=["GET"]),
            Route("/schemas/types", r.schema_types, methods=["GET"]),
            Route("/schemas/ids/{id}", r.schema_by_id, methods=["GET"]),
            Route("/schemas/ids/{id}/schema", r.schema_text_by_id, methods=["GET"]),
            Route("/schemas/ids/{id}/subjects", r.id_subjects, methods=["GET"]),
            Route("/schemas/ids/{id}/versions", r.id_versions, methods=["GET"]),
            Route("/config", r.get_config, methods=["GET"]),
            Route("/config", r.put_config, methods=["PUT"]),
            Route("/config", r.delete_config, methods=["DELETE"]),
            Route("/config/{subject}", r.get_config, methods=["GET"]),
            Route("/config/{subject}", r.put_config, methods=["PUT"]),
            Route("/config/{subject}", r.delete_config, methods=["DELETE"]),
            Route("/mode", r.get_mode, methods=["GET"]),
            Route("/mode", r.put_mode, methods=["PUT"]),
            Route("/mode/{subject}", r.get_mode, methods=["GET"]),
            Route("/mode/{subject}", r.put_mode, methods=["PUT"]),
            Route("/mode/{subject}", r.delete_mode, methods=["DELETE"]),
            Route("/compatibility" + subj + "/versions", r.compatibility, methods=["POST"]),
            Route("/compatibility" + ver, r.compatibility, methods=["POST"]),
        ]
        return _KeepEncodedSlashes(
            Starlette(
                routes=routes,
                middleware=middleware,
                exception_handlers={
                    RegistryError: _registry_error,
                    _BodyError: _body_error,
                    HTTPException: _http_error,
                    Exception: _unexpected,
                },
            )
        )


async def _registry_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RegistryError)
    return _error(error_code(exc), str(exc))


async def _body_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _BodyError)
    return _error(exc.status, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, f"HTTP {exc.status_code} {exc.detail}")


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("registry.request.failed path=%s", request.url.path, exc_info=exc)
    return _error(STORE_ERROR, "Internal Server Error")
