"""The GitHub Actions workflows: actionlint (with its shellcheck pass) and the shape the issue asks for.

actionlint is built by scripts/bootstrap.sh from its Go module (scripts/toolchain/actionlint); it runs
shellcheck over every `run:` script, and the test below shows that pass is really on.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
ACTIONLINT = REPO / ".toolchain" / "bin" / "actionlint"
REAL_STACKS = sorted(p.name.split(".")[1] for p in REPO.glob("Pulumi.*.yaml") if p.name != "Pulumi.dev.yaml")


def actionlint(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    if not ACTIONLINT.exists():
        pytest.fail("actionlint is not built: run `bash scripts/bootstrap.sh` (scripts/test.sh does)")
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: run `bash scripts/bootstrap.sh` as root (system packages)")
    return subprocess.run(
        [str(ACTIONLINT), "-no-color", "-oneline", *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        check=False,
    )


def workflow(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return loaded


def test_actionlint_and_shellcheck_find_nothing() -> None:
    linted = actionlint()
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert linted.stdout == ""


def test_actionlint_runs_shellcheck_over_run_scripts(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: cp $SOURCE /tmp\n"
    )
    linted = actionlint(str(bad), cwd=tmp_path)
    assert linted.returncode == 1
    assert "SC2086" in linted.stdout, linted.stdout  # unquoted $SOURCE: shellcheck's finding


def _run_steps(doc: dict[str, Any]) -> list[str]:
    return [step["run"] for job in doc["jobs"].values() for step in job.get("steps", []) if "run" in step]


@pytest.mark.parametrize("name", sorted(p.name for p in WORKFLOWS.glob("*.yml")))
def test_every_step_calls_a_repository_script(name: str) -> None:
    for run in _run_steps(workflow(name)):
        command = run.strip().split()
        if command[0] == "exec":  # the step's shell becomes the script: a cancel's signal reaches it
            command = command[1:]
        assert command[0] in ("bash", "python3"), run
        script = REPO / command[1]
        assert script.is_file() and script.parts[len(REPO.parts)] in ("scripts", ".ci"), run
    action = yaml.safe_load((REPO / ".github" / "actions" / "setup" / "action.yml").read_text())
    assert [s["run"] for s in action["runs"]["steps"] if "run" in s] == ["bash scripts/ci/setup.sh"]


def test_pull_requests_preview_every_real_stack_into_one_comment() -> None:
    doc = workflow("pull-request.yml")
    jobs = doc["jobs"]
    assert sorted(jobs["preview"]["strategy"]["matrix"]["stack"]) == REAL_STACKS
    assert "bash scripts/ci/test.sh" in _run_steps({"jobs": {"test": jobs["test"]}})
    assert jobs["comment"]["needs"] == "preview"
    assert jobs["comment"]["permissions"]["pull-requests"] == "write"
    # Nothing else in the workflow may write to the repository or the PR.
    assert doc["permissions"] == {"contents": "read"}


def test_deploys_go_staging_canary_production_each_in_its_environment_never_overlapping() -> None:
    jobs = workflow("deploy.yml")["jobs"]
    assert [jobs[s]["needs"] for s in ("staging", "canary", "production")] == [
        "test",
        "staging",
        ["canary", "production-preview"],
    ]
    for stack in REAL_STACKS:
        job = jobs[stack]
        assert job["environment"] == stack
        assert job["concurrency"] == {"group": f"deploy-{stack}", "cancel-in-progress": False}
        # exec: a cancelled or timed-out job signals the step's shell, which is then pulumi's wrapper
        # (scripts/private-tmp.sh passes SIGTERM on to pulumi, which stops and writes its state).
        assert _run_steps({"jobs": {stack: job}}) == [f"exec bash scripts/ci/deploy.sh {stack}"]
        assert job["timeout-minutes"] == 240
    assert jobs["staging"]["if"] == "github.ref == 'refs/heads/main'"


def test_production_deploys_only_the_plan_its_reviewers_were_shown() -> None:
    jobs = workflow("deploy.yml")["jobs"]
    shown = jobs["production-preview"]
    # After canary deployed, before production's approval: production's preview, in the run's summary.
    assert shown["needs"] == "canary" and shown["environment"] == "preview-production"
    assert _run_steps({"jobs": {"p": shown}}) == [
        "bash scripts/ci/preview.sh production preview",
        'python3 scripts/ci/preview.py comment preview >> "$GITHUB_STEP_SUMMARY"',
    ]
    [upload] = [s for s in shown["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["with"]["name"] == "production-preview" and upload["with"]["path"] == "preview/"
    # The deploy gets that preview and hands it to deploy.sh, which previews again and compares.
    deploy = jobs["production"]["steps"]
    [download] = [s for s in deploy if s.get("uses", "").startswith("actions/download-artifact")]
    assert download["with"] == {"name": "production-preview", "path": "approved-preview"}
    [step] = [s for s in deploy if "run" in s]
    assert deploy.index(download) < deploy.index(step)
    assert step["env"] == {"APPROVED_PREVIEW": "approved-preview"}
    script = (REPO / "scripts" / "ci" / "deploy.sh").read_text()
    verify = 'python3 "$here/preview.py" verify "$stack" --approved "$APPROVED_PREVIEW"'
    assert verify in script and script.index(verify) < script.index("pulumi up --yes")


def test_the_watcher_image_is_pushed_by_digest_and_the_digest_is_what_gets_pinned() -> None:
    jobs = workflow("watcher-image.yml")["jobs"]
    build = jobs["build"]
    push = next(s for s in build["steps"] if s.get("id") == "push")
    assert push["with"]["file"] == "watcher/Dockerfile" and push["with"]["push"] is True
    assert build["outputs"]["image"] == "ghcr.io/tuist/tuist-infra-watcher@${{ steps.push.outputs.digest }}"
    assert _run_steps({"jobs": {"pin": jobs["pin"]}}) == [
        'bash scripts/ci/watcher-pin-pr.sh "${{ needs.build.outputs.image }}"'
    ]


def test_the_test_job_runs_ci_run_as_root_through_sudo_keeping_home_and_path() -> None:
    path, done = _through_stand_in_sudo("scripts/ci/test.sh")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["-E", "env", f"PATH={path}", "bash", f"{REPO}/.ci/run"]


def _through_stand_in_sudo(*command: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """Run `bash COMMAND...` as nobody, with a stand-in sudo first on PATH; (that PATH, the run).

    The runner's user is not root; the tests and benchmarks are (scripts/netns.sh). The stand-in
    records what it was asked to run, in a folder the unprivileged user can read: under /tmp itself,
    since pytest's folders and the run's TMPDIR (scripts/private-tmp.sh, mode 0700) are root's alone."""
    with tempfile.TemporaryDirectory(dir="/tmp") as name:
        fake = Path(name)
        fake.chmod(0o755)
        (fake / "sudo").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
        (fake / "sudo").chmod(0o755)
        path = f"{fake}:/usr/bin:/bin"
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", *command],
            cwd=REPO,
            env={"PATH": path, "HOME": "/nonexistent"},
            capture_output=True,
            text=True,
            timeout=30,
        )
    return path, done


