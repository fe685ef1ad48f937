"""The launcher's expected failures: each message is one line with its fix.

    LauncherError
    ├── SandboxUnavailable      sandboxes cannot run here: no Docker daemon, no runsc (gVisor),
    │                           no rollouts network; `veri serve launcher` refuses to start
    ├── ImageProblem            one rollout's image is missing or has no CMD; that rollout fails
    ├── EgressProblem           a bundle's egress cannot be set up (its network missing, the gateway
    │                           not starting); that rollout fails
    └── DockerdAway             dockerd did not answer for longer than the backend waits it out;
                                that rollout fails (an infrastructure failure, never scored)

`veri serve launcher` (services/launcher/cli.py) catches `LauncherError` once and prints
`veri serve launcher: <message>`, exit status 1; the trainer's in-process sandboxes report it the same
way (veri.services.trainer.errors). A broken harness is never an error here: it is a rollout status.
"""

from __future__ import annotations


class LauncherError(RuntimeError):
    """An expected launcher failure; the message says what to do."""


class SandboxUnavailable(LauncherError):
    """Docker / gVisor cannot run sandboxes here; the message names the fix."""


class ImageProblem(LauncherError):
    """A rollout's image is missing or unusable; the message names the fix."""


class EgressProblem(LauncherError):
    """A rollout's egress cannot be enforced here (docker backend); the message names the fix."""


class DockerdAway(LauncherError):
    """dockerd stayed unreachable past the docker backend's grace; the message says how long."""


def task_env_refused(backend: str) -> str:
    """Why a backend without sandboxes (local) refuses a Harbor task's launch (its `task_env`), with the fix."""
    return (f"a Harbor task (a launch with task_env) runs on the docker and kubernetes backends: its verifier needs "
            f"an exec into the task's running sandbox, which the {backend} backend does not have; run the job "
            "with the docker launcher (`veri serve launcher --backend docker`, the default; unset "
            "VERI_LAUNCHER_BACKEND for `make up`) or the kubernetes one")

