"""The Pages workflow deploys the site CI built and checked, and nothing else.

.github/workflows/deploy.yml cannot run here, so these tests read it: the job that runs `.ci/run`
must upload the `_build/html` that `.ci/run` built (and browser-checked) right after it, and the
deploy job may only publish that artifact. A second build (as before, in a job that installed
only part of the stack and failed on `No module named 'PIL'`) fails them.
"""

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "deploy.yml"
CI = ROOT / ".ci" / "run"
UPLOAD = "actions/upload-pages-artifact@"
DEPLOY = "actions/deploy-pages@"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def uses(step):
    return step.get("uses", "")


def ci_job(workflow):
    """(name, job) of the one job that runs .ci/run."""
    found = [(name, job) for name, job in workflow["jobs"].items()
             if any(step.get("run", "").strip() == "bash .ci/run" for step in job["steps"])]
    assert len(found) == 1, f"exactly one job must run `bash .ci/run`, found {len(found)}"
    return found[0]


def ci_commands():
    """The commands of .ci/run, continuation lines joined, without comments and the `step`
    lines that only print a heading."""
    text = re.sub(r"\\\n\s*", " ", CI.read_text(encoding="utf-8"))
    lines = (ln.strip() for ln in text.splitlines())
    return [ln for ln in lines if ln and not ln.startswith(("#", "step "))]


def test_the_job_that_ran_ci_uploads_what_ci_built(workflow):
    _, job = ci_job(workflow)
    steps = job["steps"]
    i = next(k for k, s in enumerate(steps) if s.get("run", "").strip() == "bash .ci/run")
    assert i + 1 < len(steps), "nothing is uploaded after .ci/run"
    upload = steps[i + 1]
    assert uses(upload).startswith(UPLOAD), f"the step after .ci/run must be {UPLOAD}..."
    assert upload.get("with", {}).get("path") == "_build/html", upload
    assert "if" not in upload, "upload only what passed CI (no `if:` on the upload step)"
    assert "working-directory" not in steps[i] and "working-directory" not in upload
    assert not steps[i + 2:], "no step may change _build/html after CI checked it"


def test_ci_builds_and_checks_the_uploaded_folder():
    commands = ci_commands()
    assert 'cd "$(dirname "$0")/.."' in commands  # everything below runs at the repository root
    builds = [k for k, c in enumerate(commands) if "jupyter-book build" in c]
    assert len(builds) == 1, "one build"
    build = commands[builds[0]]
    assert build == ".venv/bin/jupyter-book build . -W -n --keep-going", build  # -> _build/html
    checks = [k for k, c in enumerate(commands) if "tools/browser_check.py" in c]
    assert checks and min(checks) > builds[0], "the browser check runs on the build"
    after = commands[builds[0] + 1:]
    assert not [c for c in after if "_build/html" in c and "check_build.py" not in c], after
    assert not [c for c in after if re.search(r"\brm\b.*_build", c)], "nothing removes the build"
    assert not [c for c in after if "--html" in c], "browser_check checks BOOK/_build/html"


def test_the_deploy_job_only_publishes_the_ci_artifact(workflow):
    name, _ = ci_job(workflow)
    deploys = {k: job for k, job in workflow["jobs"].items()
               if any(uses(s).startswith(DEPLOY) for s in job["steps"])}
    assert len(deploys) == 1, deploys
    (deploy,) = deploys.values()
    needs = deploy.get("needs")
    assert name in ([needs] if isinstance(needs, str) else needs), "deploy must wait for CI"
    assert [uses(s).split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"], (
        "the deploy job builds, checks out and uploads nothing")
    assert deploy["environment"]["name"] == "github-pages"
    uploads = [s for job in workflow["jobs"].values() for s in job["steps"]
               if uses(s).startswith(UPLOAD)]
    assert len(uploads) == 1, "one artifact: the one CI built"
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "jupyter-book" not in text and "pip install" not in text, "no second build"
    assert ".nojekyll" not in text  # upload-pages-artifact@v4 drops dotfiles; no Jekyll runs


def test_pages_permissions_only_on_the_deploy_job(workflow):
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        perms = job.get("permissions", {})
        if any(uses(s).startswith(DEPLOY) for s in job["steps"]):
            assert perms == {"pages": "write", "id-token": "write"}, perms
        else:
            assert "pages" not in perms and "id-token" not in perms, name


