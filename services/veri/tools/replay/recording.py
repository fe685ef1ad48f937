"""The recording file: one rollout's requests as sent, its spans, episode and reward (JSON lines).

A Harbor task's rollout also keeps its verifier's result (`verifier`): a replay judges the episode with it
(the verifier_* rules) and scores the reward from it (the built-in `verifier` reward, and the `verifier`
input of the job's own functions). The task's tests are not run again: the replay checks what veri makes
of their recorded result, not the tests. A recording without one (made before Harbor tasks) replays as it did.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from veri.core.config import VERIFIER_REWARD, RewardConfig
from veri.core.episodes import Episode, RolloutStatus, build_episode
from veri.core.records import CaptureConfig, RecordedRequest, Span
from veri.core.rollout_record import RewardOutcome, VerifierRecord
from veri.services.proxy.control_client import ControlClient

FORMAT = "veri-replay/1"
REWARD_TIMEOUT_S = 30.0


class RecordingError(Exception):
    """A recording cannot be made or read; the message names the fix."""


class Recording(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["veri-replay/1"] = FORMAT
    name: str = Field(description="what was recorded, e.g. the harness bundle")
    note: str = ""
    capture: CaptureConfig
    requests: list[RecordedRequest]
    spans: list[Span]
    status: RolloutStatus = RolloutStatus.COMPLETED
    exit_code: int | None = None
    episode: Episode
    task: dict[str, Any] | None = Field(default=None, description="the dataset row the rewards read")
    rewards: list[RewardConfig] = Field(default_factory=list, description="the reward functions, inline source")
    outputs: dict[str, str] = Field(default_factory=dict, description="the harness's output files the rewards read")
    reward: RewardOutcome | None = None
    verifier: VerifierRecord | None = Field(
        default=None, description="a Harbor task's verifier result (the record's): the episode's verifier_* rules"
        " and the `verifier` reward come from it; the tests are not run again")

    def save(self, path: Path) -> None:
        """JSON lines: the header, then one line per request, per span, and the episode, so a
        re-recording's git diff names the lines that changed."""
        data = self.model_dump(mode="json")
        lines = [{key: value for key, value in data.items() if key not in _LINES}]
        lines += [{"request": request} for request in data["requests"]]
        lines += [{"span": span} for span in data["spans"]]
        lines.append({"episode": data["episode"]})
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        temporary.replace(path)

    @classmethod
    def load(cls, path: Path) -> Recording:
        try:
            header, *rest = (orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip())
            data = {**header, "requests": [line["request"] for line in rest if "request" in line],
                    "spans": [line["span"] for line in rest if "span" in line],
                    "episode": next((line["episode"] for line in rest if "episode" in line), None)}
            return cls.model_validate(data)
        except FileNotFoundError:
            raise RecordingError(f"no recording at {path}: make one with `veri replay record`") from None
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            raise RecordingError(f"{path} is not a {FORMAT} recording ({_first_problem(exc)}); re-record it with"
                                 " `veri replay record`") from None


_LINES = {"requests", "spans", "episode"}  # a line each; the rest is the header line


def _first_problem(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def episode_of(spans: list[Span], status: RolloutStatus, exit_code: int | None,
               verifier: VerifierRecord | None = None) -> Episode:
    """The episode the trainer builds from these spans (with a Harbor task's verifier verdict, if any)."""
    return build_episode(spans, status, exit_code=exit_code, verifier=verifier.result() if verifier else None)


@contextmanager
def outputs_folder(outputs: dict[str, str]) -> Iterator[Path | None]:
    """The recorded output files in a temporary folder, as the rewards read them (None: none recorded)."""
    if not outputs:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="veri-replay-outputs-") as folder:
        for name, text in outputs.items():
            (Path(folder) / name).write_text(text)
        yield Path(folder)


