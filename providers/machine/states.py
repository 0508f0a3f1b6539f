"""The flows of a machine as state tables, and the join and leave handlers.

adopt   (AdoptedMachine create)   Robot: RESCUE_BOOT .. WAIT_NEW_HOST_KEY, then JOINING; Elastic Metal
                                  with a Private Network: PN_ATTACHING, PN_VLAN, then JOINING; Apple
                                  silicon: MAC_BOOTSTRAP instead of JOINING (never the Linux
                                  self-join); others: JOINING; then NODE_READY
rejoin  (AdoptedMachine update)   the same without the Robot install, with the pinned host key; an
                                  Elastic Metal box whose private_network changed from A first leaves
                                  A (PN_DETACHING), then joins the new one (PN_ATTACHING, PN_VLAN) or,
                                  with none, takes pn0 down (PN_DOWN), then JOINING
leave   (AdoptedMachine delete)   CORDONING, DRAINING, DELETING_NODE, DELETING_LOCAL_PVCS (with a cluster)
release (MachineClaim delete)     providers/machine/release.py (Elastic Metal: RELEASE_PN_DETACHING
                                  after RELEASE_MARKING)

The table itself: `markdown_table()`, printed in docs/machines.md.

Each row's handler does one step and returns Continue / Complete / Error / Failed
(providers/machine/fsm.py). No Pulumi import here.
"""

from __future__ import annotations

from providers import kube
from providers.machine.fsm import DONE, FAILED, Complete, Continue, Failed, Result, Row, Run
from providers.machine.release import detach_waiting, release_table
from providers.machine.robot_install import INSTALLED, install_rows
from providers.machine.settings import DEV_API_SERVER, dev_placeholder_ca
from providers.machine.spec import MachineSpec, Vendor
from providers.ssh.macos import (
    MacBootstrapParams,
    NodeAgentPin,
    macos_bootstrap_secrets,
    render_macos_bootstrap_script,
)
from providers.ssh.privnet import (
    PrivateNetworkParams,
    pn_vlan_secrets,
    render_pn_down_script,
    render_pn_vlan_script,
)
from providers.ssh.runner import run_script
from providers.ssh.selfjoin import NodeTaint, SelfJoinParams, render_self_join_script, self_join_secrets

PIN = "pin"  # the host key the join saw (and pinned), a fact of the record and the host_key_fingerprint
REGISTERED = "node_registered"
PN_VLAN = "pn_vlan"  # the 802.1Q tag of the box's Private Network attachment (Elastic Metal)
# The run's `extra` key naming the Private Network an update moves the box off (the machine's old
# `private_network` input): PN_DETACHING detaches the server from it.
OLD_PRIVATE_NETWORK = "old_private_network"


def _spec(run: Run) -> MachineSpec:
    spec: MachineSpec = run.get("spec")
    return spec


# --- join -------------------------------------------------------------------------------------------------


def joining(run: Run) -> Result:
    """Run self-join.sh on the box over SSH. With a cluster, first write a one-hour bootstrap token
    (a new one per try: the secret half never leaves this call)."""
    spec, settings = _spec(run), run.get("settings")
    token = kube.BootstrapToken.generate()
    registered = False
    if spec.api_server:
        kubeconfig = settings.secret("kubeconfig", why="the machine joins a cluster")
        kube.create_bootstrap_token(settings.kube_api(), token, fleet=spec.fleet, node_name=spec.node_name)
        ca_pem, api_server, registered = kube.cluster_ca_pem(kubeconfig), spec.api_server, True
    else:
        ca_pem, api_server = dev_placeholder_ca(), DEV_API_SERVER
    params = SelfJoinParams(
        node_name=spec.node_name,
        node_ip=spec.public_ipv4,
        provider_id=spec.provider_id,
        labels=spec.node_labels(),
        api_server=api_server,
        ca_bundle_pem=ca_pem,
        kubernetes_minor=spec.kubernetes_minor,
        taints=tuple(NodeTaint(**t) for t in spec.node_taints()),
        cluster_dns=spec.cluster_dns,
        cluster_domain=spec.cluster_domain,
        containerd_source="preinstalled" if spec.vendor is Vendor.ROBOT else "apt",
    )
    target = run.get("target")
    sudo_password = settings.sudo_password if target.user != "root" else None
    # The pin: the installed OS's key right after a Robot install, else the one the join saw last.
    pin = run.facts.get(INSTALLED) or run.facts.get(PIN) or None
    result = run_script(
        target,
        render_self_join_script(params),
        private_key=settings.fleet_private_key,
        env_secrets=self_join_secrets(sudo_password=sudo_password, bootstrap_token=token.value),
        expected_host_key=pin,
        handshake_timeout=spec.timeout("ssh_handshake"),
        step_timeout=run.step_timeout(spec.timeout("joining")),
        retries=1,  # connection trouble is the table's to retry
        step="self-join",
    )
    return Complete({PIN: result.host_key_fingerprint, REGISTERED: "true" if registered else "false"})


