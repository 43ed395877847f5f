"""The registry domain: no HTTP here (see :mod:`floe.registry.api`)."""
