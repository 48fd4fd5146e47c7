"""`toolkit serve` as a command: its help, its start-up checks, its imports."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from toolkit.cli.main import main

CHECK_IMPORTS = """
import sys
from toolkit.cli.main import main
try:
    main({args!r}, prog_name="toolkit")
except SystemExit:
    pass
print("HEAVY:" + ",".join(m for m in ("ray", "torch", "fastapi", "uvicorn") if m in sys.modules))
"""


def test_help_imports_no_server_or_engine_library():
    for args in (["--help"], ["serve", "--help"]):
        result = subprocess.run([sys.executable, "-c", CHECK_IMPORTS.format(args=args)],
                                capture_output=True, text=True, check=True)
        assert result.stdout.strip().splitlines()[-1] == "HEAVY:", args


def test_help_shows_the_openai_client_example():
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    assert 'OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="secret")' in result.output
    assert "client.batches.create(input_file_id=file.id" in result.output


def test_a_bad_engine_setting_fails_before_serving(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--smoke", "--store", str(tmp_path),
                                       "--set", "engine.batch_size=0"])
    assert result.exit_code == 2
    assert "engine.batch_size: Input should be greater than 0" in result.output
    assert not (tmp_path / "serve.sqlite3").exists()
