"""The one exception tree of bkeeper.

Every error bkeeper raises derives from :class:`BKeeperError`. Wire status codes map to the
``BookieError`` classes below (the status named beside each) through one registry,
``bkeeper.wire.codes.STATUS_ERRORS``, read both ways: ``error_for_status`` (a status a bookie
answered, to the exception a client raises) and ``status_for_error`` (an exception raised while
serving, to the status a bookie answers; an unnamed class answers EIO). Foreign errors are
translated at the boundary with ``raise ... from``.

::

    BKeeperError                      retriable = False unless noted
    ├── ConfigError                   an option or configuration value is invalid
    ├── ProtocolError                 bytes on the wire do not form a valid message
    ├── AdminRequestError             an admin HTTP request was refused (carries its status)
    ├── DigestMismatchError           an entry body fails its digest (names ledger and entry)
    ├── StorageError                  the storage engine failed
    │   ├── CorruptRecordError        a journal/entry-log record is corrupt (names file, offset)
    │   └── CookieMismatchError       a bookie directory's cookie does not match
    ├── MetadataError                 the metadata store failed
    │   ├── MetadataVersionError      compare-and-set lost (retriable)
    │   ├── NodeExistsError           the node (znode) already exists
    │   │   ├── LedgerExistsError     a ledger with that id already has metadata
    │   │   └── ClusterExistsError    the cluster is formatted already
    │   ├── NoNodeError               the node (znode) does not exist
    │   │   ├── LedgerNotFoundError   no metadata for that ledger id
    │   │   └── ClusterNotFoundError  the metadata root holds no cluster (not formatted)
    │   ├── NotEmptyError             the node still has children
    │   ├── ConnectionLossError       connection to the store lost mid-call (retriable)
    │   ├── SessionExpiredError       the store session expired; its ephemerals are gone
    │   ├── MetadataClosedError       the store was closed
    │   ├── MetadataAuthError         the store refused this identity (ZooKeeper ACL/auth)
    │   └── LeadershipLostError       a lock or leadership ended with its session
    ├── NotEnoughBookiesError         too few bookies for an ensemble (retriable)
    ├── LedgerClosedError             the ledger takes no more entries
    │   └── LedgerDeletedError        its metadata was deleted under its open writer
    ├── EntryTooLargeError            an entry does not fit one frame (names its size, the
    │                                 limit and the option that sets it)
    ├── ClientClosedError             the client or handle is closed
    ├── CallTimeoutError              a blocking call outlived its timeout (also a
    │                                 TimeoutError; outcome unknown; retriable)
    ├── LogError                      a named log operation failed
    │   ├── LogNotFoundError          no log of that name
    │   │   └── LogDeletedError       deleted while a writer had it open (names it)
    │   ├── LogExistsError            a log of that name exists already
    │   ├── LogFencedError            another writer took the log over
    │   │   ├── WriterTermError       a writer of an older leadership term was refused
    │   │   └── SubscriptionFencedError  another consumer took the subscription over
    │   ├── LogTruncatedError         the position asked for was truncated away
    │   ├── PositionNotInLogError     no record of the log is there (another log's ledger,
    │   │                             truncated away, or past its end; also a ConfigError)
    │   ├── SubscriptionNotFoundError no subscription of that name on the log
    │   └── SubscriptionBusyError     an exclusive subscription has an active consumer
    ├── StateMachineError             a replicated state machine could not serve a call
    │   └── NotLeaderError            this member does not lead now (names the leader it
    │                                 knows of; retriable)
    └── BookieError                   a bookie answered with an error status
        ├── BookieUnavailableError    no connection to the bookie (retriable)
        │   └── TlsError              the TLS handshake with the bookie failed (not retriable)
        ├── NoSuchLedgerError         ENOLEDGER
        ├── NoSuchEntryError          ENOENTRY
        ├── BadRequestError           EBADREQ
        ├── BookieIOError             EIO (retriable)
        ├── UnauthorizedAccessError   EUA (wrong master key / password)
        │   └── AuthenticationError   EUA: no authenticated identity (or credentials refused)
        ├── BadVersionError           EBADVERSION
        ├── LedgerFencedError         EFENCED
        ├── ReadOnlyBookieError       EREADONLY (retriable)
        │   └── DiskFullError         no room on the data disk: writes refused until freed
        ├── TooManyRequestsError      ETOOMANYREQUESTS (retriable)
        └── DataUnknownError          EUNKNOWNLEDGERSTATE
"""

from __future__ import annotations

