"""Floe's built-in Schema Registry, compatible with Confluent's REST API.

``core/`` is the domain (subjects, versions, ids, compatibility, per-type parsing and
the store on the ``_schemas`` topic) and never imports HTTP; ``api/`` is the HTTP edge
and the only place that maps domain errors to Confluent error codes.
"""
