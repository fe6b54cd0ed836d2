"""How the cluster's errors become answers (bkeeper.admin.context.answer_errors)."""

from __future__ import annotations

import pytest

from bkeeper.admin.context import answer_errors
from bkeeper.common.errors import (
    AdminRequestError,
    BKeeperError,
    BookieUnavailableError,
    CallTimeoutError,
    ConfigError,
    ConnectionLossError,
    LedgerNotFoundError,
    NotEnoughBookiesError,
    SessionExpiredError,
)


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (LedgerNotFoundError("no ledger 7"), 404, "ledger 7: no ledger 7"),
        (ConfigError("bookies: name one"), 400, "ledger 7: bookies: name one"),
        (CallTimeoutError("no answer"), 504, "ledger 7: no answer"),
        (BookieUnavailableError("b:1 down"), 503, "ledger 7: BookieUnavailableError: b:1 down"),
        (ConnectionLossError("zk gone"), 503, "ledger 7: ConnectionLossError: zk gone"),
        (SessionExpiredError("expired"), 503, "ledger 7: SessionExpiredError: expired"),
        (NotEnoughBookiesError("2 of 3"), 409, "ledger 7: 2 of 3"),
        (BKeeperError("auto-recovery is disabled"), 409, "ledger 7: auto-recovery is disabled"),
        (AdminRequestError(413, "too big"), 413, "too big"),
    ],
)
async def test_each_error_is_one_status_and_line(
    error: Exception, status: int, message: str
) -> None:
    with pytest.raises(AdminRequestError) as caught:
        async with answer_errors("ledger 7"):
            raise error
    assert (caught.value.status, str(caught.value)) == (status, message)


async def test_other_exceptions_pass_through() -> None:
    with pytest.raises(KeyError):
        async with answer_errors("ledger 7"):
            raise KeyError("a bug: the server answers 500 and logs its traceback")
