"""The dev stack's whole life through the real engine on a real control plane (issue 10 point 7).

`pulumi up -s dev` adopts eleven boxes from vendorsim: three per OVH, Dedibox and Robot fleet, one
Elastic Metal box (on its Private Network as pn0) and one Mac mini (bootstrapped the macOS way; its
simulated launchd runs no agent, so it registers no Node: docs/machines.md). Each Linux box's own
kubelet TLS-bootstraps and registers its Node; every object is applied and awaited by the Kubernetes
provider (no skipAwait).
Then, one step per test, on the one deployed stack of the module (its fixture): every Node
is Ready with its providerID, every workload is Ready and every Service has its endpoints, the
outputs are read through a StackReference and a second preview changes nothing, a region's failover
IP leaves a box whose demux pod goes unready (the failover watcher run as its pod runs), and destroy
drains and deletes every Node and returns every box to its pool. Each step's failure names it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from tests.e2e.conftest import Engine
from tests.support.cluster import KubeCluster, unready_marker, wait_until

# vendorsim/inventory.dev.yaml: the three dev-marked boxes per vendor the dev fleets adopt, and the
# decoys (claimed by another stack, staging, production, unmarked) nothing may ever write to.
EM = "em-e1000000-0000-4000-8000-00000000000{}"
MAC = "mac-a5000000-0000-4000-8000-00000000000{}"
DEV_BOXES = {
    "ovh": ("ovh-ns1001.ip-203-0-113.net", "ovh-ns1002.ip-203-0-113.net", "ovh-ns1003.ip-203-0-113.net"),
    "dedibox": ("dedibox-200101", "dedibox-200102", "dedibox-200103"),
    "robot": ("robot-2345601", "robot-2345602", "robot-2345603"),
    "scaleway_em": (EM.format(1),),
    "applesilicon": (MAC.format(1),),
}
DECOYS = (
    *(f"ovh-ns100{n}.ip-203-0-113.net" for n in (4, 5, 6, 7)),
    *(f"dedibox-20010{n}" for n in (4, 5, 6, 7)),
    *(f"robot-234560{n}" for n in (4, 5, 6, 7)),
    *(EM.format(n) for n in (4, 5, 6, 7)),
    *(MAC.format(n) for n in (4, 5, 6, 7)),
)
# What each box's /proc shows the kubelet (the dev inventory's offers): threads, memory.
# The kernel's MemTotal of each offer's DIMMs (32, 16, 64, 64 GiB): less a 64th and 512 MiB (the
# apiserver writes 31744Mi as 31Gi).
HARDWARE = {
    "ovh": ("12", "31Gi"),
    "dedibox": ("8", "15616Mi"),
    "robot": ("16", "64000Mi"),
    "scaleway_em": ("12", "64000Mi"),
}
# vendorsim's box key prefix per vendor (vendorsim/scaleway_em.py, applesilicon.py).
BOX_PREFIX = {"scaleway_em": "em", "applesilicon": "mac"}
# The private Elastic Metal region: served on a node port, to its client networks only.
PRIVATE_REGION = "scw-fr-par-runners"
# A write whose path is one of these starts a reinstall of its box.
REINSTALL = re.compile(r"/reinstall$|/install$|/boot/\d+/rescue$")
NEVER = re.compile(r"cancel|terminat|confirmTermination|/order/", re.IGNORECASE)
# The claim encodings the vendor clients write (docs/vendor-behaviour.md section 4): `<base>--c-<token>`
# in a name, a `tuist-claim-<token>` tag; `--r-` / `tuist-releasing-` while the release reinstall runs.
CLAIM_MARK = r"--[cr]-[0-9a-f]{12}\b|tuist-(claim|releasing)-"
RELEASING_MARK = r"--r-[0-9a-f]{12}\b|tuist-releasing-[0-9a-f]{12}\b"
KURA = "kura"
FAILOVER = "kura-failover"  # the failover watchers and their vendor credentials
# The first test also pays for the fixture: a control plane, nine adoptions (three Robot installs)
# and every workload awaited on a busy 2-core machine.
pytestmark = pytest.mark.timeout(1800)


def _marker_fields(state: dict[str, Any]) -> dict[str, str]:
    """Each box's vendor-side marker: OVH displayName, Dedibox tags, Robot server_name."""
    fields = {s["box"]: s["displayName"] for s in state["ovh"]["servers"]}
    fields.update({s["box"]: " ".join(s.get("tags") or []) for s in state["dedibox"]["servers"]})
    fields.update({s["box"]: s["server_name"] for s in state["robot"]["servers"]})
    fields.update({s["box"]: " ".join(s.get("tags") or []) for s in state["scaleway_em"]["servers"]})
    fields.update({s["box"]: s["name"] for s in state["applesilicon"]["servers"]})
    return fields


