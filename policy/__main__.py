"""Entry point the engine runs (`pulumi preview --policy-pack policy`): serve the tuist-infra pack.

Run as a directory, so this file's folder is first on sys.path and `tuist_policy` imports as a
top-level package (the tests import the same code as `policy.tuist_policy`).
"""

from pulumi_policy import EnforcementLevel, PolicyPack
from tuist_policy.pack import PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
