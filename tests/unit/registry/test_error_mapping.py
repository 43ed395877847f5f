"""Every domain error has its own Confluent error code; statuses follow the code."""

from __future__ import annotations

from floe.registry.api.errors import ERROR_CODES, STORE_ERROR, error_code, status_of
from floe.registry.core import errors


def test_every_domain_error_is_mapped_once() -> None:
    domain = {
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type)
        and issubclass(cls, errors.RegistryError)
        and cls is not errors.RegistryError
    }
    assert domain == set(ERROR_CODES)
    assert len(set(ERROR_CODES.values())) == len(ERROR_CODES)
    assert error_code(errors.RegistryError("x")) == STORE_ERROR


def test_status_is_the_code_prefix() -> None:
    assert [status_of(c) for c in (40401, 409, 42201, 50001, 413)] == [404, 409, 422, 500, 413]
