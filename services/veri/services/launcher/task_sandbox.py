"""A Harbor task's sandbox (docker backend): how it is made and how the agent's turn runs in it.
docs/security.md, "Harbor tasks", says why each part is there; docs/design/harbor-tasks.md §3.2 the
experiments behind it.

The container: runsc, the task's image with its ENTRYPOINT kept and `sleep infinity` as its command,
root with every capability dropped and no-new-privileges, docker-made tmpfs mount points /tests,
/logs/verifier and /veri/verify (empty, read-only: the agent cannot write, rename or unmount them)
and /logs (writable), read-only binds of the bundle's runtime tree (/veri/rt) and the verifier tools
(/veri/tools) when given, VERI_OUTPUT_DIR bound from the host as for any rollout.

The agent's turn is ONE privileged exec: it unpacks the oracle's solution (from its stdin) as root,
prints its pid, then becomes `unshare --pid --fork --kill-child --mount --mount-proc` + `setpriv`
dropping every capability (and switching to the agent user): the agent's processes live in a PID
namespace of their own and see nothing of the verifier's. That namespace's PID 1 runs the harness (or
solve.sh, or nothing), prints its exit status and stays, so what the agent left keeps running. Past the
timeout the exec's first process is killed, and with it (--kill-child) the whole namespace.
"""

from __future__ import annotations

from typing import Any

from veri.core import egress
from veri.core.launch import SandboxLimits, TaskEnvironment
from veri.services.launcher.verifier import (
    RUNTIME_MOUNT,
    SCRATCH_MOUNT,
    SYSTEM_PATH,
    TESTS_MOUNT,
    TOOLS_MOUNT,
    VERIFIER_LOGS,
)

LOGS_ROOT = "/logs"
AGENT_LOGS = "/logs/agent"  # the harness's stdout and stderr (the agent's own: only log tails come from here)
SOLUTION_MOUNT = "/solution"
EMPTY_READ_ONLY = "tmpfs-size=4096"

# The exec's first process (root, every capability, the container's first PID namespace). $1 the inner
# script, $2 nonce, $3 agent user ("": root), $4 kind, $5 workdir; then the command. It prints its pid (the one to kill
# on timeout), prepares /logs/agent and /solution, and becomes the agent's namespace.
OUTER = r"""
inner=$1 N=$2 AUSER=$3 KIND=$4 WORKDIR=$5; shift 5
echo "==veri:$N:pid== $$"
mkdir -p /logs/agent && touch /logs/agent/stdout /logs/agent/stderr || { echo "==veri:$N:error== /logs/agent"; exit 0; }
if [ "$KIND" = oracle ]; then
  rm -rf /solution && mkdir -p /solution && tar -x -C /solution \
    || { echo "==veri:$N:error== the solution could not be unpacked"; exit 0; }
  chmod -R a+rX /solution; find /solution -type f -name '*.sh' -exec chmod a+x {} +
fi
ids=""
if [ -n "$AUSER" ] && [ "$AUSER" != root ] && [ "$AUSER" != 0 ]; then
  G=$(id -g "$AUSER") || { echo "==veri:$N:error== the agent user $AUSER is not in the image"; exit 0; }
  chown -R "$AUSER" /logs/agent && { [ "$KIND" != oracle ] || chown -R "$AUSER" /solution; } \
    || { echo "==veri:$N:error== could not chown to $AUSER"; exit 0; }
  ids="--reuid=$AUSER --regid=$G --init-groups"
fi
# shellcheck disable=SC2086
exec unshare --pid --fork --kill-child=KILL --mount --mount-proc --propagation private \
  setpriv --bounding-set=-all --inh-caps=-all --no-new-privs $ids sh -c "$inner" veri-agent "$N" "$KIND" "$WORKDIR" "$@"
"""

# PID 1 of the agent's namespace: no capabilities, the agent's user. $1 nonce, $2 kind, $3 workdir; then
# the command.
INNER = r"""
N=$1 KIND=$2; cd "$3" 2>/dev/null || cd /
shift 3
if [ "$KIND" = nop ]; then status=0
else "$@" </dev/null >>/logs/agent/stdout 2>>/logs/agent/stderr; status=$?
fi
echo "==veri:$N:exit== $status"
exec sleep infinity
"""