def _secret_values(engine: Engine) -> list[str]:
    shown = json.loads(engine.run("config", "-s", "dev", "--show-secrets", "--json").stdout)
    return [str(v["value"]) for v in shown.values() if v.get("secret") and len(str(v["value"])) >= 6]


def box_key(machine: dict[str, Any]) -> str:
    """vendorsim's key of a machine's box (its disk is <state>/boxes/<key>)."""
    prefix = BOX_PREFIX.get(machine["vendor"], machine["vendor"])
    return f"{prefix}-{machine['box_id'].rsplit('/', 1)[-1]}"


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


@dataclass
class Deployed:
    engine: Engine
    cluster: KubeCluster
    secrets: list[str]
    before: dict[str, str]  # each box's vendor marker before the first up
    first_preview: str
    up: str
    outputs: dict[str, Any]

    @property
    def machines(self) -> list[dict[str, Any]]:
        return [m for fleet in self.outputs["fleets"].values() for m in fleet["machines"]]


def resources(engine: Engine) -> list[dict[str, Any]]:
    exported = json.loads(engine.run("stack", "export", "-s", "dev").stdout)
    return list(exported["deployment"].get("resources") or [])


@pytest.fixture(scope="module")
def deployed(engine: Engine, dev_cluster: KubeCluster) -> Iterator[Deployed]:
    engine.run("stack", "select", "dev", "--create")
    secrets = _secret_values(engine)
    assert secrets, "the dev stack should carry encrypted secrets (vendor keys, fleet key, kubeconfig)"
    before = _marker_fields(engine.admin("state"))  # type: ignore[arg-type]
    # What a pull request shows on a stack with nothing adopted yet: every value downstream of a
    # machine is unknown at this point, and the preview must still go through.
    first_preview = engine.run("preview", "-s", "dev", "--diff").stdout
    # The preview is the one above; the update need not run the program a second time to preview it.
    up = engine.run("up", "-s", "dev", "--yes", "--skip-preview")
    outputs = json.loads(engine.run("stack", "output", "-s", "dev", "--json").stdout)
    try:
        yield Deployed(engine, dev_cluster, secrets, before, first_preview, up.stdout + up.stderr, outputs)
    finally:
        if resources(engine):  # a step failed before the destroy test: release the boxes anyway
            engine.run("destroy", "-s", "dev", "--yes", "--skip-preview", check=False)