# --- Elastic Metal: the Private Network ------------------------------------------------------------------


def pn_attaching(run: Run) -> Result:
    """Attach the server to the fleet's Private Network (its Private Network option enabled first),
    until Scaleway reports the attachment with its VLAN."""
    spec, settings = _spec(run), run.get("settings")
    attachment = settings.vendor_client(spec.vendor).attach_private_network(spec.box_id, spec.private_network)
    if attachment.status == "error":
        return Failed(
            "PrivateNetworkError", f"the attachment of {run.box_label} to {spec.private_network} failed"
        )
    if not attachment.ready:
        return Continue(run.timeout("poll_interval"), f"the Private Network attachment ({attachment.status})")
    return Complete({PN_VLAN: str(attachment.vlan)})


def pn_vlan(run: Run) -> Result:
    """Bring the attachment's VLAN up on the box as pn0 (scripts/pn-vlan.sh), over SSH. A pn0 of
    another VLAN (the box moved from another network) is deleted and made anew by the script."""
    vlan = run.facts.get(PN_VLAN, "")
    if not vlan.isdigit():
        return Failed("NoVlanRecorded", f"no Private Network VLAN of {run.box_label} is recorded")
    return _pn_script(run, render_pn_vlan_script(PrivateNetworkParams(vlan=int(vlan))), "pn_vlan", {})


def pn_detaching(run: Run) -> Result:
    """Take the server off the Private Network the update moves it from, until Scaleway no longer
    lists the attachment: its VLAN would otherwise stay the box's, on a network the fleet left."""
    spec, settings = _spec(run), run.get("settings")
    old = str(run.get(OLD_PRIVATE_NETWORK))
    attachment = settings.vendor_client(spec.vendor).detach_private_network(spec.box_id, old)
    waiting = detach_waiting(run, [attachment])
    if waiting is not None:
        return waiting
    run.log(f"{run.machine}: {run.box_label} left Private Network {old}")
    return Complete({PN_VLAN: ""})  # the old attachment's VLAN is no longer the box's


def pn_down(run: Run) -> Result:
    """The box without a Private Network: pn0 and its netplan file removed (scripts/pn-vlan.sh,
    PN_STATE=down), over SSH."""
    return _pn_script(run, render_pn_down_script(), "pn_down", {PN_VLAN: ""})


def _pn_script(run: Run, script: str, budget: str, facts: dict[str, str]) -> Result:
    spec, settings = _spec(run), run.get("settings")
    target = run.get("target")
    result = run_script(
        target,
        script,
        private_key=settings.fleet_private_key,
        env_secrets=pn_vlan_secrets(sudo_password=settings.sudo_password if target.user != "root" else None),
        expected_host_key=run.facts.get(PIN) or None,
        handshake_timeout=spec.timeout("ssh_handshake"),
        step_timeout=run.step_timeout(spec.timeout(budget)),
        retries=1,
        step=budget.replace("_", "-"),
    )
    return Complete({PIN: result.host_key_fingerprint, **facts})


# --- Apple silicon: the macOS bootstrap -------------------------------------------------------------------


def mac_bootstrap(run: Run) -> Result:
    """Run macos-bootstrap.sh on the Mac over SSH: the node agent under launchd, the pf guard of sshd.
    The sudo password is the one Scaleway set at the Mac's last install, read from the API; when the
    agent registers a Node, a one-hour bootstrap token is written first, as for a Linux join."""
    spec, settings = _spec(run), run.get("settings")
    login = settings.vendor_client(spec.vendor).login(spec.box_id)
    run.secrets.append(login.sudo_password)
    target = run.get("target")
    if login.user != target.user:
        return Failed(
            "WrongLogin",
            f"{run.box_label} logs in as {login.user!r}, not the fleet's ssh_user {target.user!r}",
        )
    agent = dict(spec.node_agent or {})
    pin = NodeAgentPin(
        url=str(agent.get("url")), sha256=str(agent.get("sha256")), registers_node=spec.registers_node
    )
    token: kube.BootstrapToken | None = None
    ca_pem: str | None = None
    registered = False
    if spec.api_server and spec.registers_node:
        kubeconfig = settings.secret("kubeconfig", why="the Mac's node agent joins a cluster")
        token = kube.BootstrapToken.generate()
        kube.create_bootstrap_token(settings.kube_api(), token, fleet=spec.fleet, node_name=spec.node_name)
        ca_pem, registered = kube.cluster_ca_pem(kubeconfig), True
    params = MacBootstrapParams(
        node_name=spec.node_name,
        node_ip=spec.public_ipv4,
        provider_id=spec.provider_id,
        labels=spec.node_labels(),
        agent=pin,
        ssh_port=spec.ssh_port,
        taints=tuple(NodeTaint(**t) for t in spec.node_taints()),
        api_server=spec.api_server if registered else None,
        ca_bundle_pem=ca_pem,
        cluster_dns=spec.cluster_dns,
        cluster_domain=spec.cluster_domain,
        agent_settle_seconds=spec.timeout("agent_settle"),
    )
    result = run_script(
        target,
        render_macos_bootstrap_script(params),
        private_key=settings.fleet_private_key,
        env_secrets=macos_bootstrap_secrets(
            sudo_password=login.sudo_password, bootstrap_token=token.value if token else None
        ),
        expected_host_key=run.facts.get(PIN) or None,
        handshake_timeout=spec.timeout("ssh_handshake"),
        step_timeout=run.step_timeout(spec.timeout("mac_bootstrap")),
        retries=1,
        step="macos-bootstrap",
    )
    return Complete({PIN: result.host_key_fingerprint, REGISTERED: "true" if registered else "false"})


