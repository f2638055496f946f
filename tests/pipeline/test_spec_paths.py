"""The pipeline's SQLite paths and work directory are absolute before any executor sees them.

An executor of a standalone worker runs in a directory of its own, so a relative path names
another file there (the demo on a cluster stopped with ``unable to open database file``);
``tests/pipeline/test_pipeline_cluster.py`` runs the demo on a cluster with a relative
``--data-dir``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kayak.pipeline.source_database import absolute_sqlite_url
from kayak.pipeline.spec import PipelineSpec


def test_the_pipeline_takes_sqlite_paths_and_its_work_dir_as_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    here = Path.cwd()
    spec = PipelineSpec(source="shop.db", tables=["orders"], target="sqlite://copy/t.db",
                        work_dir=Path("run"))  # fmt: skip
    assert spec.source == f"sqlite:{here / 'shop.db'}"
    assert spec.target == f"sqlite:{here / 'copy' / 't.db'}"
    assert spec.work_dir == here / "run"
    assert absolute_sqlite_url("sqlite:~/x.db") == f"sqlite:{Path.home() / 'x.db'}"
    assert absolute_sqlite_url("sqlite:///abs/x.db") == "sqlite:/abs/x.db"
    for unchanged in ("postgresql://u@h/db", "sqlite::memory:"):
        assert absolute_sqlite_url(unchanged) == unchanged