def agent_command(task: TaskEnvironment, nonce: str, workdir: str, user: str | None) -> list[str]:
    """The agent exec's command (privileged, root; the oracle's solution tar on its stdin). `user`: the
    agent's (None: root)."""
    run = {"harness": list(task.harness_command), "oracle": ["bash", f"{SOLUTION_MOUNT}/solve.sh"], "nop": []}
    return ["sh", "-c", OUTER, "veri-agent-init", INNER, nonce, user or "", task.agent, workdir, *run[task.agent]]


def agent_env(task: TaskEnvironment, contract: dict[str, str], image_path: str | None) -> dict[str, str]:
    """The agent exec's variables (beside the container's: the image's and the task's [environment.env]):
    the harness contract, PATH with veri's runtime last, and the oracle's [solution] env."""
    env = dict(contract)
    path = task.env.get("PATH") or image_path or SYSTEM_PATH
    if task.runtime_tree:
        env["PATH"] = f"{path}:{RUNTIME_MOUNT}/bin"
    if task.agent == "oracle":
        env.update({"DEBIAN_FRONTEND": "noninteractive", **task.solution_env})
    return env


def kill_command(pid: int) -> list[str]:
    """Kills the agent exec's first process; --kill-child takes the agent's whole namespace with it."""
    return ["kill", "-KILL", str(pid)]


def mounts(task: TaskEnvironment) -> list[dict[str, Any]]:
    """The docker-made mount points (docker.types.Mount's arguments) besides VERI_OUTPUT_DIR."""
    found: list[dict[str, Any]] = [
        {"target": TESTS_MOUNT, "source": None, "type": "tmpfs", "read_only": True, "tmpfs_size": 4096},
        {"target": LOGS_ROOT, "source": None, "type": "tmpfs", "tmpfs_size": 256 << 20, "tmpfs_mode": 0o755},
        {"target": VERIFIER_LOGS, "source": None, "type": "tmpfs", "read_only": True, "tmpfs_size": 4096},
        {"target": SCRATCH_MOUNT, "source": None, "type": "tmpfs", "read_only": True, "tmpfs_size": 4096},
    ]
    if task.runtime_tree:
        found.append({"target": RUNTIME_MOUNT, "source": task.runtime_tree, "type": "bind", "read_only": True})
    if task.tools_dir:
        found.append({"target": TOOLS_MOUNT, "source": task.tools_dir, "type": "bind", "read_only": True})
    return found


def resources(task: TaskEnvironment, limits: SandboxLimits) -> SandboxLimits:
    """The launch's limits with the task's cpus and memory_mb where it names them."""
    update: dict[str, Any] = {}
    if task.cpus is not None:
        update["cpus"] = task.cpus
    if task.memory_mb is not None:
        update["memory_mb"] = task.memory_mb
    return limits.model_copy(update=update)


def agent_timeout(task: TaskEnvironment, launch_timeout_s: float) -> float:
    """The task's [agent] timeout_sec, capped by the job's harness timeout."""
    return min(task.agent_timeout_s, launch_timeout_s) if task.agent_timeout_s else launch_timeout_s


def stricter(bundle: egress.Egress, task: egress.Egress) -> egress.Egress:
    """The stricter of the bundle's egress and the task's network ask: none beats a host list beats open;
    two host lists meet (the task's entries the bundle's list allows)."""
    kinds = (egress.mode(bundle), egress.mode(task))
    if "none" in kinds:
        return egress.EGRESS_NONE
    if kinds == ("open", "open"):
        return egress.EGRESS_OPEN
    if kinds[0] == "open":
        return task
    if kinds[1] == "open":
        return bundle
    assert isinstance(bundle, list) and isinstance(task, list)
    both = sorted(entry for entry in task if _covered(entry, bundle))
    return both or egress.EGRESS_NONE


def _covered(entry: str, allowed: list[str]) -> bool:
    """Whether every host:port that `entry` names is allowed by `allowed` (a port-less entry of the
    bundle allows every port; a bundle entry with a port only that port)."""
    match = egress.HOST_ENTRY.fullmatch(entry)
    if match is None:
        return False
    host, port = match["host"], match["port"]
    for other in allowed:
        found = egress.HOST_ENTRY.fullmatch(other)
        if found is None or (found["port"] and found["port"] != port):
            continue
        wanted = found["host"]
        if wanted == host or (wanted.startswith("*.") and host.endswith(wanted[1:])):
            return True
    return False
