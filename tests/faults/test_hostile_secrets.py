"""Careless and hostile input: secrets never leave, and a YAML job stays data.

Each case is what a user (or a job file someone sent them) would feed the CLI. A
credential in a URL is redacted (``s3://***@bucket/x.csv``) in everything the toolkit
prints or writes, and refused where the spec would travel to a cluster; a key given
where a variable's name belongs is refused without being echoed; credential files in
a project stay out of an upload; a job may construct and call only its user's own
class. After every case the secret is searched for in the whole test folder: the
output directory (manifest, summary, run.log), job.yaml and everything staged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from toolkit.cli.main import main

#: Shaped like the real thing: an AWS secret key with '/' and '+' in it.
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRETKEY"
SIGNATURE = "0f3a9c1e5b7d2f4a6c8e0b1d3f5a7c9eSIGNATURE"
API_KEY = "sk-proj-Zx81KqTRSECRETSECRET04mNpQ"
#: Nothing listens on port 9 (discard): a connection is refused at once.
DEAD = "127.0.0.1:9"
S3_DEAD = f"endpoint_override={DEAD}&scheme=http"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's project, where the command runs and everything is written."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def leaks(secret: str, root: Path, skip: tuple[Path, ...] = ()) -> list[str]:
    """Files under ``root`` holding ``secret`` (big sparse dummies and ``skip`` aside)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path not in skip and path.stat().st_size < 2**20:
            if secret.encode() in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return found


def invoke(args: list[str]):
    return CliRunner().invoke(main, args)


# --- credentials in URLs ------------------------------------------------------------

# (case, command line, exit code, texts the user must see, the secret)
URL_CASES = [
    ("show redacts a key and secret in an s3 --input",
     ["show", "text-industry", "--input", f"s3://AKIAEXAMPLE:{SECRET}@bucket/customers.csv"],
     0, ["input: s3://***@bucket/customers.csv"], SECRET),
    ("engine.base_url with user:password is refused",
     ["run", "text-industry", "--smoke", "--engine", "http", "--accelerator", "none",
      "--set", f"engine.base_url=http://me:{SECRET}@{DEAD}/v1"],
     2, [f"engine.base_url: http://***@{DEAD}/v1 carries credentials in the URL",
         "engine.api_key_env"], SECRET),
    ("engine.base_url with ?api_key= is refused",
     ["run", "text-industry", "--smoke", "--engine", "http", "--accelerator", "none",
      "--set", f"engine.base_url=http://{DEAD}/v1?api_key={API_KEY}"],
     2, [f"engine.base_url: http://{DEAD}/v1?api_key=*** carries credentials"], API_KEY),
    ("engine.api_key_env given the key itself",
     ["run", "text-industry", "--smoke", "--engine", "http", "--accelerator", "none",
      "--set", f"engine.base_url=http://{DEAD}/v1", "--set", f"engine.api_key_env={API_KEY}"],
     2, ["engine.api_key_env: 'sk-...' looks like a key, not a variable name"], API_KEY),
    ("engine.headers_from_env given a key",
     ["show", "text-industry", "--engine", "http", "--accelerator", "none",
      "--set", f"engine.base_url=http://{DEAD}/v1",
      "--set", f"engine.headers_from_env={{OpenAI-Organization: {API_KEY}}}"],
     2, ["engine.headers_from_env: header 'OpenAI-Organization': 'sk-...' looks like a key"],
     API_KEY),
    ("a key and secret in an s3 --output",
     ["run", "text-industry", "--smoke", "--rows", "10",
      "--output", f"s3://AKIAEXAMPLE:{SECRET}@bucket/out?{S3_DEAD}"],
     2, ["data.output: can't use s3://***@bucket/out?"], SECRET),
    ("render refuses a key and secret in an s3 --input",
     ["render", "text-industry", "--input", f"s3://AKIAEXAMPLE:{SECRET}@bucket/x.csv",
      "--output", "s3://bucket/out", "-o", "job.yaml"],
     2, ["data.input s3://***@bucket/x.csv: a URL holding credentials can't be sent to a "
         "cluster", "AWS_ACCESS_KEY_ID"], SECRET),
    ("render refuses a key and secret in an s3 --output",
     ["render", "text-industry", "--output", f"s3://AKIAEXAMPLE:{SECRET}@bucket/out",
      "-o", "job.yaml"],
     2, ["data.output s3://***@bucket/out: a URL holding credentials"], SECRET),
    ("submit refuses a presigned --input before contacting the cluster",
     ["submit", "text-industry", "--address", "http://127.0.0.1:1", "--input",
      f"https://b.s3.amazonaws.com/x.csv?X-Amz-Credential=AKIAEXAMPLE%2F20250101"
      f"&X-Amz-Signature={SIGNATURE}", "--output", "s3://bucket/out"],
     2, ["data.input https://b.s3.amazonaws.com/x.csv?X-Amz-Credential=***"
         "&X-Amz-Signature=***: a URL holding credentials can't be sent"], SIGNATURE),
]


