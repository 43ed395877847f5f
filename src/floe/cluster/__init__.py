"""Cluster metadata: the brokers, who owns which partition, and named leases, kept in an
existing store (:mod:`.interface`; one package per store). The only code that knows
other brokers exist."""
