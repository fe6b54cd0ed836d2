"""Where the library's random choices come from: Python's global generator.

Each component that draws at random (placement, a worker's scan order, jitter) either takes
a ``random.Random`` or makes one with :func:`new_rng`, seeded from the global generator:
random in a process (the global generator is seeded from the OS at start), reproducible when
the simulator (:mod:`bkeeper.sim`) seeds the global generator with the run's seed. Never a
bare ``random.Random()``, which seeds itself from the OS and would make a simulated run
differ from its replay.
"""

from __future__ import annotations

import random

__all__ = ["new_rng"]


def new_rng() -> random.Random:
    """A new generator seeded from the global one (module doc)."""
    return random.Random(random.getrandbits(64))
