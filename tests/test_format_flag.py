"""One flag for an output format: ``--format text|json`` on ``status`` and ``list`` as
on ``plan``; their old ``--output text|json`` still works and says it is now ``--format``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from toolkit.cli.main import main

NOTICE = "--output json is now --format json"
# Nothing listens there, so each command ends at once (exit 3) after choosing its format.
NOWHERE = ["--address", "http://127.0.0.1:9"]


@pytest.mark.parametrize("command", [["list"], ["status", "raysubmit_x"]])
def test_the_old_output_flag_still_works_with_a_notice(command: list[str]):
    old = CliRunner().invoke(main, [*command, *NOWHERE, "--output", "json"])
    new = CliRunner().invoke(main, [*command, *NOWHERE, "--format", "json"])

    assert NOTICE in old.stderr and old.exit_code == 3
    assert NOTICE not in new.output and new.exit_code == 3


@pytest.mark.parametrize("command", ["list", "status", "plan"])
def test_status_list_and_plan_spell_the_format_flag_alike(command: str):
    assert "--format [text|json]" in CliRunner().invoke(main, [command, "--help"]).output
