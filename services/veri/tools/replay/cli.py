"""`veri replay record | run | policy` (see veri/replay/__init__.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from veri.core import envs


def register(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser("replay", help="record a rollout's traffic; replay it and diff spans, masks, reward")
    actions = replay.add_subparsers(dest="action", required=True, metavar="ACTION")

    record = actions.add_parser("record", help="write one recording of a finished rollout of a recording proxy")
    record.add_argument("--proxy", required=True, help="proxy base URL, e.g. http://127.0.0.1:8000")
    record.add_argument("--token", default=os.environ.get(envs.VERI_CONTROL_TOKEN), help="control token")
    record.add_argument("--rollout", default=None, metavar="ID",
                        help="the rollout (its session recorded requests); default: --record's")
    record.add_argument("--out", required=True, type=Path, metavar="FILE", help="the recording (JSON)")
    record.add_argument("--name", default=None, help="what was recorded, e.g. the bundle (default: the file's stem)")
    record.add_argument("--note", default="", help="a line for whoever re-records it")
    record.add_argument("--record", type=Path, metavar="JSON",
                        help="the rollout's record (`veri run-harness --out`'s task-M/rollout-K.json, or a job"
                             " archive's): its task, status, exit code and, for a Harbor task, its verifier's result,"
                             " unless --task, --status, --exit-code or --verifier say otherwise")
    record.add_argument("--task", type=Path, metavar="JSON", help="the dataset row (a JSON file) the rewards read")
    record.add_argument("--verifier", type=Path, metavar="JSON",
                        help="a Harbor task's verifier result (a record's `verifier`, JSON): kept in the recording,"
                             " so a replay judges and scores the rollout with it (the tests are not run again)")
    record.add_argument("--reward", action="append", default=[], metavar="FILE",
                        help="a reward file (its `reward` function, or its only one), or `verifier`: the built-in"
                             " verifier reward (the default with a verifier result and no --reward); repeat for"
                             " several")
    record.add_argument("--outputs", type=Path, metavar="DIR", help="the rollout's output folder the rewards read")
    record.add_argument("--status", default=None, choices=["completed", "failed", "truncated"],
                        help="how the harness ended (default: --record's, else completed)")
    record.add_argument("--exit-code", type=int, default=None,
                        help="the harness's exit status (default: --record's, else unknown)")
    record.set_defaults(func=_record)

    run = actions.add_parser("run", help="replay recordings and diff their spans, episodes and rewards; exit 1 on any"
                                         " difference. A Harbor task's recording is judged and scored with the"
                                         " verifier result it keeps: its tests are not run again")
    run.add_argument("recordings", type=Path, nargs="+", metavar="FILE",
                     help="recordings (`veri replay record --out`) to replay")
    run.add_argument("--proxy", default=None, help="replay through this proxy (its policy: `veri replay policy"
                                                   " FILE`, so one FILE); default: an in-process proxy on --model")
    run.add_argument("--token", default=os.environ.get(envs.VERI_CONTROL_TOKEN), help="the proxy's control token")
    run.add_argument("--model", type=Path, default=Path("build/models/tiny"),
                     help="model folder of the in-process proxy: the one the recording was made with"
                          " (default: %(default)s)")
    run.set_defaults(func=_run)

    serve = actions.add_parser("policy", help="a policy server that answers with a recording's completions")
    serve.add_argument("recording", type=Path, metavar="FILE", help="the recording (`veri replay record --out`)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument("--port", type=int, default=8100, help="the port to listen on")
    serve.set_defaults(func=_policy)


def _record(args: argparse.Namespace) -> int:
    from veri.core.episodes import RolloutStatus
    from veri.services.proxy.control_client import ControlClient, ControlError
    from veri.tools.replay.recording import RecordingError, record_rollout
    from veri.tools.replay.sources import read_rollout_record, read_verifier, reward_configs

    try:
        made = read_rollout_record(args.record) if args.record else None
        rollout = args.rollout or (made.rollout_id if made else None)
        if rollout is None:
            raise RecordingError("name the rollout: --rollout ID, or --record with its record")
        if made is not None and made.rollout_id != rollout:
            raise RecordingError(f"{args.record} is the record of rollout {made.rollout_id!r}, not {rollout!r}:"
                                 " drop --rollout, or pass that rollout's record")
        task = json.loads(args.task.read_text()) if args.task else (made.task if made else None)
        verifier = read_verifier(args.verifier) if args.verifier else (made.verifier if made else None)
        status = RolloutStatus(args.status) if args.status else (made.status if made else RolloutStatus.COMPLETED)
        exit_code = args.exit_code if args.exit_code is not None else (made.exit_code if made else None)
        recording = record_rollout(
            ControlClient(args.proxy, token=args.token), rollout, name=args.name or args.out.stem,
            note=args.note, task=task, rewards=reward_configs(args.reward), outputs=args.outputs, status=status,
            exit_code=exit_code, verifier=verifier,
        )
    except (ControlError, RecordingError, OSError, ValueError) as error:
        print(f"veri replay record: {error}", file=sys.stderr)
        return 1
    recording.save(args.out)
    reward = recording.reward.reward if recording.reward else None
    kept = f"; verifier result kept ({recording.verifier.line()})" if recording.verifier else ""
    print(f"{args.out}: {len(recording.requests)} requests, {len(recording.spans)} spans, reward {reward}{kept}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.proxy and len(args.recordings) > 1:
        print("veri replay run: --proxy replays one FILE (its policy, `veri replay policy FILE`, serves one"
              " recording); without --proxy each FILE gets its own in-process proxy", file=sys.stderr)
        return 2
    _quiet_proxy_log()
    failed = [path for path in args.recordings if not _replay_one(path, args)]
    if failed:
        print("if the change is intended, re-record (`veri replay record`; tests/replay/README.md)")
    return 1 if failed else 0


def _replay_one(path: Path, args: argparse.Namespace) -> bool:
    """Replay one recording and print what differs; True when nothing does."""
    from veri.services.proxy.control_client import ControlError
    from veri.tools.replay.diff import differences
    from veri.tools.replay.recording import Recording, RecordingError
    from veri.tools.replay.runner import replay_in_process, replay_through

    try:
        recording = Recording.load(path)
        if args.proxy:
            replay = replay_through(recording, args.proxy, token=args.token)
            decoder = None
        else:
            replay = replay_in_process(recording, args.model)
            decoder = _decoder(args.model)
    except (ControlError, RecordingError) as error:
        print(f"veri replay run: {error}", file=sys.stderr)
        return False
    found = differences(recording, replay, decoder)
    summary = f"{path}: {len(recording.requests)} requests, {len(replay.spans)} spans"
    if not found:
        print(f"{summary}: identical to the recording")
        return True
    print(f"{summary}: {len(found)} differences from the recording")
    for line in found:
        print(f"  {line}")
    return False


def _quiet_proxy_log() -> None:
    """The in-process proxy's info lines (ready, refused) are not what a person running a replay reads."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _decoder(model: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def _policy(args: argparse.Namespace) -> int:
    import uvicorn

    from veri.tools.replay.policy import create_app
    from veri.tools.replay.recording import Recording, RecordingError

    try:
        recording = Recording.load(args.recording)
    except RecordingError as error:
        print(f"veri replay policy: {error}", file=sys.stderr)
        return 1
    uvicorn.run(create_app(recording), host=args.host, port=args.port, log_level="warning")
    return 0
