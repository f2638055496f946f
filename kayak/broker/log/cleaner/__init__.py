"""The log cleaner: compaction of ``cleanup.policy=compact`` topics, as Kafka's.

- :mod:`.offset_map`: the fixed-size dedupe map (key hash → latest offset);
- :mod:`.batches`: reading segments in chunks, rebuilding the batches a cleaning keeps;
- :mod:`.transactions`: aborted transactions and markers, learned from the log;
- :mod:`.rewrite`: one cleaning, file to file (runs in a worker);
- :mod:`.swap`: the crash-safe replacement, and its recovery at start;
- :mod:`.manager`: which logs are due, cleaning them in the background.

Nothing is imported here: the loader imports :mod:`.swap`, and :mod:`.manager` imports the
partition log, which imports the loader.
"""