def node_ready(run: Run) -> Result:
    """With a cluster, the machine is ready when its Node is, as the anchor's is: the kubelet finished
    its TLS bootstrap, registered the Node with this box's providerID and reports Ready. Without one
    (the dev stack rendering manifests), or for a Mac whose agent registers none, there is no Node to
    wait for."""
    spec, settings = _spec(run), run.get("settings")
    if not spec.api_server or not spec.registers_node:
        return Complete()
    status = kube.node_status(settings.kube_api(), spec.node_name)
    poll = run.poll_delay("node")
    if status is None:
        return Continue(
            poll, f"Node {spec.node_name} to register (the box's kubelet log: journalctl -u kubelet)"
        )
    if status.provider_id != spec.provider_id:
        return Failed(
            "ProviderIDMismatch",
            f"Node {spec.node_name} carries providerID {status.provider_id!r}, not {spec.provider_id!r}: "
            "another box registered under this machine's node name",
        )
    if not status.ready:
        return Continue(poll, f"Node {spec.node_name} to be Ready (now: {status.reason})")
    return Complete()


# --- leave ------------------------------------------------------------------------------------------------


def cordoning(run: Run) -> Result:
    kube.cordon(run.get("kube"), _spec(run).node_name)
    return Complete()


def draining(run: Run) -> Result:
    # One drain call waits (evictions a PodDisruptionBudget refuses are retried) for what is left of the
    # state's budget.
    timeout = run.step_timeout(run.timeout("draining"))
    kube.drain(run.get("kube"), _spec(run).node_name, timeout=timeout, sleep=run.clock.sleep)
    return Complete()


def deleting_node(run: Run) -> Result:
    kube.delete_node(run.get("kube"), _spec(run).node_name)
    return Complete()


def deleting_local_pvcs(run: Run) -> Result:
    kube.delete_node_local_pvcs(run.get("kube"), _spec(run).node_name)
    return Complete()


# --- tables -----------------------------------------------------------------------------------------------


def _join_rows(
    vendor: Vendor = Vendor.OVH, private_network: bool = False, detach: bool = False
) -> dict[str, Row]:
    # Connection trouble is retried in place; a script that ran and failed is not (it prints why).
    # A Node that is not Ready within its budget fails the create naming what it waited for (a retried
    # create resumes the wait; the box's kubelet log says why).
    ready = Row("NODE_READY", node_ready, "node_ready", DONE, "NODE_READY", FAILED, retries=3)
    if vendor is Vendor.APPLESILICON:
        # A Mac never runs the Linux self-join.
        return {
            "MAC_BOOTSTRAP": Row(
                "MAC_BOOTSTRAP", mac_bootstrap, "mac_bootstrap", "NODE_READY", "MAC_BOOTSTRAP", FAILED
            ),
            "NODE_READY": ready,
        }
    rows = {"JOINING": Row("JOINING", joining, "joining", "NODE_READY", "JOINING", FAILED, retries=3)}
    if private_network:
        # The network first: the node registers with its Private Network address already up.
        rows = {
            "PN_ATTACHING": Row(
                "PN_ATTACHING", pn_attaching, "pn_attaching", "PN_VLAN", "PN_ATTACHING", FAILED
            ),
            "PN_VLAN": Row("PN_VLAN", pn_vlan, "pn_vlan", "JOINING", "PN_VLAN", FAILED),
            **rows,
        }
    elif detach:
        rows = {"PN_DOWN": Row("PN_DOWN", pn_down, "pn_down", "JOINING", "PN_DOWN", FAILED), **rows}
    if detach:
        # An update off another network: the server leaves it at Scaleway before anything else.
        then = "PN_ATTACHING" if private_network else "PN_DOWN"
        rows = {
            "PN_DETACHING": Row("PN_DETACHING", pn_detaching, "pn_detaching", then, "PN_DETACHING", FAILED),
            **rows,
        }
    return {**rows, "NODE_READY": ready}


