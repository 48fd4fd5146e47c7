"""The docs name everything a user can give the toolkit, and nothing it doesn't take.

Flags of every command, exit codes, ``TOOLKIT_*`` variables and spec keys are read from
the code and looked for in README.md and docs/*.md (docs/reference.md holds the long
lists), and what the docs name is looked for in the code
(:mod:`tests.docs.reference_check`). The last tests hand the checks a flag, code,
variable and key of each kind that is missing on one side, to show they fail.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import click

from tests.docs import reference_check as check
from toolkit.cli.main import main

# Keys a page names on purpose though they don't exist: what a typo gets.
SHOWN_WRONG = {"engine.batch_sise"}


def test_every_flag_of_every_command_is_documented_and_every_documented_flag_exists():
    assert check.check_flags(check.doc_pages(), main) == []


def test_every_exit_code_table_lists_every_exit_code_and_no_other():
    pages = check.doc_pages()
    tables = check.exit_code_tables(pages)
    errors_py = check.CHECKOUT / "toolkit" / "errors.py"
    tables["toolkit/errors.py (its docstring)"] = check.rst_exit_codes(
        ast.get_docstring(ast.parse(errors_py.read_text())) or "")
    assert any(where.startswith(check.REFERENCE) for where in tables), "docs/reference.md has no exit-code table"
    assert check.check_exit_codes(tables, check.code_exit_codes(), check.mentioned_codes(pages)) == []


def test_every_toolkit_variable_the_code_reads_is_documented_and_no_other():
    assert check.check_env_names(check.doc_pages(), check.code_env_names()) == []


def test_every_spec_key_is_documented_and_every_documented_key_exists():
    assert check.check_spec_keys(check.doc_pages(), check.code_spec_keys(), SHOWN_WRONG) == []


def test_the_reference_page_is_linked_from_the_readme():
    assert "docs/reference.md" in (check.CHECKOUT / "README.md").read_text()


# --- the checks fail where they should ----------------------------------------------

def test_an_undocumented_flag_on_a_copy_of_a_real_command_is_reported():
    run = copy.copy(main.commands["run"])
    run.params = [*run.params, click.Option(["--throwaway-flag"])]
    toolkit = copy.copy(main)
    toolkit.commands = {**main.commands, "run": run}

    problems = check.check_flags(check.doc_pages(), toolkit)

    assert problems == ["`toolkit run --throwaway-flag` is in no doc: list it in "
                        "docs/reference.md's section `toolkit run`"]


def test_a_documented_flag_a_command_lacks_is_reported_wherever_the_docs_give_it():
    @click.group()
    def toolkit() -> None: ...

    @toolkit.command("run")
    @click.option("--rows")
    @click.option("-o", "--out")
    def run(rows: str, out: str) -> None: ...

    page = check.Page("docs/x.md", "\n".join([
        "# `toolkit run`",
        "| `--rows N` | how many |",
        "| `--gone` | a flag that was removed |",
        "## Else",
        "```bash",
        "toolkit run --rows 10 -o out \\",
        "    --ghost 1  # a comment --not-a-flag",
        "toolkit runn --rows 1",
        "```",
        "Or `toolkit run --phantom=1`, and `toolkit COMMAND --help`.",
    ]))

    assert check.check_flags([page], toolkit) == [
        "docs/x.md:6: `toolkit run` has no flag --ghost",
        "docs/x.md:8: there is no command `toolkit runn`",
        "docs/x.md:10: `toolkit run` has no flag --phantom",
        "docs/x.md:3: `toolkit run` has no flag --gone, but its section lists it",
        "`toolkit run --out` is in no doc: list it in docs/reference.md's section `toolkit run`",
    ]


def test_a_missing_or_made_up_exit_code_is_reported():
    page = check.Page("docs/x.md", "| code | meaning |\n|---|---|\n| 0 | ok |\n| 2 | bad |\n| 99 | made up |\n")

    problems = check.check_exit_codes(check.exit_code_tables([page]), {0, 2, 3})

    assert problems == ["docs/x.md:1: exit code 3 is missing from this table",
                        "docs/x.md:1: exit code 99 is listed, but nothing exits with it"]
    assert check.check_exit_codes({}, {0}) != []
    # Another page's table may leave out a code its text names; the reference's may not.
    said = check.Page("docs/x.md", page.text.replace("| 99 | made up |\n", "") + "\nExit code 3: said here.\n")
    reference = check.Page(check.REFERENCE, said.text)
    assert check.check_exit_codes(check.exit_code_tables([said]), {0, 2, 3},
                                  check.mentioned_codes([said])) == []
    assert check.check_exit_codes(check.exit_code_tables([reference]), {0, 2, 3},
                                  check.mentioned_codes([reference])) == [
        "docs/reference.md:1: exit code 3 is missing from this table"]


def test_a_new_exit_code_in_the_code_is_found():
    class Base(Exception):
        exit_code = 1

    class New(Base):
        exit_code = 12

    module = ast.parse("import sys\ndef f():\n    sys.exit(13)\n    raise SystemExit(14)\n")

    assert check.error_exit_codes(Base) == {1, 12}
    assert check.literal_exit_codes([(Path("m.py"), module)]) == {13, 14}


def test_an_undocumented_or_made_up_variable_is_reported():
    module = ast.parse('import os\nNAME = "TOOLKIT_VIA_CONSTANT"\n'
                       'a = os.environ.get("TOOLKIT_NEW_SETTING")\nb = os.getenv(NAME)\n'
                       'c = "TOOLKIT_X" in os.environ\nd = os.environ["TOOLKIT_Y"]\n'
                       'e = "TOOLKIT_ONLY_A_STRING"\n')
    read = check.read_env_names([(check.CHECKOUT / "toolkit" / "m.py", module)])
    assert set(read) == {"TOOLKIT_NEW_SETTING", "TOOLKIT_VIA_CONSTANT", "TOOLKIT_X", "TOOLKIT_Y"}

    page = check.Page("docs/x.md", "Set `TOOLKIT_X`, `TOOLKIT_Y`, `TOOLKIT_VIA_CONSTANT` or `TOOLKIT_GHOST=1`.")

    assert check.check_env_names([page], read) == [
        "docs/x.md:1: TOOLKIT_GHOST is named, but the code reads no such variable",
        "TOOLKIT_NEW_SETTING (read at toolkit/m.py:3) is in no doc: add it to "
        "docs/reference.md's environment variables",
    ]


def test_an_undocumented_or_made_up_spec_key_is_reported():
    keys = {"data", "data.input", "data.undocumented", "engine", "engine.engine_kwargs"}
    page = check.Page("docs/x.md", "\n".join([
        "`data`, `engine` and `data.input` (`engine.engine_kwargs.max_model_len: 10`),",
        "`stages.sentiment.engine_kwargs`, but `data.ghost` and `data.typo`.",
        "```bash",
        "toolkit run x --set data.other=1",
        "```",
    ]))

    assert check.check_spec_keys([page], keys, shown_wrong={"data.typo"}) == [
        "docs/x.md:2: `data.ghost` is not a spec key",
        "docs/x.md:4: `data.other` is not a spec key",
        "spec key `data.undocumented` is in no doc: add it to docs/reference.md's settings",
    ]