def test_the_first_preview_plans_every_slot_and_the_up_makes_them(deployed: Deployed) -> None:
    # Every slot of every dev fleet (three per vendor) is planned as a machine to create, and nothing
    # in the dev stack exists yet, so nothing is updated, replaced or deleted.
    planned = re.findall(
        r"\+ pulumi-python:dynamic/machine:AdoptedMachine: \(create\)\n\s+\[urn=[^\]]*::([^\]:]+)\]",
        deployed.first_preview,
    )
    slots = [f"{fleet}-{i}" for fleet in ("kura-ovh", "kura-dedibox", "runners-linux") for i in range(3)]
    slots += ["kura-scw-0", "runners-macos-0"]
    assert sorted(planned) == sorted(slots), deployed.first_preview
    assert not re.search(r"^\s*[~+-]{1,2} \d+ to (update|replace|delete)", deployed.first_preview, re.M)
    outputs = deployed.outputs
    assert len(deployed.machines) == 11, deployed.machines
    adopted = {box_key(m) for m in deployed.machines}
    assert adopted == {box for boxes in DEV_BOXES.values() for box in boxes}, adopted
    assert (outputs["outputs_version"], outputs["environment"]) == (1, "dev")
    assert set(outputs["regions"]) == {"eu-central", "ca-east", PRIVATE_REGION}
    assert outputs["regions"]["eu-central"]["node_pool"] == "kura-dedibox"
    private = outputs["regions"][PRIVATE_REGION]
    assert (private["node_pool"], private["gateway_mode"], private["private"], private["node_ports"]) == (
        "kura-scw-fr-par",
        "node_port",
        True,
        {"http": 30080, "https": 30443},
    )
    assert outputs["regions"]["eu-central"]["node_ports"] is None
    assert PRIVATE_REGION not in outputs["available_regions"]
    # The Mac fleet's own sizing: one M2-L holds one macOS VM of the standard macOS runner.
    capacity = outputs["capacity"]
    assert capacity["fleets"]["runners-macos"]["os"] == "darwin"
    assert capacity["runner_pools"]["macos"]["pods_per_host"] == 1
    assert capacity["total"]["runner_slots_by_os"] == {"linux": 45, "darwin": 1}
    (em,) = outputs["fleets"]["kura-scw"]["machines"]
    (mac,) = outputs["fleets"]["runners-macos"]["machines"]
    assert em["provider_id"] == "scaleway://" + em["box_id"]
    assert mac["provider_id"] == "applesilicon://" + mac["box_id"]


def test_every_machine_is_a_ready_node_of_its_box(deployed: Deployed) -> None:
    core = deployed.cluster.core
    nodes = {n.metadata.name: n for n in core.list_node().items}
    for machine in deployed.machines:
        if machine["vendor"] == "applesilicon":
            # The simulated Mac's launchd keeps the agent's job without running it: no Node, as the
            # dev stack says (node_agent.registers_node: false). The bootstrap itself is on its disk.
            assert machine["node_name"] not in nodes, machine["name"]
            assert deployed.engine.sim_state is not None
            disk = deployed.engine.sim_state / "boxes" / box_key(machine) / "system" / "root"
            assert (disk / "Library/LaunchDaemons/dev.tuist.node-agent.plist").exists()
            assert (disk / "var/lib/sim/pf/anchors/com.apple%tuist.sshguard.rules").exists()
            continue
        node = nodes.get(machine["node_name"])
        assert node is not None, f"{machine['name']}: no Node {machine['node_name']}"
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", (machine["name"], node.status.conditions)
        assert node.spec.provider_id == machine["provider_id"], machine["name"]
        assert ("InternalIP", machine["public_ipv4"]) in [(a.type, a.address) for a in node.status.addresses]
        assert (node.status.capacity["cpu"], node.status.capacity["memory"]) == HARDWARE[machine["vendor"]]
        fleet = machine["name"].rsplit("-", 1)[0]
        assert node.metadata.labels["tuist.dev/fleet"] == fleet
    # Besides the boxes, only the control plane's cloud workers (where the controllers run).
    assert sorted(set(nodes) - {m["node_name"] for m in deployed.machines}) == [
        "cloud-worker-1",
        "cloud-worker-2",
    ]
    # Each box's claim and progress are a MachineClaim object of the cluster, held by its slot.
    claims = k8s.CustomObjectsApi(deployed.cluster.api).list_cluster_custom_object(
        "infra.tuist.dev", "v1alpha1", "machineclaims"
    )["items"]
    held = {(c["spec"]["vendor"], c["spec"]["boxId"]): c for c in claims}
    for machine in deployed.machines:
        claim = held.pop((machine["vendor"], machine["box_id"]))
        assert claim["spec"]["holder"]["resource"] == machine["name"]
        assert claim["spec"]["holder"]["stack"] == "dev"
        assert (claim["status"]["phase"], claim["status"]["state"]) == ("Ready", "READY")
    assert not held, f"claims of boxes no machine holds: {sorted(held)}"