def test_the_benchmark_gates_run_the_quick_set_on_pull_requests_and_the_full_set_each_night() -> None:
    doc = workflow("bench.yml")
    triggers = doc[True]  # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"pull_request", "schedule", "workflow_dispatch"}
    # A pull request that changes what the benchmarks measure (or the benchmarks) runs them.
    paths = triggers["pull_request"]["paths"]
    assert {"providers/**", "components/**", "bench/**", "vendorsim/**", "__main__.py"} <= set(paths)
    assert _run_steps(doc) == [
        "bash scripts/ci/bench.sh \"${{ github.event_name == 'pull_request' && 'quick' || 'full' }}\""
    ]
    upload = doc["jobs"]["gate"]["steps"][-1]
    assert upload["with"]["path"] == "bench-results/" and upload["if"] == "${{ !cancelled() }}"


def test_the_benchmark_script_refuses_an_unknown_set_and_runs_as_root_through_sudo() -> None:
    refused = subprocess.run(
        ["bash", "scripts/ci/bench.sh", "nightly"], cwd=REPO, capture_output=True, text=True
    )
    assert (refused.returncode, refused.stderr) == (2, "usage: bash scripts/ci/bench.sh quick|full\n")
    path, done = _through_stand_in_sudo("scripts/ci/bench.sh", "quick")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "-E",
        "env",
        f"PATH={path}",
        "bash",
        f"{REPO}/scripts/ci/bench.sh",
        "quick",
    ]
