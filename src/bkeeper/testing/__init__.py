"""The shipped test toolkit: what bkeeper's own tests use, for users' tests too.

- ``cluster``: an in-memory cluster (metadata, bookies, transport) with fault hooks, for fast
  deterministic scenarios;
- ``clock``: a fake ``Clock`` that moves only when told to;
- ``zookeeper``, ``bookie_process``, ``sandbox``: a real ZooKeeper and real bookie processes;
- ``zookeeper_ensemble``, ``netns``, ``multihost``: a ZooKeeper quorum, hosts of their own in
  network namespaces, and a cluster of many hosts on one machine (issue 42);
- ``journal_faults``, ``tmpfs``: crash and disk-full fixtures for the storage engine;
- ``fuzz``, ``fuzz_frames``: the protocol fuzzer behind ``bkeeper bench fuzz``;
- ``benchmarks``: the measured workloads behind every ``bkeeper bench`` command, a module each.

Modules are imported by name; importing this package loads none of them.
"""
