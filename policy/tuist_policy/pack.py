"""The pack's name and its policies, in the order the engine reports them."""

from __future__ import annotations

from pulumi_policy import Policy

from .advisory import ADVISORY
from .mandatory import MANDATORY

PACK_NAME = "tuist-infra"
POLICIES: list[Policy] = [*MANDATORY, *ADVISORY]
