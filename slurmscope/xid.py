"""NVIDIA's XID catalogue: what each XID means, what NVIDIA says to do, and the health verdict that follows.

The agent, the health pipeline, the reliability pipeline, the alert rules and the runbooks all read this one
table, so a GPU the agent reports unhealthy is the GPU the verdict calls failing and the alert pages for.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, sheet "Catalog" (codes 1-172, the
"Resolution Bucket (Immediate Action)" and "(Investigatory Action)" columns), as generated on 2025-10-29 into
leptonai/gpud `components/accelerator/nvidia/xid/catalog_generated.go` (commit 4a8de33, Apache-2.0), from
which `nvidia_xid_catalog.csv` beside this module was converted unchanged but for line breaks.

NVIDIA's immediate resolution decides the action; each action has one runbook section
(docs/runbooks/GpuXid.md, and the alert runbooks GpuXidResetGpu, GpuXidRebootNode, GpuXidContactSupport and
GpuXidInvestigate) and one verdict:

- ``ignore`` (IGNORE; XID 154, which only reports that another XID changed the recovery action; XID 45's
  workflow, a preemptive cleanup that follows another XID): informational, verdict ok.
- ``restart_app`` (RESTART_APP, CHECK_UVM): the application must restart; the GPU stays usable, verdict ok.
  Whether the application caused it is a separate question: NVIDIA's investigatory action says so for some
  (CHECK_APP/CUDA, the XID 13 and 31 workflows) and its "XID Errors" page (r555) lists 43 and 45 as user
  application errors; those are `application` and never count against the hardware. A contained memory
  error (94) restarts the application but is the GPU's fault.
- ``reset_gpu`` (RESET_GPU; XID 48's workflow, a double-bit ECC error: reset, then check row remapping; XID 74's
  NVLink workflow): drain the GPU's node and reset the GPU, verdict failing.
- ``reboot_node`` (RESTART_BM, RESTART_VM: XID 79 fallen off the bus, 151 key rotation): reboot, verdict failing.
- ``contact_support`` (CONTACT_SUPPORT, CHECK_MECHANICALS): hardware service, verdict failing.
- ``investigate`` (the NVLink5 workflow of 144-150, whose fatality needs the intrinfo decode NVIDIA publishes
  separately; UPDATE_SWFW; codes this catalogue version lists without a resolution; codes it does not list):
  verdict degraded until an operator looks.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.resources import files

CATALOG_SOURCE = (
    "NVIDIA Xid Catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), 2025-10-29"
)


class Action(StrEnum):
    IGNORE = "ignore"
    RESTART_APP = "restart_app"
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    CONTACT_SUPPORT = "contact_support"
    INVESTIGATE = "investigate"


VERDICT = {
    Action.IGNORE: "ok",
    Action.RESTART_APP: "ok",
    Action.RESET_GPU: "failing",
    Action.REBOOT_NODE: "failing",
    Action.CONTACT_SUPPORT: "failing",
    Action.INVESTIGATE: "degraded",
}

_ACTION_OF_RESOLUTION = {
    "IGNORE": Action.IGNORE,
    "XID_154": Action.IGNORE,
    "WORKFLOW_XID_45": Action.IGNORE,
    "RESTART_APP": Action.RESTART_APP,
    "CHECK_UVM": Action.RESTART_APP,
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT_NODE,
    "RESTART_VM": Action.REBOOT_NODE,
    "CONTACT_SUPPORT": Action.CONTACT_SUPPORT,
    "CHECK_MECHANICALS": Action.CONTACT_SUPPORT,
    "WORKFLOW_NVLINK5_ERR": Action.INVESTIGATE,
    "UPDATE_SWFW": Action.INVESTIGATE,
    "": Action.INVESTIGATE,
}

APPLICATION_INVESTIGATION = frozenset({"CHECK_APP/CUDA", "WORKFLOW_XID_13", "WORKFLOW_XID_31"})
APPLICATION_ATTRIBUTED = frozenset({43, 45})
"""XIDs whose investigatory action does not name the application but that NVIDIA lists as user-application errors."""


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    description: str
    immediate_resolution: str
    investigatory_resolution: str
    action: Action

    @property
    def verdict(self) -> str:
        return VERDICT[self.action]

    @property
    def application(self) -> bool:
        """The application, not the GPU, caused it: never counted against the hardware."""
        return (
            self.investigatory_resolution in APPLICATION_INVESTIGATION or self.code in APPLICATION_ATTRIBUTED
        )

    @property
    def implicates_hardware(self) -> bool:
        return VERDICT[self.action] == "failing" and not self.application


@cache
def catalog() -> dict[int, Xid]:
    text = files("slurmscope").joinpath("nvidia_xid_catalog.csv").read_text(encoding="utf-8")
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        code = int(row["xid"])
        out[code] = Xid(
            code=code,
            mnemonic=row["mnemonic"],
            description=row["description"],
            immediate_resolution=row["immediate_resolution"],
            investigatory_resolution=row["investigatory_resolution"],
            action=_ACTION_OF_RESOLUTION[row["immediate_resolution"]],
        )
    return out


def lookup(code: int) -> Xid:
    """The catalogue entry, or an `investigate` entry for a code this catalogue version does not list."""
    known = catalog().get(code)
    if known is not None:
        return known
    return Xid(code, "UNKNOWN", "not in the catalogue version this release ships", "", "", Action.INVESTIGATE)


def codes(verdict: str) -> tuple[int, ...]:
    """Catalogued codes with this verdict, ascending: the lists that SQL, Polars and alert rules match on."""
    return tuple(sorted(c for c, x in catalog().items() if x.verdict == verdict))


def application_codes() -> tuple[int, ...]:
    return tuple(sorted(c for c, x in catalog().items() if x.application))


FAILING_ACTIONS = (Action.CONTACT_SUPPORT, Action.REBOOT_NODE, Action.RESET_GPU)
"""The actions that take the GPU out of service, most drastic first: the order the verdict reports them in."""


def action_of(code: int, overrides: Mapping[int, str] | None = None) -> Action:
    """The action for `code`: the operator's override (config health.xid_actions) or NVIDIA's resolution."""
    if overrides and code in overrides:
        return Action(overrides[code])
    return lookup(code).action


def verdict_of(code: int, overrides: Mapping[int, str] | None = None) -> str:
    """ok, degraded or failing; an XID NVIDIA attributes to the application is never failing."""
    v = VERDICT[action_of(code, overrides)]
    return "ok" if v == "failing" and lookup(code).application else v


def actions(overrides: Mapping[int, str] | None = None) -> dict[int, Action]:
    """Every catalogued or overridden code -> its effective action; a code absent here is `investigate`.

    An application XID overridden to a failing action keeps its catalogued action (config rejects that)."""
    out = {c: x.action for c, x in catalog().items()}
    for code, act in (overrides or {}).items():
        act = Action(act)
        if not (VERDICT[act] == "failing" and lookup(code).application):
            out[int(code)] = act
    return out


def codes_of(action: Action | str, overrides: Mapping[int, str] | None = None) -> tuple[int, ...]:
    """Codes whose effective action is `action`, ascending (application XIDs never in a failing action)."""
    return tuple(sorted(c for c, a in actions(overrides).items() if a == action))
