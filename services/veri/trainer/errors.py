"""The trainer's expected failures: each message is one line that says what to do.

`veri train` catches `TRAIN_FAILURES` in one place (trainer/cli.py `_run_train`) and prints
`veri train: <message>`, exit status 1, no traceback. Anything else is a bug and keeps its traceback.

    TRAIN_FAILURES
    ├── TrainerError
    │   ├── JobError                 the job cannot start: flags, services down, it already ran, bad name
    │   ├── ArchiveInUse             another trainer holds the job's archive (archive/writer.py)
    │   ├── StateVolumeFull          the job's folder ran out of disk space (archive/volume.py)
    │   └── WeightSyncError          the policy server's weights are not the trainer's, or a sync timed
    │                                out / was cut off (weights/sync.py, weights/vllm_sync.py)
    ├── HttpCallError                (core/http.py) a call to another service failed
    │   ├── ControlError             the capture proxy's control routes (proxy/control_client.py)
    │   └── PolicyAdminError         the hf policy server's weight routes (weights/policy_admin.py)
    ├── ProblemsError                (core/problems.py) the job config, dataset or reward functions, each
    │                                problem with its fix
    ├── LauncherError                (launcher/errors.py) in-process sandboxes: no docker, no gVisor, no image
    └── StackError                   (rollouts/stack.py) a stack flag missing, a service not reachable

The leaves of the other trees stay where their services raise them; the trainer names them here.
"""

from __future__ import annotations

from veri.core.http import HttpCallError
from veri.core.problems import ProblemsError
from veri.launcher.errors import LauncherError
from veri.rollouts.errors import StackError


class TrainerError(RuntimeError):
    """An expected failure of a training job; the message says what to do."""


class JobError(TrainerError):
    """The job cannot start; the message says what to do."""


class ArchiveInUse(TrainerError):
    """Another process (or another JobArchive in this one) is writing the same job archive."""


class StateVolumeFull(TrainerError):
    """The volume of the job's folder filled up: the job stopped (job.json says so); free space, then resume."""


class WeightSyncError(TrainerError):
    """The policy server's weights are not the ones the trainer pushed (another writer, a version mismatch),
    or a sync did not finish: a server that timed out, died mid-call or failed its reload (named, with the fix)."""


TRAIN_FAILURES: tuple[type[Exception], ...] = (TrainerError, HttpCallError, ProblemsError, LauncherError,
                                               StackError)
