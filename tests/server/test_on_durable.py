"""A journal group made durable: every write of it is answered, even when answering one of
them fails (a bookie bug, logged with its trace)."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from bkeeper.server.config import BookieConfig
from bkeeper.server.handlers import BookieState, RequestHandlers
from bkeeper.server.responder import Durable, WhenDurable
from bkeeper.storage import GroupTokens, Storage
from bkeeper.wire.codes import StatusCode


class Broken(Durable):
    def durable(self, status: StatusCode, error: BaseException | None) -> int:
        raise RuntimeError("answering failed")


async def test_a_write_whose_answer_fails_does_not_keep_the_groups_others_unanswered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = cast(Storage, None)  # (on_durable does not touch the engine)
    handlers = RequestHandlers(BookieConfig(data_dir="-"), storage, BookieState())
    answered: list[Any] = []
    tokens = GroupTokens([WhenDurable(answered.append), Broken(), WhenDurable(answered.append)])
    tokens.started_at = 0.0
    with caplog.at_level(logging.ERROR, logger="bkeeper.server.handlers"):
        handlers.on_durable(tokens, None)
    assert answered == [None, None]
    assert "answering a write of a journal group failed" in caplog.text
    assert "RuntimeError: answering failed" in caplog.text
