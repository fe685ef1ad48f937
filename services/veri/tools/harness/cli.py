"""A user's harness, before any training: `veri harness build DIR` (and `make harness BUNDLE=DIR`) builds a
bundle's image, `veri run-harness` runs it N times against the current policy, `veri debug FILE...`
explains which episode rule fired for each rollout, span by span."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from veri.core import envs
from veri.core.config import JobConfig

if TYPE_CHECKING:
    from veri.core.episodes import Decoder


def register(commands: argparse._SubParsersAction) -> None:
    harness = commands.add_parser("harness", help="harness bundles: build and push their images")
    actions = harness.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build", help="build a bundle's image (deps installed now, never per rollout); prints its tag",
        description="Build the image of a harness bundle (a folder with veri-harness.toml). The tag is "
                    "<prefix>/harness-<name>:<content hash>; an unchanged bundle is not rebuilt. Deps are "
                    "installed offline from vendor/ (downloaded there first when this machine is online).",
    )
    build.add_argument("bundle", type=Path, help="the bundle folder")
    build.add_argument("--prefix", default="veri", help="image name prefix (default: veri)")
    build.add_argument("--vendor", type=Path, default=None, help="vendor folder (default: this checkout's vendor/)")
    build.add_argument("--offline", action="store_true", help="never download deps; use vendor/ only")
    build.set_defaults(func=_build)
    push = actions.add_parser(
        "push", help="tag a bundle's image as R/<image> and push it to registry R (clusters pull from it)",
        description="Build the bundle's image (or take an image already on this machine), tag it "
                    "<registry>/<image> and push it. Start the kubernetes launcher with the same --registry.",
    )
    push.add_argument("source", help="a bundle folder (built first) or an image name on this machine")
    push.add_argument("--registry", required=True, help="host[:port][/path] the cluster's nodes pull from")
    push.add_argument("--prefix", default="veri", help="image name prefix when building (default: veri)")
    push.set_defaults(func=_push)
    check = actions.add_parser("check", help="validate a bundle's manifest without building")
    check.add_argument("bundle", type=Path, help="the bundle folder")
    check.set_defaults(func=_check)
    _register_run(commands)
    _register_debug(commands)


def _register_debug(commands: argparse._SubParsersAction) -> None:
    debug = commands.add_parser("debug", help="explain which episode rule fired for each rollout, span by span")
    debug.add_argument("files", nargs="+", type=Path, help="rollout records (.jsonl / .json)")
    debug.add_argument("--model", type=Path, default=None, help="model folder: decode differing tokens to text")
    debug.set_defaults(func=_debug)


def _check(args: argparse.Namespace) -> int:
    from veri.core.harness import ManifestError, load_manifest

    try:
        manifest = load_manifest(args.bundle)
    except ManifestError as error:
        print(f"veri harness check: {error}", file=sys.stderr)
        return 2
    print(manifest.model_dump_json(indent=2))
    return 0


def _build(args: argparse.Namespace) -> int:
    from veri.core.harness import ManifestError, load_manifest
    from veri.tools.harness.build import BuildError, build_bundle_image

    try:
        load_manifest(args.bundle)
    except ManifestError as error:
        print(f"veri harness build: {error}", file=sys.stderr)
        return 2
    import docker

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no daemon"
        print(f"veri harness build: no Docker daemon ({exc}); run `make docker`", file=sys.stderr)
        return 1
    try:
        tag = build_bundle_image(args.bundle, client, prefix=args.prefix, vendor_root=args.vendor,
                                 download=not args.offline)
    except (ManifestError, BuildError) as error:
        print(f"veri harness build: {error}", file=sys.stderr)
        return 2
    print(tag)
    return 0


def _push(args: argparse.Namespace) -> int:
    from veri.core.harness import ManifestError
    from veri.core.registry import RegistryError, check_registry
    from veri.tools.harness.build import BuildError, build_bundle_image
    from veri.tools.harness.push import PushError, push_image

    try:
        check_registry(args.registry)
    except RegistryError as error:
        print(f"veri harness push: {error}", file=sys.stderr)
        return 2
    import docker
    from docker.errors import DockerException, ImageNotFound

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as exc:
        print(f"veri harness push: no Docker daemon ({exc}); run `make docker`", file=sys.stderr)
        return 1
    try:
        image = args.source
        if Path(args.source).is_dir():
            image = build_bundle_image(Path(args.source), client, prefix=args.prefix)
        print(push_image(client, image, args.registry))
    except ImageNotFound:
        print(f"veri harness push: no image {args.source!r} here: give a bundle folder, or build it with "
              "`veri harness build BUNDLE`", file=sys.stderr)
        return 2
    except (ManifestError, BuildError, PushError) as error:
        print(f"veri harness push: {error}", file=sys.stderr)
        return 2
    return 0


def _register_run(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser("run-harness", help="run a harness bundle N times against the current policy")
    command.add_argument("--bundle", type=Path, required=True, help="harness bundle folder (veri-harness.toml)")
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help="one task as JSON (a dataset row, or just a prompt)")
    source.add_argument("--dataset", type=Path, help="JSONL dataset; pick the row with --index")
    source.add_argument("--task-dir", type=Path, help="a Harbor task folder: the harness runs in the task's own "
                        "image (built offline, cached; the bundle's runtime tree mounted at /veri/rt), then the "
                        "task's tests score each rollout (docs/harbor-tasks.md); --sandbox docker or launcher")
    command.add_argument("--index", type=int, default=0, help="with --dataset: the row (0-based)")
    command.add_argument("-n", type=int, default=1, help="rollouts to run (one GRPO group)")
    command.add_argument("--out", type=Path, default=None, help="where rollout records go")
    command.add_argument("--sandbox", choices=["docker", "local", "launcher"], default="docker",
                         help="docker (gVisor, default), launcher (the stack's launcher service, whatever its "
                              "backend: kubernetes with VERI_LAUNCHER_BACKEND=kubernetes make up) or local (an "
                              "unsandboxed subprocess: development only)")
    command.add_argument("--launcher-url", default=os.environ.get(envs.VERI_LAUNCHER_URL) or
                         f"http://127.0.0.1:{os.environ.get(envs.VERI_LAUNCHER_PORT) or 8002}",
                         help="--sandbox launcher: the launcher's URL (default $VERI_LAUNCHER_URL, else "
                              "127.0.0.1:$VERI_LAUNCHER_PORT, where compose.kubernetes.yaml publishes it)")
    command.add_argument("--proxy-url", default=os.environ.get(envs.VERI_PROXY_URL, "http://127.0.0.1:8000"),
                         help=f"the capture proxy (default ${envs.VERI_PROXY_URL} or http://127.0.0.1:8000)")
    command.add_argument("--model-name", default=os.environ.get(envs.VERI_MODEL, "policy"),
                         help=f"the model name the harness is given ({envs.VERI_POLICY_MODEL};"
                              f" default ${envs.VERI_MODEL} or policy)")
    # A job's own defaults, so a harness tried here runs as a job without those keys would run it.
    command.add_argument("--max-turns", type=int, default=JobConfig.model_fields["max_turns"].default,
                         help="the job's max_turns: the turn budget the harness is told (VERI_MAX_TURNS;"
                              " default: a job's, %(default)s)")
    command.add_argument("--timeout", type=float, default=JobConfig.model_fields["harness_timeout_s"].default,
                         help="the job's harness_timeout_s: a rollout is killed after this many seconds"
                              " (default: a job's, %(default)s)")
    command.add_argument("--no-up", action="store_true", help="never start the stack")
    command.add_argument("--image-map", action="append", default=[], metavar="FROM=LOCAL",
                         help="--task-dir: build on LOCAL where its Dockerfile says FROM (as `veri tasks build`)")
    command.add_argument("--vendor", type=Path, default=None,
                         help="--task-dir: vendored inputs (default vendor/tasks/; `veri tasks vendor`)")
    command.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from veri.core.harness import ManifestError
    from veri.tools.harness.run import (
        RunHarnessError,
        RunOptions,
        default_control_token,
        default_out,
        harbor_task_row,
        load_task,
        run,
        summary_rows,
    )
    from veri.tools.tasks.build import TaskBuildError, parse_image_map

    out = (args.out or default_out()).resolve()
    try:
        task_dir = args.task_dir.resolve() if args.task_dir else None
        task = harbor_task_row(task_dir) if task_dir else load_task(args.task, args.dataset, args.index)
        options = RunOptions(
            bundle=args.bundle.resolve(), task=task, task_index=args.index,
            n=args.n, out=out, sandbox=args.sandbox, proxy_url=args.proxy_url.rstrip("/"),
            control_token=default_control_token(), model_name=args.model_name, max_turns=args.max_turns,
            timeout_s=args.timeout, start_stack=not args.no_up, launcher_url=args.launcher_url.rstrip("/"),
            task_dir=task_dir, image_map=parse_image_map(args.image_map), vendor=args.vendor,
        )
        collected = run(options)
    except (RunHarnessError, ManifestError, TaskBuildError) as error:
        print(f"veri run-harness: {error}", file=sys.stderr)
        return 1
    console = Console(width=max(140, shutil.get_terminal_size().columns))
    table = Table(title=f"{args.bundle.name}: {len(collected)} rollout(s) of task {args.index}")
    for column in ("rollout", "status", "turns", "tokens p/c/env", "prompt source per span", "verdicts", "answer"):
        table.add_column(column)
    rows = summary_rows(collected)
    for row in rows:
        table.add_row(str(row["rollout"]), f"{row['status']} ({row['exit']})", str(row["turns"]),
                      f"{row['prompt_tokens']}/{row['completion_tokens']}/{row['env_tokens']}",
                      " ".join(row["prompt_sources"]), ", ".join(row["verdicts"]) or "-", row["answer"][:80])
    console.print(table)
    for row in rows:
        if row["hosted_tools"]:
            console.print(f"rollout {row['rollout']}: {row['hosted_tools']}", markup=False)
        if row["verifier"]:
            console.print(f"rollout {row['rollout']}: {row['verifier']}", markup=False)
        if row["stderr_tail"]:
            console.print(f"[dim]rollout {row['rollout']} stderr:[/dim] {row['stderr_tail']}")
    console.print(f"records: {out}  (inspect one: veri debug {out}/task-{args.index}/rollout-0.json)")
    return 0


def _debug(args: argparse.Namespace) -> int:
    """Every record of every file explained; one line for each that cannot be (exit 2), never a traceback."""
    from veri.tools.harness.debug import explain, records_in

    decoder: Decoder | None = None
    if args.model is not None:
        from transformers import AutoTokenizer

        # decode() of a list of ids is a str (its annotation allows a batch's list of them too)
        decoder = AutoTokenizer.from_pretrained(args.model)  # type: ignore[assignment]
    status = 0
    for path in args.files:
        try:
            entries = list(records_in(path))
        except (OSError, UnicodeDecodeError) as error:
            print(f"veri debug: {path}: cannot read it: {error}", file=sys.stderr)
            status = 2
            continue
        for entry in entries:
            problem = entry.problem
            if entry.record is not None:
                try:
                    text = explain(entry.record, decoder)
                except ValueError as error:  # a status veri does not know
                    problem = str(error)
                except Exception as error:  # noqa: BLE001 - one record veri misreads must not stop the walk
                    problem = f"veri debug could not explain it ({error!r}); please report this with the record"
            if problem:
                print(f"veri debug: {path} record {entry.number}: {problem}", file=sys.stderr, flush=True)
                status = 2
                continue
            print(f"== {path} record {entry.number}", flush=True)
            print(text, flush=True)
    return status