__all__ = [
    "AdminRequestError",
    "AuthenticationError",
    "BKeeperError",
    "BadRequestError",
    "BadVersionError",
    "BookieError",
    "BookieIOError",
    "BookieUnavailableError",
    "CallTimeoutError",
    "ClientClosedError",
    "ClusterExistsError",
    "ClusterNotFoundError",
    "ConfigError",
    "ConnectionLossError",
    "CookieMismatchError",
    "CorruptRecordError",
    "DataUnknownError",
    "DigestMismatchError",
    "DiskFullError",
    "EntryTooLargeError",
    "LeadershipLostError",
    "LedgerExistsError",
    "LedgerClosedError",
    "LedgerDeletedError",
    "LedgerFencedError",
    "LedgerNotFoundError",
    "LogError",
    "LogExistsError",
    "LogDeletedError",
    "LogFencedError",
    "LogNotFoundError",
    "LogTruncatedError",
    "PositionNotInLogError",
    "MetadataAuthError",
    "SubscriptionBusyError",
    "SubscriptionFencedError",
    "SubscriptionNotFoundError",
    "MetadataClosedError",
    "MetadataError",
    "MetadataVersionError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "NotLeaderError",
    "NoSuchEntryError",
    "NotEnoughBookiesError",
    "NoSuchLedgerError",
    "ProtocolError",
    "ReadOnlyBookieError",
    "SessionExpiredError",
    "StateMachineError",
    "TlsError",
    "StorageError",
    "TooManyRequestsError",
    "UnauthorizedAccessError",
    "WriterTermError",
]


class BKeeperError(Exception):
    """Root of every bkeeper error. ``retriable`` says whether trying again may succeed."""

    retriable: bool = False


class ConfigError(BKeeperError, ValueError):
    """A configuration value or command-line option is invalid; the message names it."""


class ProtocolError(BKeeperError):
    """Bytes received from a peer do not form a valid frame or message."""


class AdminRequestError(BKeeperError):
    """The bookie's admin HTTP server refuses a request; ``status`` is the HTTP status it
    answers (400 bad input, 404 no such path, 405 method not served there, 408 too slow,
    413 body too large, 431 head too large, 503 not available now, ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DigestMismatchError(BKeeperError):
    """An entry body failed digest verification, or names another ledger/entry."""

    def __init__(self, ledger_id: int, entry_id: int, reason: str = "digest mismatch") -> None:
        super().__init__(f"ledger {ledger_id} entry {entry_id}: {reason}")
        self.ledger_id = ledger_id
        self.entry_id = entry_id


class StorageError(BKeeperError):
    """The bookie storage engine failed."""


class CorruptRecordError(StorageError):
    """A record on disk is corrupt; the message names the file and the offset."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset


class CookieMismatchError(StorageError):
    """A bookie's stored cookie differs from the one it would write now."""


class MetadataError(BKeeperError):
    """The metadata store failed."""


class MetadataVersionError(MetadataError):
    """A compare-and-set on metadata lost against a concurrent update."""

    retriable = True


class NodeExistsError(MetadataError):
    """A create found the node already there (ZooKeeper NODEEXISTS)."""


class LedgerExistsError(NodeExistsError):
    """A ledger with this id already has metadata; ids are never reused."""


class ClusterExistsError(NodeExistsError):
    """The cluster is formatted already; formatting again needs ``force``."""


class NoNodeError(MetadataError):
    """The node does not exist (ZooKeeper NONODE)."""


class ClusterNotFoundError(NoNodeError):
    """No cluster at the metadata root: it was never formatted, or the root is wrong."""


class LedgerNotFoundError(NoNodeError):
    """The metadata store has no metadata for this ledger id."""


class NotEmptyError(MetadataError):
    """A delete found the node still has children (ZooKeeper NOTEMPTY)."""


class ConnectionLossError(MetadataError):
    """The connection to the store was lost during the call; it may or may not have applied."""

    retriable = True


class SessionExpiredError(MetadataError):
    """The store session expired: its ephemeral nodes and watches are gone. The store opens a
    new session by itself; owners of ephemeral nodes must create them again."""


class MetadataClosedError(MetadataError):
    """The metadata store, or a recipe built on it, was closed before or during the call."""


class MetadataAuthError(MetadataError):
    """The metadata store refused this identity: ZooKeeper's NoAuth (the node's ACL does not
    admit it) or AuthFailed (the digest credentials were rejected)."""


class LeadershipLostError(MetadataError):
    """A lock or a leadership ended because its session expired or it was released."""


class NotEnoughBookiesError(BKeeperError):
    """Placement found fewer suitable bookies than an ensemble needs."""

    retriable = True


