"""Names the program, its providers and its operators share: one home each.

No imports from the rest of the project: config, components, providers and vendorsim all read this.
"""

from __future__ import annotations

import hashlib
import re

PROJECT = "tuist-infra"
MANAGED_BY = PROJECT

# config.models.Environment's values (tests/config hold the two together).
ENVIRONMENTS = ("dev", "staging", "canary", "production")
PRODUCTION = "production"

# Node labels every adopted box carries (the pool label is the seeds' CAPI MachineDeployment label).
POOL_LABEL = "node.cluster.x-k8s.io/pool"
FLEET_LABEL = "tuist.dev/fleet"

# Stack secrets, in the order `required_secret_keys` reports them and docs/config.md lists them.
OVH_APPLICATION_SECRET = "ovhApplicationSecret"
OVH_CONSUMER_KEY = "ovhConsumerKey"
DEDIBOX_SECRET_KEY = "dediboxSecretKey"
ROBOT_PASSWORD = "robotPassword"
# One Scaleway IAM API key for Elastic Metal and Apple silicon (providers/clients.py).
SCALEWAY_SECRET_KEY = "scalewaySecretKey"
FLEET_SSH_PRIVATE_KEY = "fleetSshPrivateKey"
FLEET_SUDO_PASSWORD = "fleetSudoPassword"
KUBECONFIG = "kubeconfig"
# Retired: the runners-controller authenticates to the Tuist server with its ServiceAccount token
# (upstream reads no static token). Still a secret key, so a stack that holds it loads; nothing reads it.
TUIST_SERVER_TOKEN = "tuistServerToken"
CLOUDFLARE_API_TOKEN = "cloudflareApiToken"  # external-dns publishing the kura.tuist.dev zone
HCLOUD_TOKEN = "hcloudToken"  # the control plane's Hetzner Cloud project (its firewall)
SECRET_KEYS = (
    OVH_APPLICATION_SECRET,
    OVH_CONSUMER_KEY,
    DEDIBOX_SECRET_KEY,
    ROBOT_PASSWORD,
    SCALEWAY_SECRET_KEY,
    FLEET_SSH_PRIVATE_KEY,
    FLEET_SUDO_PASSWORD,
    KUBECONFIG,
    TUIST_SERVER_TOKEN,
    CLOUDFLARE_API_TOKEN,
    HCLOUD_TOKEN,
)

# The cluster's API server as the self-join writes it into the kubelet's kubeconfig: a host (a name or
# an IPv4 literal) and an optional port, nothing else. Config, the machine provider's check and the
# join refuse the same URLs: a mistake found only at join time is found after the box was claimed.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_API_SERVER = re.compile(rf"https://{_LABEL}(?:\.{_LABEL})*(?::(?P<port>[0-9]{{1,5}}))?")


def api_server_problem(url: str) -> str | None:
    """Why `url` cannot be the cluster's API server the boxes join, or None."""
    match = _API_SERVER.fullmatch(url)
    if match is None:
        return "is not https://<host>[:<port>] (a DNS name or IPv4 address; no path, no trailing slash)"
    port = match["port"]
    if port is not None and not 1 <= int(port) <= 65535:
        return f"has port {port}; a TCP port is 1-65535"
    return None


# Kura's local volumes (components/storage.py): one folder per static PersistentVolume, named after it,
# under the box's /data disk. The released-volume scrubber (watcher/released_volumes.py) empties
# folders of exactly that form and nothing else.
VOLUME_ROOT = "/data/kura-volumes"


def volume_path(name: str) -> str:
    """Where the local volume `name` lives on its box (the PV's hostPath)."""
    return f"{VOLUME_ROOT}/{name}"


# The Node label a local volume's node affinity pins it to its box with.
HOSTNAME_LABEL = "kubernetes.io/hostname"
# What becomes of a local volume's data once its claim is deleted (a region's `released_volumes`),
# written on each volume by the program: the scrubber acts on that decision only, never on its own.
ON_RELEASE_ANNOTATION = "tuist.dev/on-release"
# Written by the scrubber when it empties a volume: which claim's data went, and when.
SCRUBBED_ANNOTATION = "tuist.dev/scrubbed"

# The cluster-side claim of a box (providers/machine/record.py, components/claims_crd.py).
CLAIM_GROUP = "infra.tuist.dev"
CLAIM_VERSION = "v1alpha1"
CLAIM_KIND = "MachineClaim"
CLAIM_PLURAL = "machineclaims"
CLAIM_CRD_NAME = f"{CLAIM_PLURAL}.{CLAIM_GROUP}"


def fleet_key_name(public_key: str) -> str:
    """The name the fleet key is registered under at a vendor: stable, and no secret in it."""
    return "tuist-" + hashlib.sha256(public_key.strip().encode()).hexdigest()[:12]


# --- what a fleet marker may be --------------------------------------------------------------------------
# The characters this program gives a marker (config and the machine provider's input checks): a
# subset of every vendor field's. How long a marker may be per vendor, with room for the claim, is
# the vendor field's limit: providers/vendor.py MARKER_LIMITS / marker_problem, the one table.

MARKER_PATTERN = r"^[a-z0-9][a-z0-9-]*$"  # lowercase letters, digits and '-'
