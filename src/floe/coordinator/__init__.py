"""Coordinators: state machines whose durable state is a journal of records.

Each coordinator computes ``(records, response)`` for a request, appends the records to
its :class:`~floe.storage.journal.Journal`, waits for them to be durable, and only then
applies them with the same replay function that rebuilds its state at start-up.
"""
