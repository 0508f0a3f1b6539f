"""`pulumi up`, `stack output`, `preview` (no changes) and `destroy` of the dev stack, for real.

One test walks the whole life of the stack in order, because each step depends
on the state the previous one left; each step's failure message names it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.e2e.conftest import Engine

# vendorsim/inventory.dev.yaml: the three dev-marked boxes per vendor the dev fleets adopt, and the
# decoys (claimed by another stack, staging, production, unmarked) nothing may ever write to.
DEV_BOXES = {
    "ovh": ("ovh-ns1001.ip-203-0-113.net", "ovh-ns1002.ip-203-0-113.net", "ovh-ns1003.ip-203-0-113.net"),
    "dedibox": ("dedibox-200101", "dedibox-200102", "dedibox-200103"),
    "robot": ("robot-2345601", "robot-2345602", "robot-2345603"),
}
DECOYS = (
    *(f"ovh-ns100{n}.ip-203-0-113.net" for n in (4, 5, 6, 7)),
    *(f"dedibox-20010{n}" for n in (4, 5, 6, 7)),
    *(f"robot-234560{n}" for n in (4, 5, 6, 7)),
)
# A write whose path is one of these starts a reinstall of its box.
REINSTALL = re.compile(r"/reinstall$|/install$|/boot/\d+/rescue$")
NEVER = re.compile(r"cancel|terminat|confirmTermination|/order/", re.IGNORECASE)
# The claim encodings the vendor clients write (docs/vendor-behaviour.md section 4): `<base>--c-<token>`
# in a name, a `tuist-claim-<token>` tag; `--r-` / `tuist-releasing-` while the release reinstall runs.
CLAIM_MARK = r"--[cr]-[0-9a-f]{12}\b|tuist-(claim|releasing)-"
RELEASING_MARK = r"--r-[0-9a-f]{12}\b|tuist-releasing-[0-9a-f]{12}\b"


def _marker_fields(state: dict[str, Any]) -> dict[str, str]:
    """Each box's vendor-side marker: OVH displayName, Dedibox tags, Robot server_name."""
    fields = {s["box"]: s["displayName"] for s in state["ovh"]["servers"]}
    fields.update({s["box"]: " ".join(s.get("tags") or []) for s in state["dedibox"]["servers"]})
    fields.update({s["box"]: s["server_name"] for s in state["robot"]["servers"]})
    return fields


def _secret_values(engine: Engine) -> list[str]:
    shown = json.loads(engine.run("config", "-s", "dev", "--show-secrets", "--json").stdout)
    return [str(v["value"]) for v in shown.values() if v.get("secret") and len(str(v["value"])) >= 6]


CONSUMER = """\
import pulumi

estate = pulumi.StackReference("organization/tuist-infra/dev")
pulumi.export("regions", estate.require_output("regions"))
pulumi.export("runner_slots", estate.require_output("capacity").apply(lambda c: c["total"]["runner_slots"]))
"""


def _read_through_stack_reference(engine: Engine) -> dict[str, Any]:
    project = engine.project.parent / "consumer"
    project.mkdir(exist_ok=True)
    (project / "Pulumi.yaml").write_text(
        f"name: estate-consumer\nruntime:\n  name: python\n  options:\n"
        f"    virtualenv: {engine.project / '.venv'}\n"
    )
    (project / "__main__.py").write_text(CONSUMER)
    consumer = Engine(project=project, env=engine.env, vendorsim_url=engine.vendorsim_url)
    consumer.run("stack", "select", "consumer", "--create")
    consumer.run("up", "-s", "consumer", "--yes", "--skip-preview")
    result: dict[str, Any] = json.loads(consumer.run("stack", "output", "-s", "consumer", "--json").stdout)
    consumer.run("stack", "rm", "consumer", "--yes", "--force")
    return result


