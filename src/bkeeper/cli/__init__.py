"""The ``bkeeper`` command line: the only place that reads argv, config files and the
environment.

Commands are thin: parse and validate options, call the library, print (tables for listings,
progress bars for long work, one ``error:`` line on failure, tracebacks with ``--verbose``).
The entry point is :func:`bkeeper.cli.main.main`; each command group has its own module,
imported only when one of its commands runs (the tables of :mod:`bkeeper.cli._lazy`), so this
package's ``__init__`` imports nothing.
"""
