"""The trainer's expected failures: each message is one line that says what to do.

`veri train` catches `TRAIN_FAILURES` in one place (services/trainer/cli.py `_run_train`) and prints
`veri train: <message>`, exit status 1, no traceback. Anything else is a bug and keeps its traceback.

    TRAIN_FAILURES
    ├── TrainerError
    │   └── WeightSyncError          the policy server's weights are not the trainer's, or a sync timed
    │                                out / was cut off (weights/sync.py, weights/vllm_sync.py)
    ├── ArchiveError                 (archive/errors.py)
    │   ├── JobError                 the job cannot start: flags, services down, it already ran, bad name
    │   ├── ArchiveInUse             another trainer holds the job's archive (archive/writer.py)
    │   └── StateVolumeFull          the job's folder ran out of disk space (archive/volume.py)
    ├── HttpCallError                (infra/http.py) a call to another service failed
    │   ├── ControlError             the capture proxy's control routes (services/proxy/control_client.py)
    │   └── PolicyAdminError         the hf policy server's weight routes (services/policy/hf/admin_client.py)
    ├── ProblemsError                (core/problems.py) the job config, dataset or reward functions, each
    │                                problem with its fix
    ├── LauncherError                (services/launcher/errors.py) in-process sandboxes: no docker, no gVisor, no image
    └── StackError                   (loop/collect/stack.py) a stack flag missing, a service not reachable

The leaves of the other trees stay where their services raise them; the trainer names them here.
"""

from __future__ import annotations

from veri.archive.errors import ArchiveError, ArchiveInUse, JobError, StateVolumeFull
from veri.core.problems import ProblemsError
from veri.infra.http import HttpCallError
from veri.loop.collect.errors import StackError
from veri.services.launcher.errors import LauncherError


class TrainerError(RuntimeError):
    """An expected failure of a training job; the message says what to do."""


class WeightSyncError(TrainerError):
    """The policy server's weights are not the ones the trainer pushed (another writer, a version mismatch),
    or a sync did not finish: a server that timed out, died mid-call or failed its reload (named, with the fix)."""


TRAIN_FAILURES: tuple[type[Exception], ...] = (TrainerError, ArchiveError, HttpCallError, ProblemsError, LauncherError,
                                               StackError)

__all__ = ["TRAIN_FAILURES", "ArchiveInUse", "JobError", "StateVolumeFull", "TrainerError", "WeightSyncError"]
