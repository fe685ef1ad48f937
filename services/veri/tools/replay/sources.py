"""What `veri replay record` reads besides the proxy: a rollout record veri wrote (its task, verifier result,
status), a verifier result alone, and the reward options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from veri.core.config import VERIFIER_REWARD, RewardConfig
from veri.core.launch import VerifierResult
from veri.core.rollout_record import RolloutRecord, VerifierRecord
from veri.tools.replay.recording import RecordingError

RECORD_HELP = "`veri run-harness --out`'s task-M/rollout-K.json, or a job archive's rollout-K.json"


def read_rollout_record(path: Path) -> RolloutRecord:
    """One rollout record (RolloutRecord JSON) veri wrote."""
    try:
        return RolloutRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise RecordingError(f"no rollout record at {path}: pass {RECORD_HELP}") from None
    except ValidationError as error:
        raise RecordingError(f"{path} is not one rollout record ({_first(error)}): pass {RECORD_HELP}") from None


def read_verifier(path: Path) -> VerifierRecord:
    """A verifier's result from JSON: a record's `verifier`, the launcher's VerifierResult (its files' texts are
    dropped, as the record drops them), or a whole rollout record's."""
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordingError(f"no verifier result at {path}: pass a rollout record's `verifier` (JSON)") from None
    except ValueError as error:
        raise RecordingError(f"{path} is not JSON ({error}): pass a rollout record's `verifier`") from None
    if isinstance(data, dict) and "episode" in data:  # a whole record
        data = data.get("verifier")
        if data is None:
            raise RecordingError(f"{path} is the record of a rollout with no verifier (not a Harbor task's)")
    try:
        if isinstance(data, dict) and isinstance(data.get("files"), dict):
            return VerifierRecord.of(VerifierResult.model_validate(data))
        return VerifierRecord.model_validate(data)
    except ValidationError as error:
        raise RecordingError(f"{path} is not a verifier result ({_first(error)}): pass a rollout record's"
                             " `verifier` (its fields: error, message, exit_code, reward, rewards, ...)") from None


def reward_configs(values: list[str]) -> list[RewardConfig]:
    """--reward values: a Python file, or `verifier` (the built-in verifier reward: the file ./verifier is
    named with its folder)."""
    return [RewardConfig(builtin=VERIFIER_REWARD) if value == VERIFIER_REWARD else RewardConfig(file=Path(value))
            for value in values]


def _first(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc']) or 'the file'}: {first['msg']}"
