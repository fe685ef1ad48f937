"""`veri harness build DIR` (and `make harness BUNDLE=DIR`): build a bundle's image."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    harness = commands.add_parser("harness", help="harness bundles: build their images")
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
    check = actions.add_parser("check", help="validate a bundle's manifest without building")
    check.add_argument("bundle", type=Path)
    check.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from veri.core.harness import ManifestError
    from veri.harness.build import check_bundle

    try:
        manifest = check_bundle(args.bundle)
    except ManifestError as error:
        print(f"veri harness check: {error}", file=sys.stderr)
        return 2
    print(manifest.model_dump_json(indent=2))
    return 0


def _build(args: argparse.Namespace) -> int:
    from veri.core.harness import ManifestError
    from veri.harness.build import BuildError, build_bundle_image, check_bundle

    try:
        check_bundle(args.bundle)
    except ManifestError as error:
        print(f"veri harness build: {error}", file=sys.stderr)
        return 2
    try:
        import docker
    except ImportError:
        print("veri harness build: the Docker SDK is missing: pip install docker", file=sys.stderr)
        return 1
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
