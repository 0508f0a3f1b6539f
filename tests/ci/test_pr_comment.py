"""scripts/ci/pr-comment.sh keeps one preview comment per pull request.

GitHub is not reachable from here, so `gh` is a stand-in on PATH that records each call and answers
the comment listing from a file; the test asserts the exact API calls the script makes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- tuist-infra-preview -->"

FAKE_GH = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$GH_CALLS"
if [ "$1 $2" = "api --paginate" ]; then
    # --jq FILTER: apply it to the recorded listing with python (jq may not be installed).
    python3 - "$GH_COMMENTS" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1])):
    if c["body"].startswith("<!-- tuist-infra-preview -->"):
        print(c["id"])
PY
fi
"""


@pytest.fixture
def gh(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GH_CALLS": str(tmp_path / "calls"),
        "GH_COMMENTS": str(tmp_path / "comments.json"),
        "GITHUB_REPOSITORY": "tuist/tuist-infra",
        "PR_NUMBER": "42",
    }


def post(env: dict[str, str], tmp_path: Path, comments: list[dict[str, object]], body: str) -> list[str]:
    Path(env["GH_COMMENTS"]).write_text(json.dumps(comments))
    (tmp_path / "body.md").write_text(body)
    done = subprocess.run(
        ["bash", str(REPO / "scripts/ci/pr-comment.sh"), str(tmp_path / "body.md")],
        env=env,
        text=True,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Path(env["GH_CALLS"]).read_text().splitlines()


def test_the_first_preview_creates_the_comment(gh: dict[str, str], tmp_path: Path) -> None:
    calls = post(gh, tmp_path, [{"id": 7, "body": "LGTM"}], f"{MARKER}\n### preview\n")
    assert (
        calls[1]
        == f"api --method POST repos/tuist/tuist-infra/issues/42/comments -F body=@{tmp_path}/body.md"
    )
    assert len(calls) == 2


def test_a_later_push_updates_the_same_comment(gh: dict[str, str], tmp_path: Path) -> None:
    comments = [{"id": 7, "body": "LGTM"}, {"id": 9, "body": f"{MARKER}\nold preview"}]
    calls = post(gh, tmp_path, comments, f"{MARKER}\n### preview\n")
    assert calls[0].startswith("api --paginate repos/tuist/tuist-infra/issues/42/comments --jq ")
    assert (
        calls[1]
        == f"api --method PATCH repos/tuist/tuist-infra/issues/comments/9 -F body=@{tmp_path}/body.md"
    )


def test_a_body_without_its_marker_is_refused(gh: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "body.md").write_text("### preview\n")
    done = subprocess.run(
        ["bash", str(REPO / "scripts/ci/pr-comment.sh"), str(tmp_path / "body.md")],
        env=gh,
        text=True,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 1 and "does not start with its <!-- marker -->" in done.stderr
    assert not Path(gh["GH_CALLS"]).exists()
