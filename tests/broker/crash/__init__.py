"""A crash harness: ``kill -9`` a real kayak broker under acks=all load, then prove that no
acknowledged record was lost or stored twice.

One :class:`CrashHarness` owns a ``kayak broker`` process (or a ``--shards 2`` cluster) on one
data directory, at the default segment size, so that the crash hits large *active* segments,
the ones recovery has to rescan. Each round (:meth:`CrashHarness.run_round`):

* three producer processes (:mod:`.producers`) write to their own 4-partition topics with
  acks=all: confluent-kafka idempotent, confluent-kafka non-idempotent and kayak's own
  (idempotent) producer. Values are 24 B to ~9 kB with a unique id in each, plus now and then a
  burst of more than 1 MiB to one partition (one record batch) (:mod:`.workload`). Each
  producer appends every acknowledgement (partition, offset, id, size) to its own file as it
  goes (:mod:`.acks`): the broker dies, the producers do not, and their record of what was
  acknowledged must outlive the broker;
* on one shard, a confluent-kafka transactional producer (:mod:`.transactions`) runs small
  transactions over its own topic, one in four aborted, logging each acknowledged outcome;
  after the round a read_committed reader must find every acknowledged committed transaction
  exactly once, no acknowledged abort, the others all or nothing, and the last stable offset
  at the high watermark everywhere;
* a confluent-kafka consumer group (another process, :mod:`.group`) reads the three topics and
  commits synchronously every few hundred records, logging each acknowledged commit;
* in this process (:mod:`.side_traffic`): DeleteRecords on one partition, and a change of
  ``retention.bytes`` (AlterConfigs and IncrementalAlterConfigs, a round each) on a throwaway
  topic with 64 KiB segments that a writer keeps filling, so that retention deletes segments
  during the round (the broker runs ``--retention-check-interval-ms 200``);
* once the producers have had at least ``mib_per_round`` acknowledged (and the group two
  commits), at a random point, the broker (or one shard of the cluster) gets SIGKILL, and is
  started again on the same data directory and port (or restarted by its supervisor)
  (:mod:`.broker`); the producers retry through that, are stopped once each has had records
  acknowledged after the restart (and the group a commit), and drain;
* then everything is read back from the log start with a raw reader (confluent-kafka,
  ``assign`` from ``OFFSET_BEGINNING``) and checked (:mod:`.verdicts`): see
  :func:`~.verdicts.verify_topic`; the group's committed offsets must never go back
  (:func:`~.verdicts.commit_regressions`, and the broker's answer right after the restart and
  at the end); retention must have deleted segments.

Acknowledgements accumulate over rounds, so every round re-checks everything acknowledged
before. :meth:`CrashHarness.finish` stops the broker cleanly and runs ``kayak log verify`` over
the data directory when that command exists.
"""

from __future__ import annotations

from tests.broker.crash.broker import LogVerify, kayak_log_verify
from tests.broker.crash.harness import CrashHarness, HarnessConfig, RoundResult
from tests.broker.crash.verdicts import verify_topic
from tests.broker.crash.workload import Writer, make_value, parse_value

__all__ = [
    "CrashHarness",
    "HarnessConfig",
    "LogVerify",
    "RoundResult",
    "Writer",
    "kayak_log_verify",
    "make_value",
    "parse_value",
    "verify_topic",
]