def test_dev_stack_lifecycle(engine: Engine) -> None:
    engine.run("stack", "select", "dev", "--create")
    secrets = _secret_values(engine)
    assert secrets, "the dev stack should carry encrypted secrets (vendor keys, fleet key, sudo password)"

    before = _marker_fields(engine.admin("state"))  # type: ignore[arg-type]
    # What a pull request shows on a stack with nothing adopted yet: every value downstream of a
    # machine is unknown at this point, and the preview must still go through.
    first_preview = engine.run("preview", "-s", "dev", "--diff")
    # Every slot of every dev fleet (three per vendor) is planned as a machine to create, and
    # nothing in the dev stack exists yet, so nothing is updated, replaced or deleted.
    planned = re.findall(
        r"\+ pulumi-python:dynamic/machine:AdoptedMachine: \(create\)\n\s+\[urn=[^\]]*::([^\]:]+)\]",
        first_preview.stdout,
    )
    slots = [f"{fleet}-{i}" for fleet in ("kura-ovh", "kura-dedibox", "runners-linux") for i in range(3)]
    assert sorted(planned) == sorted(slots), first_preview.stdout
    assert not re.search(r"^\s*[~+-]{1,2} \d+ to (update|replace|delete)", first_preview.stdout, re.M), (
        first_preview.stdout
    )
    up = engine.run("up", "-s", "dev", "--yes")
    outputs = json.loads(engine.run("stack", "output", "-s", "dev", "--json").stdout)
    machines = [m for fleet in outputs["fleets"].values() for m in fleet["machines"]]
    assert len(machines) == 9, machines
    schemes = sorted(m["provider_id"].split("://")[0] for m in machines)
    assert schemes == ["dedibox"] * 3 + ["hrobot"] * 3 + ["ovh"] * 3, schemes
    adopted = {f"{m['vendor']}-{m['box_id'].rsplit('/', 1)[-1]}" for m in machines}
    assert adopted == {box for boxes in DEV_BOXES.values() for box in boxes} - set(), adopted
    assert outputs["outputs_version"] == 1
    assert outputs["environment"] == "dev"
    assert set(outputs["regions"]) == {"eu-central", "ca-east"}
    assert outputs["regions"]["eu-central"]["node_pool"] == "kura-dedibox"
    assert "capacity" in outputs

    # Another team's program reads the outputs through a StackReference on the same backend.
    consumed = _read_through_stack_reference(engine)
    assert consumed["regions"] == outputs["regions"]
    assert consumed["runner_slots"] == outputs["capacity"]["total"]["runner_slots"]

    preview = engine.run("preview", "-s", "dev", "--expect-no-changes", "--diff")
    assert "no changes" in preview.stdout.lower() or "unchanged" in preview.stdout.lower(), preview.stdout

    export = engine.run("stack", "export", "-s", "dev").stdout
    destroy = engine.run("destroy", "-s", "dev", "--yes", "--skip-preview")
    for text, where in ((export, "stack export"), (up.stdout + up.stderr, "up"),
                        (destroy.stdout + destroy.stderr, "destroy")):
        leaked = [s[:3] + "..." for s in secrets if s in text]
        assert not leaked, f"secret values {leaked} appear in the output of `pulumi {where}`"

    remaining = json.loads(engine.run("stack", "export", "-s", "dev").stdout)
    assert not remaining["deployment"].get("resources"), "destroy left resources in state"

    state: dict[str, Any] = engine.admin("state")  # type: ignore[assignment]
    audit: list[dict[str, Any]] = engine.admin("audit")["entries"]  # type: ignore[index]
    after = _marker_fields(state)
    boxes = {b["key"]: b for b in state["boxes"]}
    for vendor, keys in DEV_BOXES.items():
        for key in keys:
            # Back in the pool: the fleet marker as the inventory had it, no claim left, installed.
            assert after[key] == before[key], f"{key}: marker {after[key]!r}, was {before[key]!r}"
            assert not re.search(CLAIM_MARK, after[key]), after[key]
            assert boxes[key]["state"] == "installed", (key, boxes[key]["state"])
            writes = [e for e in audit if e["box"] == key]
            bodies = [json.dumps(e["body"]) for e in writes]
            releasing = [i for i, body in enumerate(bodies) if re.search(RELEASING_MARK, body)]
            assert releasing, f"{key}: no release marking among {[(e['method'], e['path']) for e in writes]}"
            reinstalls = [
                i for i, e in enumerate(writes) if REINSTALL.search(e["path"]) and e["status"] < 300
            ]
            assert any(i > releasing[0] for i in reinstalls), f"{vendor} {key}: no reinstall after release"
    touched = sorted({e["box"] for e in audit if e["box"] in DECOYS})
    assert not touched, f"writes to decoy boxes: {touched}"
    never = [(e["method"], e["path"]) for e in audit if NEVER.search(e["path"])]
    assert not never, f"cancel/terminate routes called: {never}"
