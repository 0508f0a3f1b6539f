"""Names the program, its providers and its operators share: one home each.

No imports from the rest of the project: config, components, providers and vendorsim all read this.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

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
FLEET_SSH_PRIVATE_KEY = "fleetSshPrivateKey"
FLEET_SUDO_PASSWORD = "fleetSudoPassword"
KUBECONFIG = "kubeconfig"
TUIST_SERVER_TOKEN = "tuistServerToken"  # the runners-controller's token for the Tuist server
CLOUDFLARE_API_TOKEN = "cloudflareApiToken"  # external-dns publishing the kura.tuist.dev zone
HCLOUD_TOKEN = "hcloudToken"  # the control plane's Hetzner Cloud project (its firewall)
SECRET_KEYS = (
    OVH_APPLICATION_SECRET,
    OVH_CONSUMER_KEY,
    DEDIBOX_SECRET_KEY,
    ROBOT_PASSWORD,
    FLEET_SSH_PRIVATE_KEY,
    FLEET_SUDO_PASSWORD,
    KUBECONFIG,
    TUIST_SERVER_TOKEN,
    CLOUDFLARE_API_TOKEN,
    HCLOUD_TOKEN,
)

# The cluster-side claim of a box (providers/machine/record.py, components/claims_crd.py).
CLAIM_GROUP = "infra.tuist.dev"
CLAIM_VERSION = "v1alpha1"
CLAIM_KIND = "MachineClaim"
CLAIM_PLURAL = "machineclaims"
CLAIM_CRD_NAME = f"{CLAIM_PLURAL}.{CLAIM_GROUP}"


def fleet_key_name(public_key: str) -> str:
    """The name the fleet key is registered under at a vendor: stable, and no secret in it."""
    return "tuist-" + hashlib.sha256(public_key.strip().encode()).hexdigest()[:12]


# --- what a fleet marker may be, per vendor -----------------------------------------------------------
# The marker lives in a vendor field with a claim beside it (providers/claims.py). The field limits are
# not stated by the vendors' references we hold (../shared/reference/vendor-apis.md): 64 characters is
# assumed for OVH's displayName and Robot's server_name, and a marker is kept well inside it so the
# box's own suffix ("-1") and the longest claim suffix still fit. config/ refuses a longer marker;
# vendorsim's field limits are to be these same numbers (one table for both).

MARKER_PATTERN = r"^[a-z0-9][a-z0-9-]*$"  # lowercase letters, digits and '-'


@dataclass(frozen=True)
class MarkerRule:
    field: str  # the vendor field that holds the marker
    field_max: int  # characters that field takes (assumed, see above)
    claim_suffix: int  # characters the longest claim adds to that field (0: the claim is its own tag)
    marker_max: int  # the longest marker config accepts


MARKER_RULES: dict[str, MarkerRule] = {
    "ovh": MarkerRule("displayName", 64, len(" releasing:") + 12, 32),
    "dedibox": MarkerRule("tag", 128, 0, 63),
    "robot": MarkerRule("server_name", 64, len("~r-") + 12, 32),
}
