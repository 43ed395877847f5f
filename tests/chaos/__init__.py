"""Jepsen-style fault injection of a broker cluster (issue 29): `make chaos`."""