@pytest.mark.parametrize("case, args, code, expected, secret", URL_CASES,
                         ids=[c[0] for c in URL_CASES])
def test_a_secret_in_a_setting_is_never_shown_or_written(case, args, code, expected, secret,
                                                         project, tmp_path):
    result = invoke(args)
    assert result.exit_code == code, result.output
    for text in expected:
        assert text in result.output
    assert secret not in result.output
    assert "Traceback" not in result.output
    assert leaks(secret, tmp_path) == []
    assert not (project / "job.yaml").exists()
    assert not (project / ".toolkit" / "specs").exists()  # refused before staging


# A run reads its input with the real URL and shows and stores it redacted. These
# fail reading the input (nothing listens), after the run directory is made and Ray joined.
RUN_CASES = [
    ("http --input with user:password", f"http://me:{SECRET}@{DEAD}/customers.csv",
     f"http://***@{DEAD}/customers.csv", SECRET),
    ("presigned --input", f"http://{DEAD}/customers.csv?X-Amz-Credential=AKIAEXAMPLE%2F1"
     f"&X-Amz-Signature={SIGNATURE}&X-Amz-Security-Token={SECRET}",
     f"http://{DEAD}/customers.csv?X-Amz-Credential=***&X-Amz-Signature=***"
     "&X-Amz-Security-Token=***", SIGNATURE),
    ("s3 --input with a key and secret", f"s3://AKIAEXAMPLE:{SECRET}@bucket/customers.csv?{S3_DEAD}",
     f"s3://***@bucket/customers.csv?{S3_DEAD}", SECRET),
    ("s3 --input with a percent-encoded secret",  # parses, so S3 is asked (and refuses)
     f"s3://AKIAEXAMPLE:{SECRET.replace('/', '%2F').replace('+', '%2B')}@bucket/"
     f"customers.csv?{S3_DEAD}", f"s3://***@bucket/customers.csv?{S3_DEAD}", "SECRETKEY"),
]


