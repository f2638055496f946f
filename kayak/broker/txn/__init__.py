"""Kafka transactions on the broker: the coordinator, its ``__transaction_state`` log, and the
markers it writes into the partitions a transaction touched."""