def test_a_deployment_in_flight_is_never_cancelled(workflow):
    for job in workflow["jobs"].values():
        if any(uses(s).startswith(DEPLOY) for s in job["steps"]):
            assert job["concurrency"]["cancel-in-progress"] is False
            assert job["concurrency"]["group"] == "pages"
    # the run-level group cancels an older run of the same pull request, never a run on main
    cancel = workflow["concurrency"]["cancel-in-progress"]
    assert cancel is False or cancel == "${{ github.event_name == 'pull_request' }}", cancel
    assert "github.ref" in workflow["concurrency"]["group"]


def triggers(workflow) -> dict:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True


def test_pull_requests_run_ci_but_never_deploy(workflow):
    on = triggers(workflow)
    assert "pull_request" in on and on["push"]["branches"] == ["main"], on
    name, ci = ci_job(workflow)
    assert "if" not in ci, "CI runs for every trigger, pull requests included"
    (deploy,) = [job for job in workflow["jobs"].values()
                 if any(uses(s).startswith(DEPLOY) for s in job["steps"])]
    condition = deploy.get("if", "")
    assert "github.event_name != 'pull_request'" in condition, condition
    assert "github.ref == 'refs/heads/main'" in condition, condition


def test_ci_has_a_time_limit_and_keeps_pips_cache(workflow):
    _, job = ci_job(workflow)
    assert isinstance(job.get("timeout-minutes"), int) and job["timeout-minutes"] >= 30
    steps = job["steps"]
    i = next(k for k, s in enumerate(steps) if s.get("run", "").strip() == "bash .ci/run")
    caches = [s for s in steps[:i] if uses(s).startswith("actions/cache@")]
    assert len(caches) == 1, "pip's cache is restored before .ci/run"
    assert caches[0]["with"]["path"] == job["env"]["PIP_CACHE_DIR"]
    key = caches[0]["with"]["key"]
    assert "hashFiles('requirements.txt', 'constraints.txt')" in key, key


def test_the_build_learns_the_repository_and_site_it_is_deployed_from(workflow):
    _, job = ci_job(workflow)
    assert job["env"]["BOOK_REPOSITORY"] == "${{ github.repository }}"
    assert "github.io" in job["env"]["BOOK_SITE_URL"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert "book_repository" in config["sphinx"]["local_extensions"]


@pytest.fixture
def book_repository():
    import importlib

    sys.path.insert(0, str(ROOT / "docs" / "sphinx_ext"))
    try:
        yield importlib.import_module("book_repository")
    finally:
        sys.path.remove(str(ROOT / "docs" / "sphinx_ext"))


class FakeConfig:
    def __init__(self, url):
        self.html_theme_options = {"repository_url": url}
        self.html_baseurl = ""


def test_a_build_for_another_repository_fails_and_says_what_to_change(book_repository):
    from sphinx.errors import ConfigError

    config = FakeConfig("https://github.com/grpo-book/grpo-for-programmers")
    env = {"BOOK_REPOSITORY": "alice/grpo-fork"}
    with pytest.raises(ConfigError, match="alice/grpo-fork.*--refresh-first-cell"):
        book_repository.check_repository(config, env)
    env = {"BOOK_REPOSITORY": "GRPO-book/grpo-for-programmers",
           "BOOK_SITE_URL": "https://grpo-book.github.io/grpo-for-programmers"}
    assert "as _config.yml names" in book_repository.check_repository(config, env)
    assert config.html_baseurl == "https://grpo-book.github.io/grpo-for-programmers/"
    assert "not set" in book_repository.check_repository(FakeConfig(
        "https://github.com/a/b"), {})  # a local build: says so, fails nothing
    with pytest.raises(ConfigError):
        book_repository.check_repository(FakeConfig("https://example.org/a/b"), {})


def test_ci_takes_torch_alone_from_the_cpu_index(workflow):
    _, job = ci_job(workflow)
    env = job.get("env", {})
    assert env.get("TORCH_INDEX_URL") == CPU_INDEX
    assert not {"PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"} & set(env), "PyPI stays the only index"
    commands = ci_commands()
    torch = [c for c in commands if "$TORCH_INDEX_URL" in c]
    assert len(torch) == 1 and "--index-url" in torch[0] and "--no-deps" in torch[0], torch
    assert "^torch==" in torch[0] and "requirements.txt" in torch[0]  # the pinned torch alone
