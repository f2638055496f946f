"""The committed protocol code is exactly what the generator makes from the specs."""

from __future__ import annotations

import filecmp
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO

COMMITTED = REPO / "kayak" / "protocol" / "messages"


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def test_regenerating_changes_nothing(
    spec_dir: Path, generator: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "messages"
    generator.generate(spec_dir, out)
    fresh, committed = _tree(out), _tree(COMMITTED)
    assert sorted(fresh) == sorted(committed), "generated module set differs from the committed one"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"committed code is stale, regenerate: {stale[:5]}"
    assert not filecmp.dircmp(out, COMMITTED).diff_files


def test_every_spec_has_a_module(spec_dir: Path) -> None:
    from kayak.protocol.messages import MODULES, message_class

    names = {p.stem for p in spec_dir.rglob("*.json")}
    assert names == set(MODULES)
    for name in names:
        assert name == message_class(name).NAME


def test_generated_code_carries_no_spec_prose() -> None:
    # The specs' "about" texts and comments stay in the specs.
    sample = (COMMITTED / "fetch_request.py").read_text()
    assert "The maximum time in milliseconds" not in sample
    assert "Licensed to the Apache Software Foundation" not in sample


def test_api_key_table_is_complete() -> None:
    from kayak.protocol.messages import API_MESSAGES, ApiKey, request_class, response_class

    assert ApiKey.PRODUCE == 0 and ApiKey.FETCH == 1 and ApiKey.API_VERSIONS == 18
    for key in API_MESSAGES:
        assert request_class(key).API_KEY == key == response_class(key).API_KEY
        assert request_class(key).MESSAGE_TYPE == "request"