def test_every_workload_is_ready_and_every_gateway_service_has_its_boxes(deployed: Deployed) -> None:
    apps = k8s.AppsV1Api(deployed.cluster.api)
    deployments = [
        d
        for ns in (KURA, FAILOVER, "kura-dns", "tuist-runners")
        for d in apps.list_namespaced_deployment(ns).items
    ]
    assert len(deployments) >= 8, [d.metadata.name for d in deployments]
    for d in deployments:
        assert d.spec.replicas and d.status.ready_replicas == d.spec.replicas, d.metadata.name
        assert d.status.updated_replicas == d.spec.replicas, d.metadata.name
    daemon_sets = apps.list_namespaced_daemon_set(KURA).items
    assert sorted(ds.metadata.name for ds in daemon_sets) == [
        "kura-peer-demux-ca-east",
        "kura-peer-demux-eu-central",
        f"kura-peer-demux-{PRIVATE_REGION}",
        # eu-central scrubs its released volumes (Pulumi.dev.yaml): a scrubber on each of its boxes.
        "kura-released-volumes-eu-central",
    ]
    for ds in daemon_sets:
        boxes = 1 if ds.metadata.name.endswith(PRIVATE_REGION) else 3
        assert ds.status.desired_number_scheduled == boxes == ds.status.number_ready, ds.metadata.name
    # The host-network gateways answer on their boxes' addresses: the Service's endpoints are exactly
    # the region's boxes (the apiserver takes them: they are not loopback addresses).
    discovery = k8s.DiscoveryV1Api(deployed.cluster.api)
    for region in deployed.outputs["regions"].values():
        if region["private"]:
            # A node_port gateway: a NodePort Service whose endpoint is its pod, and a NetworkPolicy
            # admitting the runners' Private Network only.
            service = deployed.cluster.core.read_namespaced_service(f"kura-gateway-{region['id']}", KURA)
            assert service.spec.type == "NodePort"
            # The ports the stack outputs say, pinned: the API server took them as asked.
            assert {p.name: p.node_port for p in service.spec.ports} == region["node_ports"]
            policy = k8s.NetworkingV1Api(deployed.cluster.api).read_namespaced_network_policy(
                f"kura-gateway-{region['id']}-clients", KURA
            )
            assert [b.ip_block.cidr for r in policy.spec.ingress for b in r._from] == ["172.16.0.0/22"]
            continue
        fleet = region["node_pool"]
        boxes = {m["public_ipv4"] for m in deployed.outputs["fleets"][fleet]["machines"]}
        slices = discovery.list_namespaced_endpoint_slice(
            KURA, label_selector=f"kubernetes.io/service-name=kura-gateway-{region['id']}"
        ).items
        ready = {a for s in slices for e in s.endpoints or [] if e.conditions.ready for a in e.addresses}
        assert ready == boxes, (region["id"], ready, boxes)


def test_pods_on_a_box_resolve_through_the_cluster_dns(deployed: Deployed) -> None:
    # The demux (host network, ClusterFirstWithHostNet) gets the stack's clusterDNS and domain from
    # its box's kubelet, which the self-join configured.
    core = deployed.cluster.core
    machine = next(m for m in deployed.machines if m["vendor"] == "ovh")
    (pod,) = [
        p
        for p in core.list_namespaced_pod(KURA, field_selector=f"spec.nodeName={machine['node_name']}").items
        if p.metadata.name.startswith("kura-peer-demux-ca-east-")
    ]
    assert deployed.engine.sim_state is not None
    disk = deployed.engine.sim_state / "boxes" / box_key(machine) / "system" / "root"
    resolv = (disk / "var/lib/kubelet/pods" / pod.metadata.uid / "resolv.conf").read_text().splitlines()
    assert resolv[:2] == [
        "nameserver 10.96.0.10",
        f"search {KURA}.svc.cluster.local svc.cluster.local cluster.local",
    ]


def test_the_outputs_are_read_through_a_stack_reference_and_a_second_preview_changes_nothing(
    deployed: Deployed,
) -> None:
    consumed = _read_through_stack_reference(deployed.engine)
    # A StackReference hands a consumer the outputs without their null values (the private region's
    # failover_ip and failover_routed_to): a consumer reads them with .get().
    assert consumed["regions"] == {
        rid: {k: v for k, v in region.items() if v is not None}
        for rid, region in deployed.outputs["regions"].items()
    }
    assert consumed["runner_slots"] == deployed.outputs["capacity"]["total"]["runner_slots"]
    preview = deployed.engine.run("preview", "-s", "dev", "--expect-no-changes", "--diff")
    assert re.search(r"^\s+\d+ unchanged$", preview.stdout, re.M), preview.stdout[-3000:]


