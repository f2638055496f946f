"""Every generated message, at every version, decodes to exactly what was encoded.

Values are drawn from the JSON specs themselves (through the generator's own spec model), not
from the generated classes, so a generator bug that drops or mistypes a field shows up as a
round-trip difference.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kayak.protocol.messages import MODULES, message_class
from tests.conftest import SPEC_DIR, load_generator

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def _specs() -> list[Any]:
    if not SPEC_DIR.is_dir():
        return []
    gen = load_generator()
    paths = sorted(SPEC_DIR.glob("*.json")) + sorted(SPEC_DIR.glob("*/*.json"))
    return [gen.load_spec(p, gen.module_name(p, SPEC_DIR)) for p in paths]


SPECS = _specs()
CASES = [
    pytest.param(spec, v, id=f"{spec.name}-v{v}")
    for spec in SPECS
    for v in range(spec.valid.lo, spec.valid.hi + 1)
]


def _scalar(ftype: str) -> st.SearchStrategy[Any]:
    if ftype in INT_RANGES:
        lo, hi = INT_RANGES[ftype]
        return st.integers(lo, hi)
    if ftype == "bool":
        return st.booleans()
    if ftype == "float64":
        return st.floats(allow_nan=False)
    if ftype == "string":
        return TEXT
    if ftype in ("bytes", "records"):
        return st.binary(max_size=24)
    if ftype == "uuid":
        return st.uuids()
    raise AssertionError(f"no strategy for {ftype}")


def _value(field: Any, version: int, module: ModuleType, depth: int) -> st.SearchStrategy[Any]:
    if field.struct is not None:
        inner = _struct(field.struct, version, module, depth + 1)
    else:
        inner = _scalar(field.elem_type)
    if field.is_array:
        inner = st.lists(inner, max_size=2 if depth < 2 else 1)
    if version in field.nullable or field.type == "records":
        inner = st.none() | inner
    return inner


def _struct(
    struct: Any, version: int, module: ModuleType, depth: int = 0
) -> st.SearchStrategy[Any]:
    cls = getattr(module, struct.name)
    fields = {
        f.py_name: _value(f, version, module, depth) for f in struct.fields if version in f.versions
    }
    return st.builds(cls, **fields)


@pytest.mark.skipif(not SPECS, reason=f"Kafka message specs not found at {SPEC_DIR}")
@pytest.mark.parametrize(("spec", "version"), CASES)
def test_roundtrip(spec: Any, version: int) -> None:
    module = importlib.import_module(f"kayak.protocol.messages.{MODULES[spec.name]}")
    cls = message_class(spec.name)
    strategy = _struct(spec.root, version, module)

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(msg: Any) -> None:
        data = msg.encode(version)
        decoded, end = cls.read(data, 0, version)
        assert end == len(data), "reader stopped before the end of what the writer wrote"
        assert decoded == msg
        assert decoded.encode(version) == data

    check()


def test_defaults_roundtrip_at_every_version() -> None:
    for name in MODULES:
        cls = message_class(name)
        for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            data = cls().encode(version)
            assert cls.decode(data, version) == cls(), f"{name} v{version}"


def test_spec_dir_is_where_tests_expect(spec_dir: Path) -> None:
    assert (spec_dir / "FetchRequest.json").is_file()