class LedgerClosedError(BKeeperError):
    """The ledger is closed (or being recovered): it takes no more entries."""


class LedgerDeletedError(LedgerClosedError):
    """The ledger's metadata was deleted while a writer had it open: the writer takes no
    more entries, and its adds not yet acknowledged fail (the bookies would drop them at
    their next garbage collection)."""


class EntryTooLargeError(BKeeperError):
    """An entry too large for one frame of the bookie protocol. Refused by the client before
    anything is sent (the writer stays usable: the entry got no id); or, when a bookie with a
    smaller frame limit answered its add EBADREQ, the writer fails with it (an entry id was
    given and cannot be skipped). The message names the entry's size, the limit, and the
    option that sets it."""


class ClientClosedError(BKeeperError):
    """The client or handle was closed before or during the call."""


class CallTimeoutError(BKeeperError, TimeoutError):
    """A blocking call (``bkeeper.sync``) did not finish within its timeout and was
    cancelled; what it did meanwhile (an append, say) is unknown."""

    retriable = True


class LogError(BKeeperError):
    """A named log operation failed."""


class LogNotFoundError(LogError):
    """No named log of that name."""


class LogDeletedError(LogNotFoundError):
    """The named log was deleted while this writer (or a state machine member on it) had it
    open: every later append, and every one not acknowledged before, fails with it."""


class LogExistsError(LogError):
    """A named log of that name exists already."""


class LogFencedError(LogError):
    """Another writer opened the log: this writer can append no more."""


class WriterTermError(LogFencedError):
    """A log's writer was asked for with a leadership term older than the one the log
    records: a newer leader holds the log, so this one is refused before it fences anything."""


class SubscriptionFencedError(LogFencedError):
    """Another consumer took this consumer's exclusive subscription over: its acks are
    refused from then on."""


class LogTruncatedError(LogError):
    """The position asked for lies before the log's truncation point."""


class PositionNotInLogError(LogError, ConfigError):
    """A position given for a log (an operator's ack) holds none of its records: its ledger
    is another log's (or none), was truncated away, or it lies past the log's end. The
    message names the log, the position and the range of positions the log holds."""


class SubscriptionNotFoundError(LogError):
    """The log has no subscription of that name."""


class SubscriptionBusyError(LogError):
    """An exclusive subscription has an active consumer, and this one would not wait."""


class StateMachineError(BKeeperError):
    """A replicated state machine could not serve a call."""


class NotLeaderError(StateMachineError):
    """This member does not lead (now); ``leader`` names the leader it knows of, if any."""

    retriable = True

    def __init__(self, message: str, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class BookieError(BKeeperError):
    """A bookie answered a request with an error status."""


class BookieUnavailableError(BookieError):
    """The bookie could not be reached, or the connection was lost mid-request."""

    retriable = True


class TlsError(BookieUnavailableError):
    """TLS could not be set up with the bookie (START_TLS refused, or the handshake failed:
    certificate, hostname or protocol). Trying again does not help."""

    retriable = False


class NoSuchLedgerError(BookieError):
    """The bookie has no such ledger (ENOLEDGER)."""


class NoSuchEntryError(BookieError):
    """The bookie has no such entry (ENOENTRY)."""


class BadRequestError(BookieError):
    """The bookie could not understand the request (EBADREQ)."""


class BookieIOError(BookieError):
    """The bookie failed with an I/O error (EIO)."""

    retriable = True


class UnauthorizedAccessError(BookieError):
    """Wrong master key or password (EUA)."""


class AuthenticationError(UnauthorizedAccessError):
    """No authenticated identity: a request before a successful AUTH exchange on a bookie
    with authentication on, credentials refused by either side, or a plain request to a
    TLS-only bookie (all answered EUA)."""


class BadVersionError(BookieError):
    """Unsupported protocol version (EBADVERSION)."""


class LedgerFencedError(BookieError):
    """The ledger is fenced: a recovering reader has sealed it (EFENCED)."""


class ReadOnlyBookieError(BookieError):
    """The bookie is read-only and refuses normal adds (EREADONLY)."""

    retriable = True


class DiskFullError(ReadOnlyBookieError):
    """The data disk has no room for the write: the storage engine refuses writes until
    space is freed (answered as EREADONLY: the bookie is read-only meanwhile)."""


class TooManyRequestsError(BookieError):
    """The bookie is overloaded (ETOOMANYREQUESTS)."""

    retriable = True


class DataUnknownError(BookieError):
    """The bookie cannot tell whether it has the data (EUNKNOWNLEDGERSTATE)."""