def join_start(vendor: Vendor, private_network: bool = False, detach: bool = False) -> str:
    """The first state of the join (adopt after any install, and rejoin). `detach`: an update moves
    the box off the Private Network it was on (OLD_PRIVATE_NETWORK in the run's extra)."""
    if vendor is Vendor.APPLESILICON:
        return "MAC_BOOTSTRAP"
    if detach:
        return "PN_DETACHING"
    return "PN_ATTACHING" if private_network else "JOINING"


def adopt_table(vendor: Vendor, private_network: bool = False) -> dict[str, Row]:
    rows = _join_rows(vendor, private_network)
    if vendor is Vendor.ROBOT:
        rows.update(install_rows(then="JOINING"))
    return rows


def adopt_start(vendor: Vendor, private_network: bool = False) -> str:
    return "RESCUE_BOOT" if vendor is Vendor.ROBOT else join_start(vendor, private_network)


def rejoin_table(
    vendor: Vendor = Vendor.OVH, private_network: bool = False, detach: bool = False
) -> dict[str, Row]:
    return _join_rows(vendor, private_network, detach)


def leave_table() -> dict[str, Row]:
    return {
        "CORDONING": Row("CORDONING", cordoning, "cordoning", "DRAINING", "CORDONING"),
        "DRAINING": Row("DRAINING", draining, "draining", "DELETING_NODE", "DRAINING", retries=1),
        "DELETING_NODE": Row(
            "DELETING_NODE", deleting_node, "deleting_node", "DELETING_LOCAL_PVCS", "DELETING_NODE"
        ),
        "DELETING_LOCAL_PVCS": Row(
            "DELETING_LOCAL_PVCS", deleting_local_pvcs, "deleting_local_pvcs", DONE, "DELETING_LOCAL_PVCS"
        ),
    }


def table_rows() -> list[tuple[str, str, Row]]:
    """(flow, vendors, row) of every flow, in the order the rows run."""
    rows: list[tuple[str, str, Row]] = []
    joins = _join_rows()
    em = _join_rows(Vendor.SCALEWAY_EM, private_network=True)
    moved = _join_rows(Vendor.SCALEWAY_EM, private_network=True, detach=True)
    dropped = _join_rows(Vendor.SCALEWAY_EM, private_network=False, detach=True)
    mac = _join_rows(Vendor.APPLESILICON)
    rows += [("adopt", "robot", r) for r in adopt_table(Vendor.ROBOT).values() if r.state not in joins]
    rows += [("rejoin", "scaleway_em, private_network changed", moved["PN_DETACHING"])]
    rows += [
        ("adopt, rejoin", "scaleway_em with a private_network", r)
        for r in em.values()
        if r.state not in joins
    ]
    rows += [
        ("rejoin", "scaleway_em, private_network removed", r) for r in dropped.values() if r.state not in em
    ]
    rows += [("adopt, rejoin", "linux (all but applesilicon)", joins["JOINING"])]
    rows += [("adopt, rejoin", "applesilicon", mac["MAC_BOOTSTRAP"])]
    rows += [("adopt, rejoin", "all", joins["NODE_READY"])]
    rows += [("leave", "all, with a registered Node", r) for r in leave_table().values()]
    for vendors, vendor in (
        ("ovh, dedibox, applesilicon", Vendor.OVH),
        ("scaleway_em", Vendor.SCALEWAY_EM),
        ("robot", Vendor.ROBOT),
    ):
        table = release_table(vendor)
        order = ["RELEASE_MARKING", *(s for s in table if s not in ("RELEASE_MARKING", "RELEASE_CLEARING"))]
        rows += [("release", vendors, table[state]) for state in [*order, "RELEASE_CLEARING"]]
    return rows


def markdown_table() -> str:
    """The state table as docs/machines.md prints it (a test holds the two together)."""
    from providers.machine.spec import DEFAULT_TIMEOUTS

    lines = [
        "| flow | vendors | state | budget | on success | on a retryable error | on a permanent failure |",
        "|---|---|---|---|---|---|---|",
    ]
    for flow, vendors, row in table_rows():
        times = "time" if row.retries == 1 else "times"
        retry = f"{row.on_error} (up to {row.retries} {times})" if row.on_error == row.state else row.on_error
        lines.append(
            f"| {flow} | {vendors} | `{row.state}` | {DEFAULT_TIMEOUTS[row.budget]:g} s | {row.on_success} "
            f"| {retry} | {row.on_failure} |"
        )
    return "\n".join(lines)
