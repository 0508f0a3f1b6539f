"""scripts/ci/pin_image.py: the digest the watcher-image workflow pushed becomes every real stack's pin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "ci"))
import pin_image  # noqa: E402

DIGEST = "ghcr.io/tuist/tuist-infra-watcher@sha256:" + "b" * 64


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the stack files and the script, so the real files are never rewritten."""
    (tmp_path / "scripts" / "ci").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "ci" / "pin_image.py", tmp_path / "scripts" / "ci")
    for path in REPO.glob("Pulumi.*.yaml"):
        shutil.copy(path, tmp_path)
    return tmp_path


def run(checkout: Path, image: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(checkout / "scripts" / "ci" / "pin_image.py"), image],
        text=True,
        capture_output=True,
        check=False,
    )


def kura(path: Path) -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(path.read_text())["config"]["tuist-infra:kura"]
    return loaded


def test_every_real_stack_pins_the_pushed_digest_and_dev_keeps_its_tag(checkout: Path) -> None:
    before = {p.name: p.read_text() for p in checkout.glob("Pulumi.*.yaml")}
    done = run(checkout, DIGEST)
    assert done.returncode == 0, done.stderr
    for stack in ("staging", "canary", "production"):
        path = checkout / f"Pulumi.{stack}.yaml"
        assert kura(path)["failover_watcher_image"] == DIGEST
        # A line edit: everything else, comments included, is as it was.
        changed = [
            (a, b)
            for a, b in zip(before[path.name].splitlines(), path.read_text().splitlines(), strict=True)
            if a != b
        ]
        assert len(changed) == 1 and "failover_watcher_image" in changed[0][0]
    assert (checkout / "Pulumi.dev.yaml").read_text() == before["Pulumi.dev.yaml"]
    assert "already pins" in run(checkout, DIGEST).stdout


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/tuist/tuist-infra-watcher:sha-0123abc",  # a tag, even a commit tag, can be moved
        "ghcr.io/tuist/other@sha256:" + "b" * 64,
        "ghcr.io/tuist/tuist-infra-watcher@sha256:" + "b" * 63,
    ],
)
def test_anything_but_a_watcher_digest_is_refused_and_nothing_is_written(checkout: Path, image: str) -> None:
    before = {p.name: p.read_text() for p in checkout.glob("Pulumi.*.yaml")}
    done = run(checkout, image)
    assert done.returncode == 1 and "is not ghcr.io/tuist/tuist-infra-watcher@sha256:<64 hex>" in done.stderr
    assert {p.name: p.read_text() for p in checkout.glob("Pulumi.*.yaml")} == before


def test_a_stack_file_with_two_pins_is_refused() -> None:
    text = "  kura:\n    failover_watcher_image: a\n  other:\n    failover_watcher_image: b\n"
    with pytest.raises(pin_image.PinError, match="expected one failover_watcher_image line, found 2"):
        pin_image.pin(text, DIGEST, "Pulumi.x.yaml")
