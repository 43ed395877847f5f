"""Floe's protocol fuzzer: hostile Kafka clients against a real ``floe up``.

Run it with ``python -m fuzz`` (``make fuzz``, ``make fuzz-short``); docs/operations.md
("Fuzzing") explains the modes, the oracles and how to replay a finding. It drives the
broker from outside, as a client would, so it lives beside ``benchmarks/`` rather than
inside ``src/floe`` and imports nothing from Floe.

Modules, from the wire up:

- :mod:`fuzz.wire`: varints, headers and frames written by hand (lies included);
- :mod:`fuzz.layout`: where every field of an encoded request sits (kio's schemas);
- :mod:`fuzz.batches`: record batches, honest, forged and compression bombs;
- :mod:`fuzz.seeds`, :mod:`fuzz.capture`: the corpus, from kio and from real clients;
- :mod:`fuzz.mutate`: one frame seed -> one hostile frame;
- :mod:`fuzz.lanes`: pipelined connections that count what the broker processed;
- :mod:`fuzz.attacks`: connection floods, slowloris and never-reading clients;
- :mod:`fuzz.sentinel`: the well-behaved client whose latency and data are judged;
- :mod:`fuzz.target`, :mod:`fuzz.topics`, :mod:`fuzz.client`: the broker process,
  its topics, a small blocking kio client;
- :mod:`fuzz.run`, :mod:`fuzz.oracles`, :mod:`fuzz.report`: a run, its verdicts, its
  output; :mod:`fuzz.replay` resends a finding's frames.
"""
