"""Metrics (Prometheus text on the admin port's ``/metrics``) and structured logs.

The only package that imports ``prometheus_client``. What the Kafka path counts lives in
plain ints (:mod:`floe.broker.stats`); everything else is read when ``/metrics`` is
scraped: :mod:`.collectors` turns the counters, the store, the group offsets and the
table-topic status into metric families (pure functions, unit tested), :mod:`.metrics`
assembles them for one scrape and times the Schema Registry's HTTP requests, and
:mod:`.logs` formats log records as JSON lines (``log.format = json``).

docs/operations.md lists every metric.
"""
