"""What the commands that work on a broker's data directory directly share (``users``,
``acls``): the ``--data-dir`` option, and a one-line error when it is not there."""

from __future__ import annotations

from pathlib import Path

import click

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("kayak-data"),
    show_default=True,
    help="The broker's data directory.",
)


def existing_data_dir(data_dir: Path) -> Path:
    """``data_dir``, or a one-line error if it does not exist (nothing is created)."""
    if not data_dir.is_dir():
        raise click.ClickException(
            f"data directory {data_dir} does not exist (create it, or start "
            f"`kayak broker --data-dir {data_dir}` once)"
        )
    return data_dir
