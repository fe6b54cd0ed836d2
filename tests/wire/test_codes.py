"""The status registry of ``wire.codes``: complete, one to one, and read both ways."""

from __future__ import annotations

import inspect

import pytest

from bkeeper.common import errors
from bkeeper.wire.codes import (
    STATUS_ERRORS,
    STATUS_MEANINGS,
    STATUS_TO_V2,
    V2_TO_STATUS,
    StatusCode,
    V2ErrorCode,
    error_for_status,
    status_for_error,
)

NOT_OK = [status for status in StatusCode if status is not StatusCode.EOK]


def test_every_error_status_has_its_own_class():
    assert set(STATUS_ERRORS) == set(NOT_OK)
    assert len(set(STATUS_ERRORS.values())) == len(NOT_OK)


@pytest.mark.parametrize("status", NOT_OK, ids=lambda s: s.name)
def test_status_to_exception_and_back(status):
    error = error_for_status(status, "ledger 3 entry 4 on bookie-1")
    assert type(error) is STATUS_ERRORS[status]
    assert str(error) == f"ledger 3 entry 4 on bookie-1: {status.name} ({STATUS_MEANINGS[status]})"
    assert status_for_error(error) is status


def test_every_bookie_error_class_answers_a_status_of_its_own_or_of_its_parent():
    classes = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.BookieError)
        # no connection (TlsError included: the TLS handshake failed) is no bookie's answer
        and not issubclass(cls, errors.BookieUnavailableError)
        and cls is not errors.BookieError
    ]
    registered = set(STATUS_ERRORS.values())
    for cls in classes:
        assert cls in registered or registered & set(cls.__mro__[1:]), cls.__name__
    assert status_for_error(errors.DiskFullError("no room")) is StatusCode.EREADONLY


@pytest.mark.parametrize(
    "error",
    [
        errors.BookieError("x"),
        errors.BookieUnavailableError("x"),
        errors.DigestMismatchError(1, 2),
        errors.StorageError("x"),
        ValueError("a bug"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_error_the_registry_does_not_name_answers_eio(error):
    assert status_for_error(error) is StatusCode.EIO


def test_v2_codes_and_statuses_pair_by_name_both_ways():
    assert set(V2_TO_STATUS) == set(V2ErrorCode)
    assert set(STATUS_TO_V2) == set(StatusCode)
    for code in V2ErrorCode:
        status = V2_TO_STATUS[code]
        assert status.name == code.name
        assert STATUS_TO_V2[status] == code
