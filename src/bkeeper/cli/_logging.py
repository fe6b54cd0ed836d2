"""How the ``bkeeper`` command line logs: quiet for commands a person runs and reads, the
server's journal for commands that run servers.

The library configures no handler (it only logs); this, the application, does:

* every command: records go to stderr (stdout is the command's output), at WARNING and
  above, plainly (``warning: ZooKeeper 127.0.0.1:2181: session expired ...``): no
  timestamps, no logger names, a record's exception as one line, never its traceback;
* commands that run servers (``SERVER_COMMANDS``, and ``kv serve`` through :func:`serving`),
  and ``verify`` (``JOURNAL_COMMANDS``): INFO and above with timestamps and logger names,
  since what they log is read later, in their log files (a sandbox's children write there);
* ``--verbose``: DEBUG for everything, kazoo's narration of each connection attempt included,
  with timestamps, logger names and tracebacks.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["JOURNAL_COMMANDS", "SERVER_COMMANDS", "configure_logging", "serving"]

#: Commands that run a server: they log at INFO, with timestamps.
SERVER_COMMANDS = frozenset({"autorecovery", "bookie", "dashboard", "zookeeper"})
#: And those whose log is a file read after the run: verify's run log records INFO (its
#: console handler shows errors only meanwhile), its client processes write to files.
JOURNAL_COMMANDS = SERVER_COMMANDS | {"verify", "verify-client"}

_JOURNAL_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class PlainFormatter(logging.Formatter):
    """``warning: message``; an exception attached is told in one line (``--verbose`` shows
    its traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            text += f" ({type(error).__name__}: {error})".replace("\n", " ")
        return text.replace("\n", " ")


def configure_logging(verbose: bool, command: str | None = None) -> None:
    """Configure the root logger for ``command`` (the sub-command's name), once per process:
    a handler already on the root (a test's, an embedding application's) is left alone."""
    root = logging.getLogger()
    if verbose:
        level, formatter = logging.DEBUG, logging.Formatter(_JOURNAL_FORMAT)
    elif command in JOURNAL_COMMANDS:
        level, formatter = logging.INFO, logging.Formatter(_JOURNAL_FORMAT)
    else:
        level, formatter = logging.WARNING, PlainFormatter()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter)
        root.addHandler(handler)
        root.setLevel(level)
    if not verbose:
        # kazoo's narration comes through bkeeper.meta at DEBUG already; its other loggers
        # (a callback's error at shutdown) are for --verbose too
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        # py4j (Spark's bridge, in the commands that run Spark) logs each connection it
        # closes at INFO: four lines under a benchmark's table
        logging.getLogger("py4j").setLevel(logging.WARNING)


def serving() -> None:
    """A sub-command that turns out to run a server (``kv serve``): INFO lines with
    timestamps, as ``SERVER_COMMANDS`` have (unless ``--verbose`` asked for more)."""
    root = logging.getLogger()
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)
    for handler in root.handlers:
        if isinstance(handler.formatter, PlainFormatter):
            handler.setFormatter(logging.Formatter(_JOURNAL_FORMAT))
