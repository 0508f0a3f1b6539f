"""scripts/ci/preview.py verify: production deploys only the steps its reviewers approved.

The deploy workflow previews production (production-preview), its reviewers approve that preview,
and deploy.sh previews again and stops unless the same resources take the same steps. Here a
stand-in `pulumi` prints a recorded preview (the CLI's real --diff output of
tests/ci/fixtures/preview-diff-violations.txt, which plans nine creates).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "ci"))
import preview  # noqa: E402

APPROVED = (Path(__file__).resolve().parent / "fixtures" / "preview-diff-violations.txt").read_text()
URN = "urn:pulumi:production::tuist-infra::"
EXTRA_STEP = (
    "    ~ kubernetes:apps/v1:Deployment: (update)\n"
    f"        [urn={URN}kubernetes:apps/v1:Deployment::kura-gateway-us-east]\n"
    "      ~ spec: {}\n"
)


def test_the_planned_steps_are_each_resources_step_and_urn() -> None:
    steps = preview.planned_steps(APPROVED)
    assert len(steps) == 9 and preview.changes(APPROVED) == "9 to create"
    assert f"create {URN}pulumi-python:dynamic/machine:AdoptedMachine::kura-dedibox-0" in steps
    assert f"create {URN}pulumi:pulumi:Stack::tuist-infra-production" in steps
    # A resource shown for context only (a parent that does not change) is no step.
    same = (
        f"    pulumi:pulumi:Stack: (same)\n        [urn={URN}pulumi:pulumi:Stack::tuist-infra-production]\n"
    )
    assert preview.planned_steps(same + EXTRA_STEP) == [
        f"update {URN}kubernetes:apps/v1:Deployment::kura-gateway-us-east"
    ]


def _verify(
    tmp: Path, now: str, *, approved: str | None = APPROVED, code: int = 0
) -> subprocess.CompletedProcess[str]:
    folder = tmp / "approved"
    folder.mkdir()
    if approved is not None:
        (folder / "production.txt").write_text(approved)
        (folder / "production.json").write_text(json.dumps({"stack": "production", "exit_code": code}))
    (tmp / "now.txt").write_text(now)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    # `stack output` fails (no baseline), `preview` prints the recorded text.
    (bin_dir / "pulumi").write_text(
        '#!/bin/sh\n[ "$1" = preview ] || exit 1\nprintf "%s" "$(cat "$NOW")"\necho "$@" >> "$CALLS"\n'
    )
    (bin_dir / "pulumi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NOW": str(tmp / "now.txt")}
    env["CALLS"] = str(tmp / "calls")
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "ci" / "preview.py"),
            "verify",
            "production",
            "--approved",
            str(folder),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_approved_plan_deploys(tmp_path: Path) -> None:
    done = _verify(tmp_path, APPROVED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "verify: production plans the approved steps (9 to create)"
    [call] = (tmp_path / "calls").read_text().splitlines()
    assert call.startswith(
        "preview --diff --color never --non-interactive --policy-pack policy --stack production"
    )


def test_a_plan_that_moved_since_the_approval_deploys_nothing_and_says_what_moved(tmp_path: Path) -> None:
    now = APPROVED.replace("Resources:", EXTRA_STEP + "Resources:", 1)
    done = _verify(tmp_path, now)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "verify: production's plan is not the one approved; nothing was deployed.",
        f"  planned now, not approved:   update {URN}kubernetes:apps/v1:Deployment::kura-gateway-us-east",
        "  Re-run the deploy workflow: its production-preview job shows the plan to approve.",
    ]


@pytest.mark.parametrize(
    ("approved", "code", "message"),
    [
        (None, 0, "verify: no approved preview of production in "),
        (APPROVED, 255, "verify: the approved preview of production failed (exit 255)"),
    ],
)
def test_without_a_passing_approved_preview_nothing_deploys(
    tmp_path: Path, approved: str | None, code: int, message: str
) -> None:
    done = _verify(tmp_path, APPROVED, approved=approved, code=code)
    assert done.returncode != 0
    assert done.stderr.startswith(message)
    assert not (tmp_path / "calls").exists()  # no preview was even run
