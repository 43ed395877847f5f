"""The transaction coordinator: producer ids and transactions, kept in
``__transaction_state`` and rebuilt by replaying it.

- :mod:`.state`: the durable state of a transactional id, its records and the one
  apply function.
- :mod:`.markers`: the COMMIT and ABORT markers that end a transaction on its partitions.
- :mod:`.shard`: :class:`~.shard.TxnShard`, the transactional ids of one
  ``__transaction_state`` partition.
- :mod:`.coordinator`: :class:`~.coordinator.TransactionCoordinator`, the shards of the
  partitions this broker leads.
"""
