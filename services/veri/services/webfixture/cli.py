"""`veri serve webfixture` and `veri data url-extract`: the URL-extraction demo's pages and dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from veri.core import envs


def register_serve(services: argparse._SubParsersAction) -> None:
    fixture = services.add_parser("webfixture", help="the URL-extraction demo's web pages (/pages/<i>.html)")
    fixture.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    fixture.add_argument("--port", type=int, default=8080, help="the port to listen on")
    fixture.set_defaults(func=_serve)


def register(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="generate the demo datasets")
    datasets = data.add_subparsers(dest="dataset", required=True, metavar="DATASET")
    url_extract = datasets.add_parser(
        "url-extract", help="the URL-extraction tasks (JSONL), one per webfixture page",
        description="Write the URL-extraction dataset: one JSON object per line with prompt, url (the page "
                    "the prompt names), expected_url (the answer), label, kind and page.",
    )
    url_extract.add_argument("--out", type=Path, default=None, help="JSONL file to write (default: stdout)")
    url_extract.add_argument(
        "--base-url", default=None,
        help=f"base URL of the pages in the prompts (default: ${envs.VERI_WEBFIXTURE_URL} or http://webfixture:8080)",
    )
    url_extract.add_argument("--count", type=int, default=None, help="number of tasks (default: every page)")
    url_extract.add_argument(
        "--inline", action="store_true",
        help="the easy variant for small models: the prompt lists four of the page's links (nothing to fetch)",
    )
    url_extract.set_defaults(func=_url_extract)


def _serve(args: argparse.Namespace) -> int:
    from veri.services.webfixture.server import serve

    serve(args.host, args.port)
    return 0


def _url_extract(args: argparse.Namespace) -> int:
    from veri.services.webfixture.inline_tasks import inline_dataset_text
    from veri.services.webfixture.pages import NUM_PAGES, dataset_text

    count = NUM_PAGES if args.count is None else args.count
    if not 1 <= count <= NUM_PAGES:
        print(f"veri data url-extract: --count must be between 1 and {NUM_PAGES}", file=sys.stderr)
        return 2
    text = (inline_dataset_text if args.inline else dataset_text)(count, args.base_url)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"{count} tasks -> {args.out}", file=sys.stderr)
    return 0