def score(recording: Recording, spans: list[Span], episode: Episode) -> RewardOutcome | None:
    """The recording's reward functions on these spans (None when it has no functions, or neither a task
    nor a verifier result for them to read). A verifier's reward is its recorded result's."""
    if not recording.rewards or (recording.task is None and recording.verifier is None):
        return None
    from veri.loop.rewards.functions import RewardInputs
    from veri.loop.rewards.loading import load_reward_functions
    from veri.loop.rewards.scoring import RewardScorer

    task = recording.task or {}
    # The dataset's columns check a job's functions before it starts; a recording's verifier result is what
    # the built-in verifier reward needs (whatever row came with it).
    columns = None if recording.verifier is not None else [key for key in task if key != "prompt"]
    functions = load_reward_functions(recording.rewards, columns)
    ids = episode.row.completion_ids if episode.row is not None else None
    with outputs_folder(recording.outputs) as outputs, RewardScorer(functions, REWARD_TIMEOUT_S) as scorer:
        inputs = RewardInputs.from_spans(task, spans, ids, outputs=outputs)
        inputs.verifier = recording.verifier.scores() if recording.verifier is not None else None
        return scorer.score(inputs)


def rewards_for(rewards: list[RewardConfig], verifier: VerifierRecord | None) -> list[RewardConfig]:
    """The functions a recording scores with: a Harbor rollout with none named gets the built-in verifier
    reward, as a job on a `harbor:` dataset without `rewards:` does."""
    builtin = any(reward.builtin == VERIFIER_REWARD for reward in rewards)
    if builtin and verifier is None:
        raise RecordingError("the built-in verifier reward scores a Harbor task's rollout from its verifier's"
                             " result: pass the rollout's record (--record rollout-K.json) or --verifier FILE")
    if not rewards and verifier is not None:
        return [RewardConfig(builtin=VERIFIER_REWARD)]
    return rewards


def inline_rewards(rewards: list[RewardConfig]) -> list[RewardConfig]:
    """Reward functions with their source inline, so a recording replays without the files."""
    inlined = []
    for reward in rewards:
        if reward.file is not None:
            if not reward.file.is_file():
                raise RecordingError(f"reward file {reward.file} not found: pass an existing file to --reward")
            reward = reward.model_copy(update={"file": None, "source": reward.file.read_text()})
        inlined.append(reward)
    return inlined


def read_outputs(folder: Path | None, limit_bytes: int = 64 * 1024) -> dict[str, str]:
    """The harness's small text output files (the rewards' `outputs`), by name."""
    if folder is None:
        return {}
    if not folder.is_dir():
        raise RecordingError(f"outputs folder {folder} not found: pass the rollout's VERI_OUTPUT_DIR to --outputs")
    found = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.stat().st_size <= limit_bytes:
            try:
                found[path.name] = path.read_text()
            except UnicodeDecodeError:
                continue  # a binary output: no reward of a recording reads it
    return found


def record_rollout(
    control: ControlClient, rollout_id: str, *, name: str, note: str = "", task: dict[str, Any] | None = None,
    rewards: list[RewardConfig] | None = None, outputs: Path | None = None,
    status: RolloutStatus = RolloutStatus.COMPLETED, exit_code: int | None = None,
    verifier: VerifierRecord | None = None,
) -> Recording:
    """A recording of one finished rollout of a proxy that recorded its requests (`verifier`: a Harbor
    task's verifier result, from its record)."""
    rewards = rewards_for(rewards or [], verifier)
    requests = control.recorded_requests(rollout_id)
    if not requests:
        raise RecordingError(f"the proxy kept no requests of rollout {rollout_id!r}: open its session with"
                             " record_requests (ControlClient.open_session(record_requests=True)) or run the proxy"
                             " with --record-requests, then run the harness again")
    unanswered = [request.seq for request in requests if request.status is None]
    if unanswered:
        raise RecordingError(f"requests {unanswered} of rollout {rollout_id!r} have no answer yet: record it once"
                             " the harness has finished")
    spans = control.spans(rollout_id)
    episode = episode_of(spans, status, exit_code, verifier)
    recording = Recording(
        name=name, note=note, capture=control.capture_config(), requests=requests, spans=spans, status=status,
        exit_code=exit_code, episode=episode, task=task, rewards=inline_rewards(rewards),
        outputs=read_outputs(outputs), verifier=verifier,
    )
    recording.reward = score(recording, spans, episode)
    return recording
