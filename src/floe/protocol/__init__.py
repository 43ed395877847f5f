"""Sans-I/O Kafka wire code: framing, request/response codecs, record-batch headers.

Nothing in this package touches sockets, files, asyncio or broker state.
"""
