"""The transaction coordinator: producer ids and transactions, kept in
``__transaction_state`` and rebuilt by replaying it (see :mod:`.coordinator`)."""
