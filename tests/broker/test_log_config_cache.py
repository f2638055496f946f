"""Parsed topic configurations are cached (a broker parses the same few property sets for
every topic it creates, loads or describes): a cached one must behave as a fresh one."""

from __future__ import annotations

import pytest

from kayak.broker.log import LogConfig
from kayak.errors import ConfigError


def test_the_same_properties_give_the_same_config_and_a_bad_value_is_refused_every_time() -> None:
    first = LogConfig.from_properties({"retention.ms": "1000"}, from_user=True)
    assert LogConfig.from_properties({"retention.ms": "1000"}, from_user=True) is first
    assert first.retention_ms == 1000
    other = LogConfig.from_properties({"retention.ms": "2000"}, from_user=True)
    assert other.retention_ms == 2000
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"cleanup\.policy"):
            LogConfig.from_properties({"cleanup.policy": "sometimes"}, from_user=True)


def test_a_stored_topic_may_keep_what_a_new_one_may_not_though_both_are_cached() -> None:
    stored = {"segment.bytes": "16384"}  # below today's 1 MiB minimum for new settings
    assert LogConfig.from_properties(stored).segment_bytes == 16384
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        LogConfig.from_properties(stored, from_user=True)


def test_the_properties_handed_out_are_the_caller_s_to_change() -> None:
    config = LogConfig.from_properties({"retention.ms": "1000"})
    mine = config.to_properties()
    mine["retention.ms"] = "changed"
    assert config.to_properties()["retention.ms"] == "1000"
