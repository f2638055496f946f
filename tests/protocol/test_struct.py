"""The generated classes' base: value equality, repr, replace, and fresh list defaults."""

from __future__ import annotations

import pytest

from kayak.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from kayak.protocol.messages.produce_request import PartitionProduceData, TopicProduceData


def test_equal_by_value_and_not_hashable() -> None:
    a = TopicProduceData("t", [PartitionProduceData(0, b"x")])
    assert a == TopicProduceData(name="t", partition_data=[PartitionProduceData(0, b"x")])
    assert a != TopicProduceData("u", [PartitionProduceData(0, b"x")])
    assert a != MetadataRequestTopic(name="t")  # another class, even with a same-named field
    with pytest.raises(TypeError):
        hash(a)


def test_repr_names_every_field_in_the_specs_order() -> None:
    assert repr(PartitionProduceData(3, None)) == "PartitionProduceData(index=3, records=None)"


def test_replace_copies_with_the_changes_and_leaves_the_original() -> None:
    original = TopicProduceData("t", [PartitionProduceData(0, b"x")])
    changed = original.replace(name="u")
    assert (changed.name, changed.partition_data) == ("u", original.partition_data)
    assert original.name == "t"


def test_replace_refuses_a_field_the_class_does_not_have() -> None:
    with pytest.raises(TypeError, match="TopicProduceData has no field nmae"):
        TopicProduceData("t").replace(nmae="u")


def test_list_defaults_are_fresh_and_an_explicit_none_is_kept() -> None:
    first, second = TopicProduceData(), TopicProduceData()
    first.partition_data.append(PartitionProduceData())
    assert second.partition_data == []
    assert MetadataRequest().topics == []
    assert MetadataRequest(topics=None).topics is None  # v1+: every topic
