"""The error family as the library raises it and as CLI users see it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.errors import (
    BackendUnavailableError,
    EngineDiedError,
    EngineStartError,
    InputDataError,
    JobFailedError,
    JobStalledError,
    JobStoppedError,
    OutputWriteError,
    RunInterruptedError,
    SpecError,
    StopLossError,
    ToolkitError,
    WaitTimeoutError,
)

CHECK_CLICK = """
import sys
import toolkit.errors
print("click imported:", "click" in sys.modules)
import click
print("a ClickException:", issubclass(toolkit.errors.ToolkitError, click.ClickException))
"""


def test_the_library_errors_do_not_need_click():
    result = subprocess.run([sys.executable, "-c", CHECK_CLICK],
                            capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["click imported: False", "a ClickException: False"]


def test_an_error_is_its_message_and_shows_its_hint_below_it():
    error = InputDataError("data.input: s3://AKIAEXAMPLE:secret@bucket/x.csv does not exist.",
                           hint="Check the path; the key is s3://AKIAEXAMPLE:secret@bucket.")
    assert str(error) == error.message == "data.input: s3://***@bucket/x.csv does not exist."
    assert error.hint == "Check the path; the key is s3://***@bucket."
    assert error.format_message() == ("data.input: s3://***@bucket/x.csv does not exist.\n"
                                      "Hint: Check the path; the key is s3://***@bucket.")
    assert ToolkitError("No hint here.").format_message() == "No hint here."


def test_exit_codes_are_the_documented_contract():
    codes = {cls.__name__: cls.exit_code for cls in (
        ToolkitError, SpecError, InputDataError, BackendUnavailableError, JobFailedError,
        JobStoppedError, WaitTimeoutError, JobStalledError, StopLossError, EngineStartError,
        EngineDiedError, OutputWriteError, RunInterruptedError)}
    assert codes == {"ToolkitError": 1, "SpecError": 2, "InputDataError": 2,
                     "BackendUnavailableError": 3, "JobFailedError": 4, "JobStoppedError": 5,
                     "WaitTimeoutError": 6, "JobStalledError": 7, "StopLossError": 8,
                     "EngineStartError": 9, "EngineDiedError": 10, "OutputWriteError": 11,
                     "RunInterruptedError": 130}


def test_every_exit_code_is_in_the_errors_page():
    def subclasses(cls: type) -> list[type]:
        return [cls, *(sub for direct in cls.__subclasses__() for sub in subclasses(direct))]

    page = (Path(__file__).parent.parent / "docs" / "errors.md").read_text()
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", page, re.MULTILINE)}
    assert documented == {0} | {cls.exit_code for cls in subclasses(ToolkitError)} - {1}


@pytest.mark.parametrize("debug", ["", "1"])
def test_a_library_error_reaches_the_user_as_error_and_hint(monkeypatch, debug):
    # The catalog raises SpecError; the CLI prints it, with no traceback even when debugging.
    monkeypatch.setenv("TOOLKIT_DEBUG", debug)
    result = CliRunner().invoke(main, ["show", "text-industri"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "Error: Unknown job 'text-industri'. Available jobs: date-reformat, embed, "
        "image-classify, openai-batch, review-triage, tabular-predict, text-classify, "
        "text-industry, vlm-caption.\n"
        "Hint: Name a built-in job, a job file (./my-job.yaml), or create one with "
        "'toolkit new NAME'.\n"
    )


def test_an_error_without_a_hint_is_one_line_with_its_exit_code(tmp_path):
    result = CliRunner().invoke(main, ["samples", "customers", "--rows", "all",
                                       "-o", str(tmp_path / "c.csv")])
    assert result.exit_code == 1
    assert result.stderr == "Error: --rows: give a number of rows to generate, not 'all'.\n"