@pytest.mark.parametrize("case, url, shown, secret", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_a_run_redacts_credentials_in_its_input_url(case, url, shown, secret, local_ray,
                                                    project, tmp_path):
    out = project / "out"
    result = invoke(["run", "text-industry", "--smoke", "--rows", "10", "--input", url,
                     "--output", str(out)])
    assert result.exit_code == 2, result.output
    assert f"with sample:tiny-chat: {shown} -> {out}" in result.output  # the "Running" line
    assert f"data.input: can't read {shown}" in result.output
    assert secret not in result.output and SECRET not in result.output
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["spec"]["data"]["input"] == shown
    assert (out / "_logs" / "run.log").is_file()
    assert leaks(secret, tmp_path) == [] and leaks(SECRET, tmp_path) == []


PASSWORD = "pa55-HTTP-SECRET-word"


@pytest.fixture
def guarded_csv(tmp_path: Path):
    """customers.csv served over HTTP only to ``me:PASSWORD`` (basic auth); yields the
    URL with the credentials in it and the statuses the server answered with."""
    import base64
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from toolkit.samples.customers import write_customers_csv

    served = tmp_path / "served"
    write_customers_csv(served / "customers.csv", rows=20)
    expected = "Basic " + base64.b64encode(f"me:{PASSWORD}".encode()).decode()
    statuses: list[int] = []

    class Guarded(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def send_head(self):
            self.path = self.path.split("?", 1)[0]
            if self.headers.get("Authorization") != expected:
                statuses.append(401)
                self.send_error(401)
                return None
            statuses.append(200)
            return super().send_head()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        yield (f"http://me:{PASSWORD}@127.0.0.1:{port}/customers.csv"
               f"?X-Amz-Signature={SIGNATURE}"), statuses
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_a_run_reads_with_the_credentials_and_writes_them_nowhere(guarded_csv, local_ray,
                                                                  project, tmp_path):
    url, statuses = guarded_csv
    out = project / "out"
    result = invoke(["run", "text-industry", "--smoke", "--rows", "10", "--input", url,
                     "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "rows written:  10 (10 ok, 0 with an error)" in result.output
    assert statuses and set(statuses) == {200}  # read with the real credentials
    shown = url.replace(f"me:{PASSWORD}", "***").replace(SIGNATURE, "***")
    assert f"with sample:tiny-chat: {shown} -> {out}" in result.output
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["spec"]["data"]["input"] == shown
    assert (out / "_summary.json").is_file() and (out / "_logs" / "run.log").is_file()
    for secret in (PASSWORD, SIGNATURE):
        assert secret not in result.output
        assert leaks(secret, tmp_path) == []


def test_a_rotated_key_resumes_the_same_run(project):
    """The resume fingerprint is taken from the redacted spec: new credentials for the
    same data are the same spec."""
    from toolkit.run.output.fingerprint import results_fingerprint
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")

    def fingerprint(url: str) -> str:
        return results_fingerprint(load_job_spec(job, overrides={"data.input": url}))

    assert fingerprint("s3://AKIA1:old@bucket/x.csv") == fingerprint("s3://AKIA2:new@bucket/x.csv")
    assert fingerprint("s3://AKIA1:old@bucket/x.csv") != fingerprint("s3://AKIA1:old@bucket/y.csv")


# --- credential files in a project --------------------------------------------------

CREDENTIAL_FILES = [".env", ".env.production", ".netrc", ".git-credentials",
                    ".aws/credentials", ".ssh/id_rsa", "id_rsa.pem", "tls/server.key",
                    "config/.env"]


def test_credential_files_stay_out_of_the_upload_and_the_size_warning(project, tmp_path):
    for name in CREDENTIAL_FILES:
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"AWS_SECRET_ACCESS_KEY={SECRET}\n")
    with open(project / ".aws" / "big-cache", "wb") as handle:
        handle.truncate(300 * 2**20)  # sparse: would top the warning if it were counted
    (project / "data").mkdir()
    with open(project / "data" / "big.bin", "wb") as handle:
        handle.truncate(101 * 2**20)
    (project / "scorer.py").write_text("class Scorer:\n    def __call__(self, batch):\n"
                                       "        return batch\n")

    result = invoke(["render", "text-industry", "--output", "s3://bucket/out", "-o", "job.yaml"])
    assert result.exit_code == 0, result.output
    assert "Biggest entries: data/ (101 MiB)" in result.output
    warning = result.output.split("Biggest entries:")[1].split("\n")[0]
    for shown in (".env", ".aws", ".netrc", ".ssh", "id_rsa", "server.key", "tls", "config"):
        assert shown not in warning

    # Excluded as Ray matches them (.gitignore lines), by the rendered job.yaml's list.
    from ray._private.runtime_env.packaging import _get_excludes

    excludes = yaml.safe_load((project / "job.yaml").read_text())["excludes"]
    excluded = _get_excludes(project, excludes)
    for name in CREDENTIAL_FILES:
        assert excluded(project / name), name
    for name in ("scorer.py", "data/big.bin", ".toolkit/specs", "job.yaml"):
        assert not excluded(project / name), name
    secret_files = tuple(project / name for name in CREDENTIAL_FILES)
    assert leaks(SECRET, tmp_path, skip=secret_files) == []


# --- a YAML job stays data ------------------------------------------------------------

PREDICTOR_JOB = """
job: hostile
predictor: {predictor}
options:
  input_columns: [review]
  output: {{score: double}}
  init_kwargs: {{args: [touch, {touched}]}}
data: {{input: reviews.csv, id_column: review_id}}
engine: {{batch_size: 4, accelerator_type: none}}
"""

INHERITS = "import subprocess\n\n\nclass Sneaky(subprocess.Popen):\n    pass\n"
OWN_CALL = ("import numpy as np\n\n\nclass Scorer:\n    def __init__(self, **kwargs):\n"
            "        self.kwargs = kwargs\n\n    def __call__(self, batch):\n"
            "        return {'score': np.zeros(len(batch['review']))}\n")

# (case, predictor, files in the project, text the user must see)
REFUSED = [
    ("a stdlib class", "subprocess:Popen", {},
     "engine.model: subprocess:Popen is not a class of your project, so the toolkit won't "
     "construct or call it."),
    ("a stdlib function", "os:system", {},
     "engine.model: os:system is not a class of your project"),
    ("a site-packages class with its own __call__", "click:Command", {},
     "engine.model: click:Command is not a class of your project"),
    ("a class that inherits __call__", "sneaky.py:Sneaky", {"sneaky.py": INHERITS},
     "engine.model: class Sneaky in sneaky.py does not define __call__(batch) itself"),
    ("a file outside the project", "../elsewhere/scorer.py:Scorer",
     {"../elsewhere/scorer.py": OWN_CALL},
     "engine.model: ../elsewhere/scorer.py:Scorer is not a class of your project"),
    ("a file in the project's virtualenv",
     ".venv/lib/python3.12/site-packages/scorer.py:Scorer",
     {".venv/lib/python3.12/site-packages/scorer.py": OWN_CALL},
     "is not a class of your project"),
    ("a file in a conda environment kept in the project", "env/lib/python3.12/scorer.py:Scorer",
     {"env/conda-meta/history": "", "env/lib/python3.12/scorer.py": OWN_CALL},
     "is not a class of your project"),
]


def write_job(project: Path, predictor: str, files: dict[str, str], touched: Path | str) -> None:
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    (project / "reviews.csv").write_text("review_id,review\n1,Fine\n")
    (project / "hostile.yaml").write_text(
        PREDICTOR_JOB.format(predictor=predictor, touched=touched))


@pytest.mark.parametrize("command", ["show", "render", "run"])
@pytest.mark.parametrize("case, predictor, files, expected", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_yaml_job_naming_a_class_not_its_users_own_is_refused(case, predictor, files, expected,
                                                                command, project, tmp_path):
    touched = tmp_path / "touched-by-the-job"
    write_job(project, predictor, files, touched)
    args = {"show": [], "render": ["-o", "job.yaml"], "run": ["--smoke"]}[command]
    result = invoke([command, "./hostile.yaml", *args])
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "may name only a class defined in a .py file of your project" in result.output
    assert "Traceback" not in result.output
    assert not touched.exists()
    assert not (project / "job.yaml").exists() and not (project / ".toolkit").exists()


# Running the user's own class end to end is tests/tasks/test_predictor_job.py.
ALLOWED = [
    ("the user's own file", "scorer.py:Scorer", {"scorer.py": OWN_CALL},
     "model: scorer.py:Scorer"),
    ("the user's own module", "models.scoring:Scorer",
     {"models/__init__.py": "", "models/scoring.py": OWN_CALL}, "model: models.scoring:Scorer"),
]


@pytest.mark.parametrize("case, predictor, files, expected", ALLOWED, ids=[c[0] for c in ALLOWED])
def test_a_yaml_job_naming_its_users_own_class_loads(case, predictor, files, expected, project):
    write_job(project, predictor, files, "x")
    result = invoke(["show", "./hostile.yaml"])
    assert result.exit_code == 0, result.output
    assert expected in result.output


def test_a_class_named_by_a_flag_or_spec_file_is_checked_too(project):
    (project / "spec.yaml").write_text("engine: {kind: python, task: custom, model: os:system}\n")
    for args in (["--set", "engine.kind=python", "--set", "engine.task=custom",
                  "--set", "engine.model=subprocess:Popen"], ["-f", "spec.yaml"]):
        result = invoke(["show", "text-industry", *args])
        assert result.exit_code == 2, result.output
        assert "is not a class of your project" in result.output


def test_a_job_file_in_a_subfolder_names_its_own_neighbour(project):
    (project / "jobs").mkdir()
    (project / "jobs" / "scorer.py").write_text(OWN_CALL)
    (project / "jobs" / "review.yaml").write_text(
        PREDICTOR_JOB.format(predictor="scorer.py:Scorer", touched="x"))
    result = invoke(["show", "jobs/review.yaml"])
    assert result.exit_code == 0, result.output
    assert "model: jobs/scorer.py:Scorer" in result.output  # as the run resolves it, from here


SHARED_JOB = """
from shared_models import Scorer  # the user's own import, from their installed code

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.jobs import predictor_job as predictor


def preprocess(row, options):
    return predictor.preprocess(row, options)


def postprocess(row, options):
    return predictor.postprocess(row, options)


JOB = JobDefinition(
    name="shared", description="Scores with a class from the user's own package.",
    spec_model=predictor.PredictorJobSpec, preprocess=preprocess, postprocess=postprocess,
    required_columns=lambda options: list(options.input_columns),
    result_columns=lambda options: dict(options.output),
    defaults={"engine": {"kind": "python", "task": "custom", "model": "shared_models:Scorer",
                         "batch_size": 4, "accelerator_type": None},
              "data": {"input": "reviews.csv", "id_column": "review_id"},
              "options": {"input_columns": ["review"], "output": {"score": "double"}}},
)
"""


def test_a_class_from_a_module_the_users_python_job_imports(project, tmp_path, monkeypatch):
    lib = tmp_path / "site"  # outside the project, as an installed package is
    lib.mkdir()
    (lib / "shared_models.py").write_text(OWN_CALL)
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.delitem(sys.modules, "shared_models", raising=False)
    (project / "reviews.csv").write_text("review_id,review\n1,Fine\n")
    (project / "hostile.yaml").write_text(
        PREDICTOR_JOB.format(predictor="shared_models:Scorer", touched="x"))
    refused = invoke(["show", "./hostile.yaml"])  # a YAML job can't reach it
    assert refused.exit_code == 2, refused.output
    assert "engine.model: shared_models:Scorer is not a class of your project" in refused.output

    (project / "shared_job.py").write_text(SHARED_JOB)
    allowed = invoke(["show", "./shared_job.py"])  # the user's Python job imports it
    sys.modules.pop("shared_models", None)
    assert allowed.exit_code == 0, allowed.output
    assert "model: shared_models:Scorer" in allowed.output
