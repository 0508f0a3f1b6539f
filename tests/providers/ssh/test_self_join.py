"""scripts/self-join.sh end to end: paramiko runner -> real sshd -> bash in a box sandbox."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client as k8s

from providers.kube import BootstrapToken, create_bootstrap_token
from providers.ssh.runner import RemoteCommandError, run_script
from providers.ssh.selfjoin import (
    NodeTaint,
    SelfJoinInputError,
    SelfJoinParams,
    render_self_join_script,
    self_join_secrets,
)
from tests.providers.ssh.conftest import BOOTSTRAP_TOKEN, SUDO_PASSWORD, Box, KeyPair, free_port
from tests.support.cluster import (
    CLUSTER_DNS,
    KubeCluster,
    apply_node_bootstrap,
    wait_until,
)
from vendorsim.boxes import BoxFarm, Hardware

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBsimulatedCA\n-----END CERTIFICATE-----\n"
PARAMS = SelfJoinParams(
    node_name="kura-us-east-1",
    node_ip="203.0.113.10",
    provider_id="ovh://bhs6/ns5001234.ip-203-0-113.net",
    labels={"node.cluster.x-k8s.io/pool": "kura-us-east", "node.cluster.x-k8s.io/instance-type": "ovh"},
    taints=(NodeTaint("tuist.dev/kura-cache", "true", "NoSchedule"),),
    api_server="https://cp.staging.example.net:6443",
    ca_bundle_pem=CA_PEM,
    cluster_dns="10.96.0.10",
)


def join(
    box: Box, fleet_key: KeyPair, params: SelfJoinParams = PARAMS, sudo_password: str | None = SUDO_PASSWORD
):
    return run_script(
        box.target,
        render_self_join_script(params),
        private_key=fleet_key.private,
        env_secrets=self_join_secrets(sudo_password=sudo_password, bootstrap_token=BOOTSTRAP_TOKEN),
        expected_host_key=box.info.host_key_fingerprint,
        step="self-join",
        retries=1,
        retry_delay=0,
        handshake_timeout=10,
        step_timeout=120,
    )


def box_sh(box: Box, fleet_key: KeyPair, script: str) -> str:
    return run_script(
        box.target,
        script,
        private_key=fleet_key.private,
        env_secrets={},
        expected_host_key=None,
        retries=1,
        retry_delay=0,
    ).output_tail


def index_of(calls: list[str], line: str) -> int:
    assert line in calls, f"{line!r} not in the calls log:\n" + "\n".join(calls)
    return calls.index(line)


def first_index(calls: list[str], predicate: Callable[[str], bool]) -> int:
    return next(i for i, c in enumerate(calls) if predicate(c))


def tree_digest(*roots: Path) -> dict[str, str]:
    """Content digest of every regular file the script writes: not the logs that grow on each run,
    nor what the running kubelet writes for itself (its key and certificates under kubelet/pki)."""
    digest: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if (
                path.is_file()
                and not path.is_symlink()
                and "var/log" not in str(path)
                and "kubelet/pki/" not in str(path)
            ):
                digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


HOST_PATHS = [
    "/etc/sysctl.d",
    "/etc/modules-load.d",
    "/etc/sudoers.d",
    "/etc/fstab",
    "/var/lib/kubelet",
    "/etc/containerd",
    "/etc/apt/sources.list.d",
    "/etc/apt/keyrings",
    "/usr/bin/kubelet",
    "/etc/systemd/system/kubelet.service",
    "/data",
    "/etc/kubernetes",
    "/var/lib/sim",
    "/var/log/sim-calls.log",
]


def host_snapshot() -> dict[str, object]:
    snap: dict[str, object] = {}
    for p in map(Path, HOST_PATHS):
        if p.is_dir():
            snap[str(p)] = sorted((c.name, c.lstat().st_mtime_ns) for c in p.iterdir())
        elif p.exists():
            snap[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            snap[str(p)] = None
    snap["mounts"] = Path("/proc/self/mountinfo").read_text()
    snap["ip_forward"] = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    snap["swaps"] = Path("/proc/swaps").read_text()
    return snap


def test_self_join_on_a_box_with_its_own_data_filesystem(make_box: Callable[..., Box], fleet_key: KeyPair):
    box = make_box(data_is_separate=True)
    # A previous join left a Cilium drop-in naming an interface that is gone.
    box_sh(
        box, fleet_key, "echo 'net.ipv4.conf.cilium_host.rp_filter = 0' > /etc/sysctl.d/99-zzz-cilium.conf"
    )
    host_before = host_snapshot()

    result = join(box, fleet_key)
    assert "\nself-join: kura-us-east-1 configured\n" in result.output_tail
    calls = box.calls()

    # 1. NOPASSWD sudo is the first privileged act.
    grant = first_index(calls, lambda c: c.startswith("sudo -S -p '' sh -c"))
    assert "ubuntu\\ ALL=\\(ALL\\)\\ NOPASSWD:ALL" in calls[grant]
    assert all(c in ("sudo -n true",) or not c.startswith("sudo") for c in calls[:grant])
    assert (box.root / "etc/sudoers.d/90-ubuntu-nopasswd").read_text() == "ubuntu ALL=(ALL) NOPASSWD:ALL\n"
    assert oct((box.root / "etc/sudoers.d/90-ubuntu-nopasswd").stat().st_mode & 0o777) == "0o440"

    # 3. The kubelet root is bound onto /data before any kubelet file is written.
    bind = index_of(calls, "mount --bind /data/kubelet /var/lib/kubelet")
    first_write = first_index(calls, lambda c: c.startswith("install ") and "/var/lib/kubelet/" in c)
    assert bind < first_write
    assert "/data/kubelet /var/lib/kubelet none bind,nofail 0 0" in (box.root / "etc/fstab").read_text()
    assert (box.info.data_disk / "kubelet/config.yaml").exists()  # on /data, not hidden under the mount
    assert not (box.root / "var/lib/kubelet/config.yaml").exists()

    # 8. Stale Cilium drop-ins go before sysctl --system (which would fail on them).
    rm = index_of(calls, "rm -f /etc/sysctl.d/99-zzz-cilium.conf /etc/sysctl.d/99-zzz-cilium.conf")
    assert rm < index_of(calls, "sysctl --system")
    assert not (box.root / "etc/sysctl.d/99-zzz-cilium.conf").exists()
    assert "net.bridge.bridge-nf-call-iptables = 1" in (box.root / "var/lib/sim/sysctl").read_text()

    # 11. containerd's root moves to /data (its own filesystem here).
    config = (box.root / "etc/containerd/config.toml").read_text()
    assert 'root = "/data/containerd"' in config
    assert "SystemdCgroup = true" in config
    assert 'config_path = "/etc/containerd/certs.d"' in config
    assert (box.info.data_disk / "containerd").is_dir()

    # 12-13. Keyring for the minor, update after adding the source, kubelet installed, held, enabled.
    release_key = (
        "curl -fsSL --connect-timeout 20 --max-time 60 --retry 5 --retry-delay 5 "
        "https://pkgs.k8s.io/core:/stable:/v1.34/deb/Release.key"
    )
    assert index_of(calls, release_key) < index_of(
        calls,
        "apt-get -o DPkg::Lock::Timeout=120 -o Dpkg::Options::=--force-confdef "
        "-o Dpkg::Options::=--force-confold install -y -q --allow-change-held-packages kubelet",
    )
    assert (box.root / "etc/apt/sources.list.d/kubernetes.list").read_text() == (
        "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] "
        "https://pkgs.k8s.io/core:/stable:/v1.34/deb/ /\n"
    )
    assert (
        index_of(calls, "apt-mark hold kubelet")
        < index_of(calls, "systemctl daemon-reload")
        < index_of(calls, "systemctl enable --now kubelet")
    )
    assert (box.root / "var/lib/sim/systemd/active").read_text().split() == [
        "containerd.service",
        "kubelet.service",
    ]
    assert not (box.root / "var/lib/sim/systemd/stale").exists()
    assert "#/swap.img" in (box.root / "etc/fstab").read_text()
    assert (box.root / "var/lib/sim/modules").read_text().split() == ["overlay", "br_netfilter"]

    # The kubelet unit: InternalIP from --node-ip, the foreign providerID, labels and taints.
    unit = (box.root / "etc/systemd/system/kubelet.service").read_text()
    # The kubelet waits for its root's bind onto /data (`nofail`), never starts on the empty directory.
    assert "After=network-online.target containerd.service\nRequiresMountsFor=/var/lib/kubelet\n" in unit
    for flag in (
        "--node-ip=203.0.113.10",
        "--provider-id=ovh://bhs6/ns5001234.ip-203-0-113.net",
        "--hostname-override=kura-us-east-1",
        "--node-labels=node.cluster.x-k8s.io/instance-type=ovh,node.cluster.x-k8s.io/pool=kura-us-east",
        "--register-with-taints=tuist.dev/kura-cache=true:NoSchedule",
        "--bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig",
    ):
        assert f"    {flag}" in unit
    kubelet_config = (box.info.data_disk / "kubelet/config.yaml").read_text()
    assert "clusterDNS:\n- 10.96.0.10\n" in kubelet_config
    # No serving-CSR approver runs in these clusters: a kubelet waiting for one would serve nothing.
    assert "serverTLSBootstrap" not in kubelet_config
    assert "clusterDomain: cluster.local\n" in kubelet_config
    # The box's daemons keep their share off allocatable (components/capacity.py counts with it).
    reserved = "systemReserved:\n  cpu: 500m\n  memory: 1Gi\nkubeReserved:\n  cpu: 500m\n  memory: 1Gi\n"
    assert reserved in kubelet_config
    bootstrap = box.info.data_disk / "kubelet/bootstrap-kubeconfig"
    assert f"token: {BOOTSTRAP_TOKEN}\n" in bootstrap.read_text()
    assert oct(bootstrap.stat().st_mode & 0o777) == "0o600"
    assert (box.root / "etc/kubernetes/pki/ca.crt").read_text() == CA_PEM

    # No secret in any recorded argv, nor in the traced output.
    log = "\n".join(calls)
    assert SUDO_PASSWORD not in log and BOOTSTRAP_TOKEN not in log
    assert SUDO_PASSWORD not in result.output_tail and BOOTSTRAP_TOKEN not in result.output_tail

    # The host saw none of it.
    assert host_snapshot() == host_before


def test_running_the_self_join_twice_converges(make_box: Callable[..., Box], fleet_key: KeyPair):
    box = make_box(data_is_separate=True)
    join(box, fleet_key)
    first = tree_digest(box.root, box.info.data_disk)
    log_length = len(box.calls())

    result = join(box, fleet_key, sudo_password=None)  # NOPASSWD is in place: no password needed
    second_calls = box.calls()[log_length:]
    assert "\nself-join: kura-us-east-1 configured\n" in result.output_tail
    assert tree_digest(box.root, box.info.data_disk) == first
    assert not [c for c in second_calls if c.startswith("sudo -S")]
    assert not [c for c in second_calls if c.startswith("mount ")]
    assert not [c for c in second_calls if "systemctl restart" in c]
    assert not [c for c in second_calls if c.startswith("install ")]
    assert (box.root / "etc/fstab").read_text().count("/data/kubelet /var/lib/kubelet") == 1


def rejoin_restarts(box: Box, fleet_key: KeyPair, **change: str) -> list[str]:
    """Join, then join again with `change` to the parameters: the services the rejoin restarted."""
    join(box, fleet_key)
    log_length = len(box.calls())
    join(box, fleet_key, SelfJoinParams(**{**PARAMS.__dict__, **change}), sudo_password=None)
    return [c for c in box.calls()[log_length:] if c.startswith("systemctl restart")]


def test_a_rejoin_with_a_new_cluster_dns_restarts_the_kubelet_once(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # The kubelet reads its config at start: a rewritten config.yaml (here clusterDNS, a REJOIN input)
    # only takes effect through a restart, and an unchanged one must not cause one.
    box = make_box(data_is_separate=True)
    restarts = rejoin_restarts(box, fleet_key, cluster_dns="10.96.0.53")
    assert "10.96.0.53" in box_sh(box, fleet_key, "cat /var/lib/kubelet/config.yaml")
    assert restarts == ["systemctl restart kubelet"]


def test_a_rejoin_for_a_new_kubernetes_minor_moves_the_held_kubelet_and_restarts_it(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # The kubelet is held (apt-mark hold): apt refuses to move a held package unless told, as the
    # box's apt does; the kubelet's repository follows the control plane's minor.
    box = make_box(data_is_separate=True)
    restarts = rejoin_restarts(box, fleet_key, kubernetes_minor="v1.35")
    assert "Version: 1.35.0-1.1" in box_sh(box, fleet_key, "dpkg -s kubelet")
    assert restarts == ["systemctl restart kubelet"]


def test_a_dpkg_lock_held_at_the_first_boot_is_waited_for(make_box: Callable[..., Box], fleet_key: KeyPair):
    # A box reinstalled moments ago runs unattended-upgrades, which holds dpkg's lock, exactly when the
    # join runs; apt gives up at once unless told to wait. The box's apt shim reads the holder and
    # when it lets go from the lock file (written before the session, so the box sees it).
    box = make_box(data_is_separate=True)
    lock = box.root / "var/lib/sim/dpkg-lock"
    lock.write_text(f"unattended-upgr {int(time.time()) + 15}\n")
    result = join(box, fleet_key)
    assert "\nself-join: kura-us-east-1 configured\n" in result.output_tail
    assert not lock.exists()  # apt got it once its holder let go


def test_a_dpkg_run_stopped_half_way_is_finished_before_any_install(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # A join cut at its step's budget (the box stops the script, apt and dpkg with it), or a box powered
    # off mid-upgrade, leaves dpkg's journal; apt-get install refuses until it is finished.
    box = make_box(data_is_separate=True)
    journal = box.root / "var/lib/dpkg/updates/0001"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("Package: kubelet\nStatus: install ok half-configured\n")
    result = join(box, fleet_key)
    assert "\nself-join: kura-us-east-1 configured\n" in result.output_tail
    assert not journal.exists()
    calls = box.calls()
    configure = index_of(calls, "dpkg --force-confdef --force-confold --configure -a")
    assert configure < first_index(calls, lambda c: c.startswith("apt-get") and " install " in c)
    # Nothing to finish: nothing run.
    log_length = len(box.calls())
    join(box, fleet_key, sudo_password=None)
    assert not [c for c in box.calls()[log_length:] if c.startswith("dpkg --force-confdef")]


def test_a_package_lists_lock_held_at_the_first_boot_is_waited_for(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # cloud-init's package update holds the lists' lock; `apt-get update` fails at once on it whatever
    # DPkg::Lock::Timeout says, so the join tries again until its holder lets go.
    box = make_box(data_is_separate=True)
    lock = box.root / "var/lib/sim/apt-lists-lock"
    lock.write_text(f"apt-get {int(time.time()) + 8}\n")
    result = join(box, fleet_key)
    assert "\nself-join: kura-us-east-1 configured\n" in result.output_tail
    assert not lock.exists()
    updates = [c for c in box.calls() if c.startswith("apt-get") and " update" in c]
    assert len(updates) >= 3  # refused while held, then done; and the Kubernetes repository's


def test_a_rejoin_for_another_api_server_makes_the_kubelet_bootstrap_anew(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # The kubelet's own kubeconfig (written by its TLS bootstrap) names the old server; while it holds
    # it, it never reads the bootstrap kubeconfig that names the new one.
    box = make_box(data_is_separate=True)
    join(box, fleet_key)
    own = "/var/lib/kubelet/kubeconfig"
    written = f"clusters:\\n- cluster:\\n    server: {PARAMS.api_server}\\n"
    box_sh(box, fleet_key, f"printf '{written}' | sudo tee {own}")
    log_length = len(box.calls())
    join(box, fleet_key, sudo_password=None)  # the same server: the kubelet keeps its kubeconfig
    assert PARAMS.api_server in box_sh(box, fleet_key, f"sudo cat {own}")
    moved = SelfJoinParams(**{**PARAMS.__dict__, "api_server": "https://cp2.staging.example.net:6443"})
    join(box, fleet_key, moved, sudo_password=None)
    rejoin_calls = box.calls()[log_length:]
    assert box_sh(box, fleet_key, f"sudo test -e {own} && echo kept || echo gone").strip() == "gone"
    bootstrap = box_sh(box, fleet_key, "sudo cat /var/lib/kubelet/bootstrap-kubeconfig")
    assert "server: https://cp2.staging.example.net:6443" in bootstrap
    assert [c for c in rejoin_calls if c.startswith("systemctl restart")] == ["systemctl restart kubelet"]


# A step after the unit and config writes fails once: `sysctl --system` on a drop-in naming an interface
# the box lacks (in production: pkgs.k8s.io down, an apt lock held past its wait, a dropped session).
STALE_SYSCTL = "echo 'net.ipv4.conf.gone0.rp_filter = 0' | sudo tee /etc/sysctl.d/98-stale.conf"


def test_a_rejoin_that_failed_half_way_restarts_the_kubelet_on_the_next_run(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # The failed run wrote the new config.yaml; the next run finds it in place, and must still restart
    # the kubelet onto it (the restart it owed is kept on the box).
    box = make_box(data_is_separate=True)
    join(box, fleet_key)
    box_sh(box, fleet_key, STALE_SYSCTL)
    new = SelfJoinParams(**{**PARAMS.__dict__, "cluster_dns": "10.96.0.53"})
    with pytest.raises(RemoteCommandError):
        join(box, fleet_key, new, sudo_password=None)
    assert not [c for c in box.calls() if c.startswith("systemctl restart")]
    box_sh(box, fleet_key, "sudo rm -f /etc/sysctl.d/98-stale.conf")
    log_length = len(box.calls())
    assert "configured" in join(box, fleet_key, new, sudo_password=None).output_tail
    assert [c for c in box.calls()[log_length:] if c.startswith("systemctl restart")] == [
        "systemctl restart kubelet"
    ]
    # Paid: a third run restarts nothing.
    log_length = len(box.calls())
    join(box, fleet_key, new, sudo_password=None)
    assert not [c for c in box.calls()[log_length:] if c.startswith("systemctl restart")]


def test_a_move_to_another_api_server_that_failed_half_way_still_bootstraps_anew(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box(data_is_separate=True)
    join(box, fleet_key)
    written = f"clusters:\\n- cluster:\\n    server: {PARAMS.api_server}\\n"
    box_sh(box, fleet_key, f"printf '{written}' | sudo tee /var/lib/kubelet/kubeconfig")
    box_sh(box, fleet_key, STALE_SYSCTL)
    moved = SelfJoinParams(**{**PARAMS.__dict__, "api_server": "https://cp2.staging.example.net:6443"})
    with pytest.raises(RemoteCommandError):
        join(box, fleet_key, moved, sudo_password=None)
    box_sh(box, fleet_key, "sudo rm -f /etc/sysctl.d/98-stale.conf")
    log_length = len(box.calls())
    join(box, fleet_key, moved, sudo_password=None)
    assert [c for c in box.calls()[log_length:] if c.startswith("systemctl restart")] == [
        "systemctl restart kubelet"
    ]


def test_under_systemd_resolved_pods_get_its_upstream_servers_not_its_stub(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # Ubuntu's /etc/resolv.conf names 127.0.0.53, unreachable from a pod's network namespace; the box
    # runs systemd-resolved as an installed Ubuntu does (vendorsim/sandbox/login.sh).
    box = make_box()
    join(box, fleet_key)
    config = box_sh(box, fleet_key, "cat /var/lib/kubelet/config.yaml")
    assert "resolvConf: /run/systemd/resolve/resolv.conf\n" in config


def test_without_a_separate_data_filesystem_nothing_moves_to_data(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box(data_is_separate=False)
    join(box, fleet_key)
    calls = box.calls()
    assert not [c for c in calls if c.startswith("mount ")]
    assert "RequiresMountsFor" not in (box.root / "etc/systemd/system/kubelet.service").read_text()
    assert "/data/kubelet" not in (box.root / "etc/fstab").read_text()
    assert (box.root / "var/lib/kubelet/config.yaml").exists()
    config = (box.root / "etc/containerd/config.toml").read_text()
    assert 'root = "/var/lib/containerd"' in config and "/data/containerd" not in config


def test_a_wrong_sudo_password_stops_the_join_at_step_one_with_sudos_message(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    with pytest.raises(RemoteCommandError) as err:
        join(box, fleet_key, sudo_password="not-the-password")
    assert err.value.exit_status == 1
    assert err.value.output_tail.endswith(
        "++ set +x\nSorry, try again.\n\nsudo: 1 incorrect password attempt\n"
    )
    assert "not-the-password" not in str(err.value)
    assert not (box.root / "etc/sudoers.d/90-ubuntu-nopasswd").exists()
    assert not [c for c in box.calls() if c.startswith(("mkdir", "sudo mkdir", "mount"))]


def test_no_sudo_password_and_no_nopasswd_fails_clearly(make_box: Callable[..., Box], fleet_key: KeyPair):
    box = make_box(sudo_password=None)
    with pytest.raises(RemoteCommandError) as err:
        join(box, fleet_key, sudo_password=None)
    assert err.value.output_tail.endswith(
        "self-join: ubuntu has no passwordless sudo and no sudo password was given\n"
    )


def test_as_root_no_sudo_is_used(make_box: Callable[..., Box], fleet_key: KeyPair):
    box = make_box(user="root", sudo_password=None)
    join(box, fleet_key, sudo_password=None)
    calls = box.calls()
    assert not [c for c in calls if c.startswith("sudo")]
    assert not (box.root / "etc/sudoers.d/90-root-nopasswd").exists()
    assert index_of(calls, "sysctl --system") < index_of(calls, "systemctl enable --now kubelet")


def test_the_sysctl_shim_fails_on_a_stale_cilium_drop_in_as_a_box_does(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    # Proves the ordering test above can fail: without the rm, sysctl --system aborts.
    box = make_box(user="root")
    out = box_sh(
        box,
        fleet_key,
        (
            "echo 'net.ipv4.conf.cilium_host.rp_filter = 0' > /etc/sysctl.d/99-zzz-cilium.conf\n"
            "sysctl --system >/dev/null 2>/tmp/err; echo status=$?; cat /tmp/err"
        ),
    )
    assert out == (
        "status=1\n"
        "sysctl: cannot stat /proc/sys/net/ipv4/conf/cilium_host/rp_filter: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_ip": "2001:db8::1"}, "node_ip '2001:db8::1' is not an IPv4 address"),
        ({"node_name": "Kura_1"}, "node_name 'Kura_1' is not a DNS subdomain"),
        (
            {"provider_id": "hcloud://1"},
            "provider_id 'hcloud://1' is not <ovh|dedibox|hrobot|scaleway|applesilicon>://<path>",
        ),
        (
            {"labels": {"node-role.kubernetes.io/worker": ""}},
            "labels: 'node-role.kubernetes.io/worker' is in a namespace the kubelet may not set on itself "
            "(NodeRestriction)",
        ),
        ({"labels": {"pool": "a b"}}, "labels['pool']: 'a b' is not a Kubernetes label value"),
        ({"labels": {}}, "labels is empty: a node needs at least its pool label"),
        (
            {"taints": (NodeTaint("k", "v", "NoRun"),)},
            "taints[0].effect 'NoRun' is not one of ('NoSchedule', 'PreferNoSchedule', 'NoExecute')",
        ),
        ({"kubernetes_minor": "1.34"}, "kubernetes_minor '1.34' is not like v1.34"),
        (
            {"api_server": "http://cp:6443"},
            "api_server 'http://cp:6443' is not https://<host>[:<port>] (a DNS name or IPv4 address; "
            "no path, no trailing slash)",
        ),
        ({"ca_bundle_pem": "nope"}, "ca_bundle_pem holds no PEM certificate"),
        ({"cluster_dns": "kube-dns"}, "cluster_dns 'kube-dns' is not an IP address"),
        ({"cluster_domain": "Cluster_Local"}, "cluster_domain 'Cluster_Local' is not a DNS domain"),
    ],
)
def test_bad_parameters_are_refused_naming_the_field(change: dict[str, object], message: str):
    params = SelfJoinParams(**{**PARAMS.__dict__, **change})  # type: ignore[arg-type]
    with pytest.raises(SelfJoinInputError) as err:
        render_self_join_script(params)
    assert str(err.value) == message


def test_a_malformed_bootstrap_token_is_refused_without_echoing_it():
    with pytest.raises(SelfJoinInputError) as err:
        self_join_secrets(sudo_password=None, bootstrap_token="leaked-secret-value")
    assert str(err.value) == "bootstrap_token is not a bootstrap token (<6 chars>.<16 chars>, a-z0-9)"


def test_the_rendered_header_quotes_every_parameter():
    script = render_self_join_script(PARAMS)
    header = script.split("#!/bin/bash", 1)[0]
    assert "NODE_NAME=kura-us-east-1\n" in header
    assert "NODE_TAINTS=tuist.dev/kura-cache=true:NoSchedule\n" in header
    assert "CLUSTER_DNS=10.96.0.10\n" in header
    assert "CLUSTER_DOMAIN=cluster.local\n" in header
    assert BOOTSTRAP_TOKEN not in script and SUDO_PASSWORD not in script
    assert os.path.basename(__file__) not in header


# --- against a real control plane ---------------------------------------------------------------------


def test_a_box_running_the_self_join_ends_with_a_ready_node(
    farm: BoxFarm,
    fleet_key: KeyPair,
    kube_cluster: KubeCluster,
    request: pytest.FixtureRequest,
):
    """The whole chain: paramiko -> sshd -> the self-join script in the box sandbox -> systemctl
    starts the kubelet (the stand-in) with the unit's flags -> TLS bootstrap with the program's
    token and RBAC -> a Ready Node with what the program asked for, capacity from the box."""
    apply_node_bootstrap(kube_cluster, ["ssh-tests"])
    key = f"join-{abs(hash(request.node.nodeid)) % 10**6}"
    info = farm.ensure(
        key,
        ssh_port=free_port(),
        user="ubuntu",
        authorized_key=fleet_key.public,
        sudo_password=SUDO_PASSWORD,
        data_is_separate=True,
        hardware=Hardware(threads=16, memory_bytes=64 * 2**30),
    )
    box = Box(farm, key, "ubuntu", info)
    token = BootstrapToken.generate()
    create_bootstrap_token(kube_cluster.api, token, fleet="ssh-tests", node_name="kura-us-east-2")
    params = SelfJoinParams(
        node_name="kura-us-east-2",
        node_ip="198.18.0.60",
        provider_id="ovh://bhs6/ns5009999.ip-203-0-113.net",
        labels={"node.cluster.x-k8s.io/pool": "kura-us-east"},
        taints=(NodeTaint("tuist.dev/kura", "true", "NoSchedule"),),
        api_server=kube_cluster.api_server,
        ca_bundle_pem=kube_cluster.ca_pem,
        cluster_dns=CLUSTER_DNS,
    )
    try:
        run_script(
            box.target,
            render_self_join_script(params),
            private_key=fleet_key.private,
            env_secrets=self_join_secrets(sudo_password=SUDO_PASSWORD, bootstrap_token=token.value),
            expected_host_key=info.host_key_fingerprint,
            step="self-join",
            retries=1,
            retry_delay=0,
            step_timeout=120,
        )

        def ready() -> k8s.V1Node | None:
            try:
                node = kube_cluster.core.read_node("kura-us-east-2")
            except k8s.ApiException:
                return None
            conditions = {c.type: c.status for c in node.status.conditions or []}
            return node if conditions.get("Ready") == "True" else None

        node = wait_until("node kura-us-east-2 Ready", ready, timeout=90)
        assert node.spec.provider_id == "ovh://bhs6/ns5009999.ip-203-0-113.net"
        assert node.metadata.labels["node.cluster.x-k8s.io/pool"] == "kura-us-east"
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints]
        assert ("tuist.dev/kura", "true", "NoSchedule") in taints
        assert [a.address for a in node.status.addresses if a.type == "InternalIP"] == ["198.18.0.60"]
        # The kernel's MemTotal, less the self-join's reservations and the eviction threshold: what the
        # capacity model counts with (components/capacity.py).
        assert node.status.capacity["cpu"] == "16" and node.status.capacity["memory"] == "64000Mi"
        assert node.status.allocatable["cpu"] == "15" and node.status.allocatable["memory"] == "61852Mi"
        # The kubelet's files are where the self-join put its root: on /data.
        current = info.data_disk / "kubelet" / "pki" / "kubelet-client-current.pem"
        assert os.readlink(current).startswith("/var/lib/kubelet/pki/kubelet-client-")
        # The kubelet's log is buffered (klog flushes every few seconds): the line may trail the Ready node.
        log = farm.service_log(key)
        wait_until(
            "kubelet log 'Successfully registered node'",
            lambda: "Successfully registered node" in log.read_text(),
            timeout=30,
        )

        # A pod on the box; the test fails its readiness probe through a file on the box, over SSH.
        namespace = kube_cluster.namespace("selfjoin")
        pod = kube_cluster.core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "kura"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "kura-us-east-2"},
                    "tolerations": [{"key": "tuist.dev/kura", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "kura",
                            "image": "ghcr.io/tuist/kura:0.10.5",
                            "readinessProbe": {
                                "httpGet": {"path": "/ready", "port": 8080},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        )

        def pod_ready(want: str) -> Callable[[], bool]:
            def probe() -> bool:
                current = kube_cluster.core.read_namespaced_pod("kura", namespace)
                return any(c.type == "Ready" and c.status == want for c in current.status.conditions or [])

            return probe

        wait_until("pod kura Ready", pod_ready("True"), timeout=30)
        box_sh(box, fleet_key, f"sudo touch /var/lib/kubelet/pods/{pod.metadata.uid}/containers/kura/unready")
        wait_until("pod kura unready", pod_ready("False"), timeout=30)
        resolv = box_sh(box, fleet_key, f"cat /var/lib/kubelet/pods/{pod.metadata.uid}/resolv.conf")
        assert resolv.startswith(f"nameserver {CLUSTER_DNS}\n")

        # A reinstall stops the kubelet with the old OS.
        farm.reinstall(key, user="ubuntu", authorized_key=fleet_key.public, sudo_password=SUDO_PASSWORD)
        assert farm.service_pid(key) is None
    finally:
        farm.stop(key)
        with contextlib.suppress(k8s.ApiException):
            kube_cluster.core.delete_node("kura-us-east-2")
