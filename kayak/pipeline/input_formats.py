"""The forms of change topics the pipeline reads, and the decoder of each.

Beside :mod:`kayak.pipeline.decode` and :mod:`kayak.pipeline.debezium_json` rather than in
either, so that neither imports the other.
"""

from __future__ import annotations

from kayak.pipeline.debezium_json import DebeziumJsonDecoder
from kayak.pipeline.decode import ChangeDecoder, EventDecoder

__all__ = ["INPUT_FORMATS", "make_decoder"]

# --format of `kayak pipeline run`: kayak's own Avro events through the registry, or
# Debezium's JsonConverter topics.
INPUT_FORMATS = ("kayak", "debezium-json")


def make_decoder(
    input_format: str, registry_url: str, registry_config: dict[str, str] | None = None
) -> EventDecoder:
    """The decoder of one of :data:`INPUT_FORMATS`."""
    if input_format == "debezium-json":
        return DebeziumJsonDecoder()
    if input_format != "kayak":
        raise ValueError(f"unknown input format {input_format!r}: one of {INPUT_FORMATS}")
    return ChangeDecoder(registry_url, registry_config)
