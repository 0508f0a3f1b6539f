"""scripts/ci/preview.py reads what `pulumi preview` printed and renders the one PR comment.

The inputs are the CLI's real output, recorded from previews of tests/policy/fixtures/breaks (eight
violations of four mandatory policies), with --diff (what CI runs) and without. The rendering of a
real dev-stack preview with an advisory violation is checked end to end in
tests/e2e/test_s3_backend.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "ci"))
import preview  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WITH_DIFF = (FIXTURES / "preview-diff-violations.txt").read_text()
WITHOUT_DIFF = (FIXTURES / "preview-violations.txt").read_text()


def test_violations_are_read_with_their_messages_in_both_renderings() -> None:
    found = preview.violations(WITH_DIFF)
    assert len(found) == 8
    assert sorted(found, key=repr) == sorted(preview.violations(WITHOUT_DIFF), key=repr)
    assert (
        preview.Violation(
            "mandatory",
            "failover-ip-routable-vendor",
            "pulumi-python:dynamic/failover:FailoverIP: runners-flexible-ip",
            "failover IP 198.51.100.30 (runners-flexible-ip) is on scaleway_em, which cannot route a "
            "failover IP; only ovh, dedibox, robot can",
        )
        in found
    )
    assert {v.policy for v in found} == {
        "production-machines-protected",
        "peer-demux-sni-passthrough-7443",
        "kata-runner-pools",
        "failover-ip-routable-vendor",
    }


def test_the_change_summary() -> None:
    assert preview.changes(WITH_DIFF) == "9 to create"
    text = "Resources:\n    ~ 3 to update\n    - 1 to delete\n    +-1 to replace\n    80 unchanged\n\nDone"
    assert preview.changes(text) == "3 to update, 1 to delete, 1 to replace, 80 unchanged"


def _result(tmp: Path, stack: str, code: int, text: str, baseline: bool = True) -> None:
    (tmp / f"{stack}.txt").write_text(text)
    command = f"pulumi preview --diff --policy-pack policy --stack {stack}"
    (tmp / f"{stack}.json").write_text(
        json.dumps({"stack": stack, "exit_code": code, "command": command, "baseline": baseline})
    )


def test_one_comment_for_every_stack_with_the_failures_first_visible(tmp_path: Path) -> None:
    _result(tmp_path, "production", 1, WITH_DIFF)
    _result(tmp_path, "staging", 0, "Resources:\n    70 unchanged\n", baseline=False)
    body = preview.comment(tmp_path)
    lines = body.splitlines()
    assert lines[0] == preview.MARKER
    assert (
        "| `production` | ❌ policy violation | 9 to create | 8 mandatory: failover-ip-routable-vendor, "
        "kata-runner-pools, peer-demux-sni-passthrough-7443, production-machines-protected |" in lines
    )
    assert "| `staging` | ✅ previewed | 70 unchanged | none |" in lines
    assert (
        "- `production` **mandatory** `kata-runner-pools` on `kubernetes:tuist.dev/v1alpha1:RunnerPool: "
        "runc-runner-pool`: RunnerPool linux: a Linux pool with runtimeClass 'runc'; its pods must be "
        "kata-qemu microVMs" in lines
    )
    assert "No deployed outputs for staging" in body
    assert body.count("<details>") == 2


def test_the_comment_stays_under_github_s_limit(tmp_path: Path) -> None:
    for stack in ("canary", "production", "staging"):
        _result(tmp_path, stack, 0, "Resources:\n    1 to update\n" + "x" * 100_000)
    body = preview.comment(tmp_path)
    assert len(body) < preview.COMMENT_LIMIT
    assert body.count("(truncated: the job log has it all)") == 3
