"""What each container of the stack may hold beyond compose.yaml's x-least, each exception with its
reason, and the check of one container's `docker inspect` against it. docs/security.md says the same
for people; test_privileges.py (the session stack) and test_train_vllm.py (the vLLM servers) check it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.stack.conftest import REPO

TASKS_BUILD = str((REPO / "build" / "tasks").resolve())  # VERI_TASKS_BUILD as scripts/stack/compose_files.sh sets it
RO = "ro"  # a read-only mount; any other value is why the mount is writable
TMP = {"/tmp": "tmpfs: gunicorn's worker files, prometheus's multiprocess folder, the libraries' caches (HOME)"}
# exec: not docker's noexec default, for code written there
TMP_EXEC = {"/tmp:exec": "the same, and the kernels torch (vLLM, GRPO's torch_compile) and triton compile and load"}
EGRESS_GATEWAY = "egress gateway"  # not a compose service: the launcher starts it (services/launcher/docker_egress.py)


@dataclass(frozen=True)
class Holds:
    mounts: dict[str, str]  # destination -> RO, or why it is writable
    user: tuple[str, str] | None = None  # (uid:gid, why) where not x-least's
    capabilities: dict[str, str] = field(default_factory=dict)  # added ones (all others dropped), each with why
    tmpfs: dict[str, str] = field(default_factory=lambda: dict(TMP))  # target[:exec] -> why


ALLOWED = {
    "policy": Holds({"/models": RO, "/state/jobs": RO}, tmpfs=TMP_EXEC),  # jobs/: the weights the trainer syncs
    "proxy": Holds({"/models": RO, "/state/spans": "the span store: every model call it records"}),
    "launcher": Holds(
        {"/host/run": RO, "/state/outputs": "each sandbox's output folder, made before and taken back after",
         TASKS_BUILD: RO},  # Harbor tasks' staged tests and mounted trees, at the host's path (tools/tasks/stage.py)
        user=("0:0", "docker gives added capabilities to uid 0 only; it holds the docker socket, root on the "
                     "host whatever its uid"),
        capabilities={"CAP_CHOWN": "an output folder to the sandbox user, then back to the services' user",
                      "CAP_FOWNER": "the modes a harness left, so the trainer reads every file",
                      "CAP_DAC_OVERRIDE": "to cap and remove what a harness wrote, whatever its modes"}),
    "webfixture": Holds({}),
    "console": Holds({"/work": RO, "/models": RO, "/state/jobs": RO}),
    "trainer": Holds({"/work": RO, "/models": RO, "/state/outputs": RO, "/state/configs": RO,
                      "/state/jobs": "the job folders: archive, checkpoints, the weights the policy loads"},
                     tmpfs=TMP_EXEC),
    EGRESS_GATEWAY: Holds({}, user=("65534:65534", "nobody: it holds no folder, not even veri's"), tmpfs={}),
}


def least_user() -> str:
    """compose.yaml's x-least user: the one declaration of veri's services' uid:gid."""
    return str(yaml.safe_load((REPO / "compose.yaml").read_text())["x-least"]["user"])


def service_of(container: dict[str, Any]) -> str:
    """The allowlist entry of an inspected container: its compose service (policy-1 is a policy)."""
    labels = container["Config"]["Labels"] or {}
    if "veri.egress-gateway" in labels:
        return EGRESS_GATEWAY
    service = labels.get("com.docker.compose.service", "")
    return "policy" if service.startswith("policy-") else service


def violations(container: dict[str, Any], state: Path) -> list[str]:
    """What `container` (one `docker inspect` object) holds that its allowlist entry does not allow."""
    service = service_of(container)
    holds = ALLOWED.get(service)
    if holds is None:
        return [f"{service or container['Name'].lstrip('/')}: not on the allowlist (tests/stack/privileges.py)"]
    config, host = container["Config"], container["HostConfig"]
    found = []
    user = holds.user[0] if holds.user else least_user()
    if config.get("User") != user:
        found.append(f"runs as {config.get('User') or 'root (the image default)'!r}, not {user!r}")
    if host.get("Privileged"):
        found.append("privileged")
    if [cap.upper() for cap in host.get("CapDrop") or []] != ["ALL"]:
        found.append(f"drops {host.get('CapDrop')}, not [ALL]")
    for cap in host.get("CapAdd") or []:
        name = cap.upper() if cap.upper().startswith("CAP_") else f"CAP_{cap.upper()}"
        if name not in holds.capabilities:
            found.append(f"adds capability {name}")
    if not {"no-new-privileges", "no-new-privileges:true"} & set(host.get("SecurityOpt") or []):
        found.append("may gain privileges (no no-new-privileges)")
    if not host.get("ReadonlyRootfs"):
        found.append("a writable root file system")
    tmpfs = {target + (":exec" if "exec" in options.split(",") else "")
             for target, options in (host.get("Tmpfs") or {}).items()}
    for mount in container.get("Mounts") or []:
        target = mount["Destination"]
        if mount["Type"] == "tmpfs":
            tmpfs.add(target)  # a compose volume of type tmpfs (compose.kubernetes.yaml's /host/run): noexec
            continue
        if target not in holds.mounts:
            found.append(f"mounts {mount.get('Source')} at {target}")
        elif mount["RW"] and holds.mounts[target] == RO:
            found.append(f"{target} is writable")
        inside = Path(target)
        if inside.is_relative_to("/state") and Path(mount["Source"]) != state / inside.relative_to("/state"):
            found.append(f"{target} is {mount['Source']}, not that sub-folder of the state folder {state}")
    found += [f"a tmpfs at {target}" for target in sorted(tmpfs - set(holds.tmpfs))]
    return [f"{service} ({container['Name'].lstrip('/')}): {problem}" for problem in found]


def inspect_running(*filters: str) -> list[dict[str, Any]]:
    """`docker inspect` of the running containers that match every `docker ps --filter` given."""
    ids = subprocess.run(["docker", "ps", "-q", *[f"--filter={f}" for f in filters]], capture_output=True,
                         text=True, check=True).stdout.split()
    if not ids:
        return []
    return json.loads(subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True).stdout)
