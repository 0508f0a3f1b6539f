"""ops.stack.PulumiStack reads a stack's config through the real Pulumi CLI (`pulumi config --json
--show-secrets`), values typed as the program's loader reads them, and fails in one line without it;
its state export runs beside the config read and is stopped when nothing reads it. The project's
stack files are read from its root, found upward from the working directory as the CLI finds it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from config.loader import read_stack_file
from ops.stack import OpsError, PulumiStack, StaticStack, open_stack
from providers.claims import claim_token
from providers.vendor import Vendor
from tests.providers.test_machine_support import PROJECT, REPO
from tests.support.pulumi_home import cli_env

PULUMI = REPO / ".toolchain" / "bin" / "pulumi"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with the dev stack file and an initialised, empty dev stack on a folder backend."""
    if not PULUMI.exists():
        pytest.fail("the Pulumi CLI is not built: run `bash scripts/bootstrap.sh`")
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        (project / name).write_text((REPO / name).read_text())
    # A bare boolean comes back from `pulumi config --json` as text: it must reach the loader as a bool.
    text = (
        (project / "Pulumi.dev.yaml")
        .read_text()
        .replace(
            "  tuist-infra:environment: dev\n",
            "  tuist-infra:environment: dev\n  tuist-infra:allow_production_release: false\n",
        )
    )
    (project / "Pulumi.dev.yaml").write_text(text)
    for key, value in cli_env(tmp_path, passphrase="tuist-dev-only-passphrase").items():
        monkeypatch.setenv(key, value)
    subprocess.run(
        ["pulumi", "stack", "init", "dev", "--non-interactive"], cwd=project, check=True, capture_output=True
    )
    return project


def test_the_dev_stack_file_reads_as_the_program_reads_it(project: Path) -> None:
    stack = open_stack(PulumiStack("dev", cwd=project), project_dir=project)

    assert stack.cfg.environment.value == "dev"
    assert stack.cfg.allow_production_release is False
    assert [f.name for f in stack.cfg.fleets] == [
        "kura-ovh",
        "kura-dedibox",
        "runners-linux",
        "kura-scw",
        "runners-macos",
    ]
    assert stack.settings.secret("robotPassword", why="test") == "dev-robot-password"
    assert "dev-robot-password" not in repr(stack)
    assert stack.scrub("robot says dev-robot-password") == "robot says ***"

    with pytest.raises(OpsError) as missing:
        PulumiStack("nope", cwd=project).config()
    assert str(missing.value).startswith("pulumi config -s nope failed: error: ")


def test_the_state_export_runs_beside_the_config_read(project: Path) -> None:
    source = PulumiStack("dev", cwd=project)
    source.config()
    running = source._export
    assert running is not None and running.args[:3] == ["pulumi", "stack", "export"]

    assert source.resources() == []  # an initialised stack with nothing deployed yet
    assert source._export is None and running.returncode == 0
    # Read once: a second call does not run the CLI again.
    assert source.resources() == []


def test_an_export_nothing_reads_is_stopped_and_a_failed_config_read_leaves_none(project: Path) -> None:
    source = PulumiStack("dev", cwd=project)
    source.config()
    running = source._export
    assert running is not None
    source.close()
    assert source._export is None and running.returncode is not None

    missing = PulumiStack("nope", cwd=project)
    with pytest.raises(OpsError):
        missing.config()
    assert missing._export is None


def test_the_project_s_stack_files_are_read_from_its_root_when_run_from_a_subdirectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from docs/ (or deeper), tuist-ops reads the same stack files as from the root: the nearest
    directory above holding Pulumi.yaml, where `pulumi` finds the project. Another stack's claim
    reads as that stack's, its markers as another environment's; outside a project, one line."""
    project = tmp_path / "project"
    (project / "docs" / "deep").mkdir(parents=True)
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.staging.yaml"):
        (project / name).write_text((REPO / name).read_text())
    values = {f"{PROJECT}:{k}": v for k, v in read_stack_file(REPO / "Pulumi.dev.yaml").items()}
    staging_claim = claim_token(PROJECT, "staging", "kura-ca-east-0")

    def seen_from(directory: Path) -> tuple[Path, list[str], str, dict[str, str]]:
        monkeypatch.chdir(directory)
        stack = open_stack(StaticStack("dev", values))
        return (
            stack.project_dir,
            sorted(stack.project_stacks()),
            str(stack.holder(staging_claim)),
            stack.other_environment_markers(Vendor.OVH),
        )

    at_root = seen_from(project)
    assert at_root == (
        project.resolve(),
        ["dev", "staging"],
        "staging/kura-ca-east-0",
        {"tuist-kura-staging-ca-east": "staging"},
    )
    assert seen_from(project / "docs") == at_root
    assert seen_from(project / "docs" / "deep") == at_root

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    with pytest.raises(OpsError) as error:
        open_stack(StaticStack("dev", values))
    assert str(error.value) == (
        f"no Pulumi.yaml in {outside.resolve()} or any directory above it: run tuist-ops inside the "
        "project (the repository's checkout)"
    )
