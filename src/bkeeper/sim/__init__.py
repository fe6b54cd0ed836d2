"""Deterministic simulation: the whole cluster in one process, on one thread, on virtual time.

The production modules run unchanged through their ports: the event loop
(:mod:`bkeeper.sim.loop`: virtual time, no OS I/O), the network (:mod:`bkeeper.sim.net`),
the metadata service (:mod:`bkeeper.sim.metastore`, over the ``memory://`` driver), the
disks (:class:`~bkeeper.storage.MemoryFileSystem`) and the storage engine's threads
(:mod:`bkeeper.sim.green`). :mod:`bkeeper.sim.world` is the cluster,
:mod:`bkeeper.sim.faults` the nemesis, :mod:`bkeeper.sim.run` one seed's run and
:mod:`bkeeper.sim.campaign` many seeds (``bkeeper verify --sim``).
"""
