"""bkeeper: Apache BookKeeper rebuilt in Python.

Layers (imports only go down; checked by import-linter, see pyproject.toml)::

    cli | spark | testing
    namedlog | autorecovery | statemachine
    server | client
    storage | wire | meta
    common
"""

from bkeeper.client import BookKeeper, ClientConfig

__version__ = "0.1.0"

__all__ = ["BookKeeper", "ClientConfig", "__version__"]
