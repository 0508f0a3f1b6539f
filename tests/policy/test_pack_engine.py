"""The policy pack run by the real engine: `pulumi preview --policy-pack policy`.

- The dev stack, through the whole program, passes every mandatory policy; an advisory one fires
  when the baseline says the stack holds more machines than the program now wants.
- A copy of the dev config previewed as a stack other than dev (so its floating tags count) fails
  with images-pinned's message. (The config no longer lets a program stack carry the other breaks a
  config could once express, a load_balancer gateway and autoscaling left to the CRD defaults:
  tests/config/bad/23, 125, 126.)
- A fixture program registering resources with the program's own type tokens breaks the rest.
- The engine itself refuses to replace a protected machine, which is what the protection policy
  relies on for "never deleted by a replace".

Policy results are read from the engine's event stream (`--json` with streaming events), not from
the text rendering. The project is copied to a temporary folder; nothing here needs vendorsim, since
a preview calls no vendor.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.project import copy_project
from policy.tuist_policy.mandatory import MANDATORY
from tests.e2e.conftest import DEV_PASSPHRASE, render_only_text
from tests.support.pulumi_home import cli_env

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PULUMI = REPO / ".toolchain" / "bin" / "pulumi"


@dataclass
class Preview:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    violations: list[dict[str, Any]] = field(default_factory=list)

    def of(self, policy: str) -> list[dict[str, Any]]:
        return [v for v in self.violations if v["policyName"] == policy]

    def diagnostics(self) -> str:
        return "\n".join(e["diagnosticEvent"]["message"] for e in self.events if "diagnosticEvent" in e)


def engine_env(root: Path) -> dict[str, str]:
    if not PULUMI.exists():
        pytest.fail("the Pulumi CLI is not built: run `bash scripts/bootstrap.sh` (scripts/test.sh does)")
    return cli_env(root, passphrase=DEV_PASSPHRASE, PULUMI_ENABLE_STREAMING_JSON_PREVIEW="true")


def pulumi(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PULUMI), *args, "--non-interactive"],
        cwd=project,
        env=env,
        text=True,
        capture_output=True,
        timeout=900,
        check=False,
    )


def preview(project: Path, env: dict[str, str], stack: str, *extra: str) -> Preview:
    pulumi(project, env, "stack", "select", stack, "--create")
    done = pulumi(
        project, env, "preview", "--stack", stack, "--json", "--policy-pack", str(project / "policy"), *extra
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = Preview(done.returncode, events, done.stderr)
    result.violations = [e["policyEvent"] for e in events if "policyEvent" in e]
    return result


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("policy-engine")
    copy = root / "project"
    copy_project(REPO, copy)
    (copy / ".venv").symlink_to(REPO / ".venv")
    # A preview of the dev stack's objects needs no cluster: its rendering mode (a policy pack sees
    # the same resources).
    stack_file = copy / "Pulumi.dev.yaml"
    stack_file.write_text(render_only_text(stack_file.read_text()))
    return copy


def _summaries(result: Preview) -> set[str]:
    """Every policy the analyzer reports as having run and passed on some resource or the stack."""
    passed: set[str] = set()
    for event in result.events:
        for key in ("policyAnalyzeSummaryEvent", "policyAnalyzeStackSummaryEvent"):
            if key in event:
                passed.update(event[key].get("passed") or [])
    return passed


def test_the_dev_stack_passes_and_a_shrinking_fleet_is_flagged_as_advice(
    project: Path, tmp_path: Path
) -> None:
    env = engine_env(project.parent)
    # What the stack would hold if kura-ovh had a fourth machine deployed: the program wants three.
    deployed = {"kura-ovh": [f"kura-ovh-{i}" for i in range(4)]}
    config = tmp_path / "policy-config.json"
    config.write_text(json.dumps({"fleet-shrinking": {"deployed_machines": deployed}}))
    result = preview(project, env, "dev", "--policy-pack-config", str(config))
    assert result.returncode == 0, result.diagnostics()[-4000:] + result.stderr[-2000:]
    assert [(v["policyName"], v["enforcementLevel"]) for v in result.violations] == [
        ("fleet-shrinking", "advisory")
    ]
    assert (
        "fleet kura-ovh shrinks from 4 to 3 machine(s): kura-ovh-3 will be released"
        in result.violations[0]["message"]
    )
    # Each mandatory policy ran over the dev stack's resources and passed.
    assert {p.name for p in MANDATORY} <= _summaries(result)


def _dev_config_as(project: Path, stack: str) -> None:
    stack_file = yaml.safe_load((project / "Pulumi.dev.yaml").read_text())
    # (A demux off the public peer port is config's to refuse now, kura.peer_port: tests/config/bad/117;
    # so are a load_balancer gateway, tests/config/bad/23, and autoscaling fields left to the CRD
    # defaults, tests/config/bad/125. The pack still fires on each in the breaks fixture.)
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(stack_file, sort_keys=False))


def test_the_dev_config_outside_dev_fails_on_its_floating_tags(project: Path) -> None:
    # Not the dev stack: the dev config's floating tags (latest, main) are violations anywhere else.
    _dev_config_as(project, "ci")
    result = preview(project, engine_env(project.parent), "ci")
    assert result.returncode != 0
    expected = {
        "images-pinned": (
            "Deployment kura-controller: container 'manager' env KURA_RUNTIME_IMAGE "
            "'ghcr.io/tuist/kura:latest' uses the floating tag 'latest'"
        ),
    }
    for policy, message in expected.items():
        found = result.of(policy)
        assert any(message in v["message"] for v in found), (policy, [v["message"] for v in found])
        assert all(v["enforcementLevel"] == "mandatory" for v in found)
    # Nothing else fired: each break has its own policy.
    assert {v["policyName"] for v in result.violations} == set(expected)


def _fixture(name: str, root: Path) -> Path:
    copy = root / name
    shutil.copytree(FIXTURES / name, copy)
    text = (copy / "Pulumi.yaml").read_text().replace("../../../../.venv", str(REPO / ".venv"))
    (copy / "Pulumi.yaml").write_text(text)
    shutil.copytree(REPO / "policy", copy / "policy", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "policy" / "PulumiPolicy.yaml").write_text(
        (REPO / "policy" / "PulumiPolicy.yaml").read_text().replace("../.venv", str(REPO / ".venv"))
    )
    return copy


def test_fixture_resources_break_the_other_policies_each_with_its_message(tmp_path: Path) -> None:
    program = _fixture("breaks", tmp_path)
    result = preview(program, engine_env(tmp_path), "production")
    assert result.returncode != 0
    by_resource: dict[tuple[str, str], str] = {}
    for v in result.violations:
        key = (v["policyName"], v["resourceUrn"].rsplit("::", 1)[-1])
        by_resource[key] = by_resource.get(key, "") + v["message"]
    protected = "production-machines-protected"
    assert (
        "kura-dedibox-1 (fleet kura-dedibox) is a production machine without protect=True"
        in by_resource[(protected, "kura-dedibox-1")]
    )
    assert (protected, "kura-dedibox-2") in by_resource  # the MachineClaim kind too
    assert (protected, "kura-dedibox-0") not in by_resource  # protected, as the program registers them
    failover = [m for (p, _), m in by_resource.items() if p == "failover-ip-routable-vendor"]
    assert any("is on scaleway_em, which cannot route a failover IP" in m for m in failover), failover
    assert any("is a ovh IP but fleet kura-dedibox's machines are on dedibox" in m for m in failover), (
        failover
    )
    kata = [m for (p, _), m in by_resource.items() if p == "kata-runner-pools"]
    assert any("RunnerPool linux: a Linux pool with runtimeClass 'runc'" in m for m in kata), kata
    demux = by_resource[("peer-demux-sni-passthrough-7443", "demux-terminating-tls")]
    assert "the demux terminates TLS (ssl_certificate, ssl_certificate_key, listen ... ssl)" in demux
    gateway = "bare-metal-gateway-no-proxy-protocol"
    assert (
        "ConfigMap kura-gateway-eu-central: use-proxy-protocol is 'true'"
        in by_resource[(gateway, "gateway-proxy-protocol")]
    )
    off_the_box = by_resource[(gateway, "gateway-off-the-box")]
    assert "Deployment kura-gateway-eu-central: the ingress-nginx gateway is not hostNetwork" in off_the_box
    assert "publishes a Service address (--publish-service)" in off_the_box
    assert (
        "Service kura-gateway-eu-central in region eu-central is type LoadBalancer"
        in by_resource[("no-load-balancer-on-bare-metal", "gateway-load-balancer")]
    )
    assert (
        "RunnerPool macos: spec.autoscaling leaves minWarmPoolFloor, scaleDownCooldownSeconds to the CRD "
        "default" in by_resource[("runner-pool-autoscaling-explicit", "partial-autoscaling-runner-pool")]
    )
    assert {p for p, _ in by_resource} == {
        protected,
        "failover-ip-routable-vendor",
        "kata-runner-pools",
        "peer-demux-sni-passthrough-7443",
        gateway,
        "no-load-balancer-on-bare-metal",
        "runner-pool-autoscaling-explicit",
    }


def test_the_engine_refuses_to_replace_a_protected_machine(tmp_path: Path) -> None:
    program = _fixture("protected", tmp_path)
    env = engine_env(tmp_path)
    assert pulumi(program, env, "stack", "select", "production", "--create").returncode == 0
    pulumi(program, env, "config", "set", "marker", "tuist-kura-production")
    up = pulumi(program, env, "up", "--yes", "--skip-preview", "--policy-pack", str(program / "policy"))
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    pulumi(program, env, "config", "set", "marker", "tuist-kura-production-moved")
    replace = pulumi(program, env, "preview", "--diff")
    assert replace.returncode != 0
    assert "unable to replace resource" in replace.stdout + replace.stderr, replace.stdout[-3000:]
    assert "marked for protection" in replace.stdout + replace.stderr
