"""The bookie cookie: which bookie owns a set of directories, in which cluster.

Format (Apache BookKeeper cookie layout version 5): the text ``"5\\n"`` followed by the
protobuf text format of ``CookieFormat {bookieHost, journalDir, ledgerDirs, instanceId,
indexDirs}``. Directory lists are encoded as ``"<count>\\t<dir>\\t<dir>..."``. The same text is
stored in ``<dir>/current/VERSION`` of each bookie directory and in ZooKeeper under
``<root>/cookies/<bookieId>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from bkeeper.common.errors import CookieMismatchError, ProtocolError
from bkeeper.wire._pb import data_formats_pb2

__all__ = ["COOKIE_LAYOUT_VERSION", "Cookie", "decode_dirs", "encode_dirs"]

COOKIE_LAYOUT_VERSION = 5


def encode_dirs(dirs: tuple[str, ...]) -> str:
    return "\t".join([str(len(dirs)), *dirs])


def decode_dirs(text: str) -> tuple[str, ...]:
    if not text:
        return ()
    count, *dirs = text.split("\t")
    if not count.isdigit() or int(count) != len(dirs):
        raise ProtocolError(f"cookie directory list {text!r} is malformed")
    return tuple(dirs)


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    instance_id: str = ""
    index_dirs: tuple[str, ...] = ()

    def encode(self) -> bytes:
        msg = data_formats_pb2.CookieFormat(
            bookieHost=self.bookie_id,
            journalDir=",".join(self.journal_dirs),
            ledgerDirs=encode_dirs(self.ledger_dirs),
        )
        if self.instance_id:
            msg.instanceId = self.instance_id
        if self.index_dirs:
            msg.indexDirs = encode_dirs(self.index_dirs)
        return f"{COOKIE_LAYOUT_VERSION}\n{text_format.MessageToString(msg)}".encode()

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        try:
            text = data.decode()
            version, _, body = text.partition("\n")
            if version.strip() != str(COOKIE_LAYOUT_VERSION):
                raise ProtocolError(f"cookie layout version {version.strip()!r} is not supported")
            msg = text_format.Parse(body, data_formats_pb2.CookieFormat())
        except (UnicodeDecodeError, text_format.ParseError, DecodeError) as exc:
            raise ProtocolError(f"cookie is not readable: {exc}") from exc
        return cls(
            bookie_id=msg.bookieHost,
            journal_dirs=tuple(d for d in msg.journalDir.split(",") if d),
            ledger_dirs=decode_dirs(msg.ledgerDirs),
            instance_id=msg.instanceId,
            index_dirs=decode_dirs(msg.indexDirs) if msg.HasField("indexDirs") else (),
        )

    def differences(self, other: Cookie) -> list[str]:
        """What differs between this cookie and ``other``, in words."""
        out = []
        for name in ("bookie_id", "journal_dirs", "ledger_dirs", "instance_id", "index_dirs"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{name}: stored {mine!r}, now {theirs!r}")
        return out

    def verify(self, expected: Cookie, where: str) -> None:
        """Raise :class:`CookieMismatchError` naming every difference from ``expected``."""
        diffs = self.differences(expected)
        if diffs:
            raise CookieMismatchError(f"cookie in {where} does not match: " + "; ".join(diffs))
