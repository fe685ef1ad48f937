"""MkDocs hooks (mkdocs.yml `hooks:`): the site's home page is the repository's README.md.

The README links to docs pages as `docs/<page>.md` (right where the repository is read); on the site
those pages sit beside the home page, so the prefix goes. One front page, kept in one file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS_LINK = re.compile(r"\]\(docs/")


def home_page(readme: str) -> str:
    """The README's text with its `](docs/...)` links made relative to the site's root."""
    return DOCS_LINK.sub("](", readme)


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", content=home_page(README.read_text(encoding="utf-8"))))
    return files


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    server.watch(str(README))  # `mkdocs serve` rebuilds when the README changes
    return server


CODE_SPAN = re.compile(r"`[^`]*`")


def unescape_table_code(markdown: str) -> str:
    """`a \\| b` in a table row: GitHub needs the pipe escaped even inside code, Python-Markdown's tables
    do not split inside code spans and would show the backslash."""
    return "\n".join(CODE_SPAN.sub(lambda span: span.group(0).replace("\\|", "|"), line) if line.startswith("|")
                     else line for line in markdown.split("\n"))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return unescape_table_code(markdown)