def test_a_new_ca_bundle_for_the_same_cluster_replaces_nothing(deployed: Deployed) -> None:
    # A CA rotation hands the stack a kubeconfig whose bundle holds the old CA and the new one (here the
    # same CA twice). Without the provider's clusterIdentifier, the real provider takes that for a new
    # cluster and plans every Kubernetes object of the stack replaced, the Kura namespace included.
    engine = deployed.engine
    original = engine.run("config", "get", "-s", "dev", "tuist-infra:kubeconfig").stdout[:-1]
    kubeconfig = yaml.safe_load(original)
    cluster = kubeconfig["clusters"][0]["cluster"]
    pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
    cluster["certificate-authority-data"] = base64.b64encode((pem + pem).encode()).decode()
    engine.run("config", "set", "-s", "dev", "--secret", "tuist-infra:kubeconfig", yaml.safe_dump(kubeconfig))
    try:
        preview = engine.run("preview", "-s", "dev", "--diff").stdout
    finally:
        engine.run("config", "set", "-s", "dev", "--secret", "tuist-infra:kubeconfig", original)
    assert "to replace" not in preview, preview[-3000:]
    assert re.search(r"^\s+~ 1 to update$", preview, re.M), preview[-3000:]
    assert re.search(r"~ pulumi:providers:kubernetes: \(update\)", preview), preview[-3000:]
    assert engine.run("config", "get", "-s", "dev", "tuist-infra:kubeconfig").stdout[:-1] == original


def start_watcher_as_its_pod(deployed: Deployed, region: str, workdir: Path) -> subprocess.Popen[bytes]:
    """`python -m watcher` with what its pod gets: the Deployment's environment, the credentials
    Secret it mounts (as files), a token of its ServiceAccount and the cluster CA where in-cluster
    config reads them, the heartbeat in a folder of its own. Only the poll interval is shortened (2 s
    instead of 30)."""
    cluster, core = deployed.cluster, deployed.cluster.core
    deployment = k8s.AppsV1Api(cluster.api).read_namespaced_deployment(
        f"kura-failover-watcher-{region}", FAILOVER
    )
    pod = deployment.spec.template.spec
    (container,) = pod.containers
    env = {e.name: e.value for e in container.env if e.value is not None}
    (volume,) = [v for v in pod.volumes or [] if v.secret]
    secret = core.read_namespaced_secret(volume.secret.secret_name, FAILOVER)
    credentials = workdir / "credentials"
    credentials.mkdir(parents=True)
    for key, value in (secret.data or {}).items():
        (credentials / key).write_bytes(base64.b64decode(value))
    account = workdir / "serviceaccount"
    account.mkdir()
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = core.create_namespaced_service_account_token(
        pod.service_account_name, FAILOVER, request
    ).status.token
    (account / "token").write_text(token)
    (account / "ca.crt").write_text(cluster.ca_pem)
    host, port = cluster.api_server.removeprefix("https://").rsplit(":", 1)
    env.update(
        FAILOVER_CREDENTIALS_DIR=str(credentials),
        HEARTBEAT_FILE=str(workdir / "heartbeat"),  # the pod's emptyDir
        POLL_SECONDS="2",
        POD_NAME=f"kura-failover-watcher-{region}-e2e",  # the downward API's metadata.name
        KUBERNETES_SERVICE_HOST=host,
        KUBERNETES_SERVICE_PORT=port,
    )
    launcher = (
        "import runpy\n"
        "import kubernetes.config.incluster_config as incluster\n"
        f"incluster.SERVICE_TOKEN_FILENAME = {str(account / 'token')!r}\n"
        f"incluster.SERVICE_CERT_FILENAME = {str(account / 'ca.crt')!r}\n"
        "runpy.run_module('watcher', run_name='__main__')\n"
    )
    log = (workdir / "watcher.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-c", launcher],
        cwd=deployed.engine.project,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(deployed.engine.project), **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def on_box(deployed: Deployed, machine: dict[str, Any], command: str) -> None:
    """`command` on the machine's box over SSH, as an operator runs it: the fleet key, the fleet's
    login and port, the box's host key as vendorsim reports it."""
    from providers.ssh.runner import SshTarget, run_script

    config = json.loads(deployed.engine.run("config", "-s", "dev", "--show-secrets", "--json").stdout)
    fleet = next(
        f
        for f in config["tuist-infra:fleets"]["objectValue"]
        if f["name"] == machine["name"].rsplit("-", 1)[0]
    )
    state: dict[str, Any] = deployed.engine.admin("state")  # type: ignore[assignment]
    box = next(b for b in state["boxes"] if b["key"] == box_key(machine))
    run_script(
        SshTarget(machine["public_ipv4"], int(fleet["ssh_port"]), fleet["ssh_user"]),
        f"set -euo pipefail\n{command}\n",
        private_key=config["tuist-infra:fleetSshPrivateKey"]["value"],
        env_secrets={},
        expected_host_key=box["host_key_fingerprint"],
        retries=1,
        step="on the box",
    )


