"""Records fields that stand for file regions: encoded as splice points, reassembled exactly."""

from __future__ import annotations

import pytest

from kayak.errors import EncodeError
from kayak.protocol import ServerConnection
from kayak.protocol.messages import ApiKey, FetchResponse
from kayak.protocol.messages.fetch_response import FetchableTopicResponse, PartitionData
from kayak.protocol.primitives import SplicedBuffer


class Region:
    """A stand-in for a segment file slice: bytes the encoder must not read."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        raise AssertionError("the encoder must not read a region")


def response(records: list[object]) -> FetchResponse:
    partitions = [
        PartitionData(partition_index=i, high_watermark=100, records=r)  # type: ignore[arg-type]
        for i, r in enumerate(records)
    ]
    return FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=partitions)])


def reassemble(out: SplicedBuffer) -> bytes:
    return b"".join(p.data if isinstance(p, Region) else bytes(p) for p in out.parts())


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_regions_reassemble_to_the_plain_encoding(version: int) -> None:
    blobs = [b"A" * 37, b"", b"B" * 5000]
    plain = ServerConnection().send_response(7, ApiKey.FETCH, version, response(blobs))
    assert not plain.splices
    spliced = ServerConnection().send_response(
        7, ApiKey.FETCH, version, response([Region(b) for b in blobs])
    )
    assert len(spliced.splices) == 3
    assert spliced.total_size == len(plain)
    assert reassemble(spliced) == bytes(plain)


def test_a_region_without_a_spliced_buffer_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="SplicedBuffer"):
        response([Region(b"x")]).encode(12)


def test_sized_objects_that_are_not_regions_are_refused() -> None:
    out = SplicedBuffer()
    with pytest.raises(EncodeError):
        response(["not records"]).write(out, 12)
    assert not out.splices
