"""``bkeeper verify``: faults injected on a seeded schedule into a real cluster while a
workload runs, and the recorded history checked afterwards (docs/verification.md).

Pure parts: :mod:`~bkeeper.verify.schedule` (seed -> faults), :mod:`~bkeeper.verify.history`
(what each operation did), :mod:`~bkeeper.verify.check` (history and final reads ->
violations). I/O: :mod:`~bkeeper.verify.nemesis` (faults on processes, disks and the
network), :mod:`~bkeeper.verify.workload` (clients recording operations),
:mod:`~bkeeper.verify.run` (one run, start to verdict: :mod:`~bkeeper.verify.drive` its middle,
:mod:`~bkeeper.verify.end_checks` its checks beyond the history,
:mod:`~bkeeper.verify.run_records` what it writes, :mod:`~bkeeper.verify.teardown` its
clean-up, :mod:`~bkeeper.verify.external` a run on a cluster given with ``--metadata``).
"""