def test_the_failover_ip_leaves_a_box_whose_demux_pod_goes_unready(
    deployed: Deployed, tmp_path: Path
) -> None:
    region = deployed.outputs["regions"]["ca-east"]
    ip = region["failover_ip"]
    routed = region["failover_routed_to"]
    machine = next(m for m in deployed.machines if m["vendor"] == "ovh" and m["box_id"] == routed)
    core = deployed.cluster.core
    (pod,) = [
        p
        for p in core.list_namespaced_pod(KURA, field_selector=f"spec.nodeName={machine['node_name']}").items
        if p.metadata.name.startswith("kura-peer-demux-ca-east-")
    ]

    def route() -> str | None:
        state: dict[str, Any] = deployed.engine.admin("state")  # type: ignore[assignment]
        (fip,) = [f for f in state["ovh"]["ips"] if f["ip"] == f"{ip}/32"]
        return str(fip["routedTo"]) if fip["routedTo"] else None

    assert route() == routed
    watcher = start_watcher_as_its_pod(deployed, "ca-east", tmp_path)
    marker = unready_marker(Path("/var/lib/kubelet"), pod.metadata.uid, pod.spec.containers[0].name)
    try:
        time.sleep(6)  # a few polls on a healthy region: the watcher keeps the route
        assert watcher.poll() is None, (tmp_path / "watcher.log").read_text()
        assert route() == routed
        # The box's demux fails its readiness probe: an operator's touch of the stand-in's probe
        # file, over SSH on the box (its kubelet sees the box's own filesystem).
        on_box(deployed, machine, f"sudo mkdir -p {marker.parent} && sudo touch {marker}")
        moved = wait_until(
            f"the failover IP {ip} to leave {routed}", lambda: (r := route()) != routed and r, timeout=120
        )
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
        on_box(deployed, machine, f"sudo rm -f {marker}")
    log = (tmp_path / "watcher.log").read_text()
    # It moved holding the region's Lease (through its ServiceAccount's rights) and gave it up on
    # SIGTERM, so the next watcher of a rollout need not wait for it to lapse.
    held = "lease kura-failover/kura-failover-watcher-ca-east: held by kura-failover-watcher-ca-east-e2e"
    assert held in log, log[-3000:]
    lease = k8s.CoordinationV1Api(deployed.cluster.api).read_namespaced_lease(
        "kura-failover-watcher-ca-east", FAILOVER
    )
    assert lease.spec.holder_identity is None, log[-3000:]
    others = sorted(m["box_id"] for m in deployed.machines if m["vendor"] == "ovh" and m["box_id"] != routed)
    assert moved == others[0], log[-3000:]  # the lowest eligible box
    assert f"failover {ip}: moved to {moved}" in log, log[-3000:]
    wait_until(
        f"{pod.metadata.name} Ready again",
        lambda: all(
            c.status == "True"
            for c in core.read_namespaced_pod(pod.metadata.name, KURA).status.conditions
            if c.type == "Ready"
        ),
        timeout=60,
    )


def test_a_volume_kura_controller_flipped_to_delete_takes_the_next_up_that_changes_it(
    deployed: Deployed,
) -> None:
    # kura-controller patches a volume's reclaim policy to Delete before it deletes its claim, and owns
    # the field from then on. The next up that touches the volume (here the region switching to scrub,
    # which rewrites every volume's on-release annotation) must apply around it, not conflict with it.
    core, engine = deployed.cluster.core, deployed.engine
    volumes = core.list_persistent_volume(label_selector="tuist.dev/region=ca-east").items
    assert volumes and all(v.metadata.annotations["tuist.dev/on-release"] == "keep" for v in volumes)
    flipped = volumes[0].metadata.name
    core.patch_persistent_volume(
        flipped, {"spec": {"persistentVolumeReclaimPolicy": "Delete"}}, field_manager="kura-controller"
    )
    config = json.loads(engine.run("config", "-s", "dev", "--json").stdout)
    index = [r["id"] for r in config["tuist-infra:regions"]["objectValue"]].index("ca-east")
    engine.run(
        "config", "set", "-s", "dev", "--path", f"tuist-infra:regions[{index}].released_volumes", "scrub"
    )
    engine.run("up", "-s", "dev", "--yes", "--skip-preview")
    after = {
        v.metadata.name: v
        for v in core.list_persistent_volume(label_selector="tuist.dev/region=ca-east").items
    }
    assert {name: v.metadata.annotations["tuist.dev/on-release"] for name, v in after.items()} == {
        v.metadata.name: "scrub" for v in volumes
    }
    assert after[flipped].spec.persistent_volume_reclaim_policy == "Delete"
    assert {v.spec.persistent_volume_reclaim_policy for name, v in after.items() if name != flipped} == {
        "Retain"
    }


def test_destroy_drains_and_deletes_every_node_and_returns_every_box(deployed: Deployed) -> None:
    engine = deployed.engine
    export = engine.run("stack", "export", "-s", "dev").stdout
    destroy = engine.run("destroy", "-s", "dev", "--yes", "--skip-preview")
    for text, where in (
        (export, "stack export"),
        (deployed.first_preview, "preview"),
        (deployed.up, "up"),
        (destroy.stdout + destroy.stderr, "destroy"),
    ):
        leaked = [s[:3] + "..." for s in deployed.secrets if s in text]
        assert not leaked, f"secret values {leaked} appear in the output of `pulumi {where}`"
    assert not resources(engine), "destroy left resources in state"

    # No Node of any box is left (the cloud workers are the control plane's own), no claim either.
    nodes = sorted(n.metadata.name for n in deployed.cluster.core.list_node().items)
    assert nodes == ["cloud-worker-1", "cloud-worker-2"], nodes
    claims = (
        k8s.CustomObjectsApi(deployed.cluster.api).list_cluster_custom_object(
            "infra.tuist.dev", "v1alpha1", "machineclaims"
        )["items"]
        if _crd_exists(deployed.cluster)
        else []
    )
    assert claims == []

    state: dict[str, Any] = engine.admin("state")  # type: ignore[assignment]
    audit: list[dict[str, Any]] = engine.admin("audit")["entries"]  # type: ignore[index]
    after = _marker_fields(state)
    boxes = {b["key"]: b for b in state["boxes"]}
    for vendor, keys in DEV_BOXES.items():
        for key in keys:
            # Back in the pool: the fleet marker as the inventory had it, no claim left, installed.
            assert after[key] == deployed.before[key], (
                f"{key}: marker {after[key]!r}, was {deployed.before[key]!r}"
            )
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
    # Elastic Metal and Macs are released by reinstall, never deleted (a Mac's 24 hours or not).
    # (The release detaches an Elastic Metal box from its Private Network: a DELETE below the server.)
    deleted = [
        e["path"] for e in audit if e["method"] == "DELETE" and re.search(r"/servers/[^/]+$", e["path"])
    ]
    assert not deleted, f"server delete routes called: {deleted}"
    # The Elastic Metal box was attached to the runners' Private Network before it joined.
    em_writes = [(e["method"], e["path"]) for e in audit if e["box"] == EM.format(1)]
    assert any(p.endswith("/private-networks") for _, p in em_writes), em_writes


def _crd_exists(cluster: KubeCluster) -> bool:
    try:
        k8s.ApiextensionsV1Api(cluster.api).read_custom_resource_definition("machineclaims.infra.tuist.dev")
    except k8s.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
