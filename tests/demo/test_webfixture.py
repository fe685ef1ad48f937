"""The demo's pages and dataset: deterministic, consistent with each other, and served."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from html.parser import HTMLParser

import httpx
import pytest

from testkit.demo import REPO
from veri.core import envs
from veri.services.webfixture.inline_tasks import LINKS_SHOWN, inline_dataset_text, inline_task
from veri.services.webfixture.pages import (
    DEFAULT_BASE_URL,
    KINDS,
    NUM_PAGES,
    base_url,
    dataset_text,
    page,
    page_spec,
    task,
)

DATASET = REPO / "config/data/url_extract.jsonl"
INLINE_DATASET = REPO / "config/data/url_extract_inline.jsonl"


class Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href, self._text = dict(attrs).get("href"), []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.anchors.append((self._href, "".join(self._text)))
            self._href = None


def anchors(html: str) -> list[tuple[str, str]]:
    parser = Anchors()
    parser.feed(html)
    parser.close()
    return parser.anchors


def pages_digest() -> str:
    return hashlib.sha256("".join(page(i) for i in range(NUM_PAGES)).encode()).hexdigest()


@pytest.mark.needs("process")
def test_pages_are_a_pure_function_of_the_index():
    assert page(17) == page(17) and page(17) != page(18)
    code = "from tests.demo.test_webfixture import pages_digest; print(pages_digest())"
    other = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert other.stdout.strip() == pages_digest()


def test_committed_dataset_is_a_fresh_generation():
    assert DATASET.read_text(encoding="utf-8") == dataset_text(), (
        "config/data/url_extract.jsonl drifted from the generator: "
        "run `veri data url-extract --out config/data/url_extract.jsonl` and commit it")


def test_committed_inline_dataset_is_a_fresh_generation():
    assert INLINE_DATASET.read_text(encoding="utf-8") == inline_dataset_text(), (
        "config/data/url_extract_inline.jsonl drifted from the generator: "
        "run `veri data url-extract --inline --out config/data/url_extract_inline.jsonl` and commit it")


def test_inline_tasks_list_four_links_of_the_page_and_ask_by_label():
    for index in range(NUM_PAGES):
        row, spec = inline_task(index), page_spec(index)
        assert row["expected_url"] == spec.target.url and row["page"] == index
        listed = [line for line in row["prompt"].splitlines() if line.startswith("- ")]
        assert len(listed) == LINKS_SHOWN and f"- {spec.target.label}: {spec.target.url}" in listed
        page_links = {f"- {link.label}: {link.url}" for link in spec.links}
        assert set(listed) <= page_links
        assert row["prompt"].count(spec.target.url) == 1
        assert row["prompt"].endswith(f'labelled "{spec.target.label}"?')
    assert len({inline_task(i)["prompt"].split("\n- ")[1] for i in range(40)}) > 10  # the target is not always first


def test_every_task_names_exactly_one_link_of_its_page():
    rows = [json.loads(line) for line in DATASET.read_text().splitlines()]
    assert len(rows) == NUM_PAGES >= 200
    assert len({row["prompt"] for row in rows}) == len(rows)
    for index, row in enumerate(rows):
        assert set(row) == {"prompt", "url", "expected_url", "label", "kind", "page"}
        assert row["page"] == index
        assert row["url"] == f"{DEFAULT_BASE_URL}/pages/{index}.html"
        assert row["url"] in row["prompt"]
        html = page(index)
        links = anchors(html)
        external = [(href, text) for href, text in links if href.startswith("https://")]
        assert 6 <= len(external) + 1 <= 10, index
        assert [text for href, text in links if href == row["expected_url"]] == [row["label"]], index
        assert html.count(f'href="{row["expected_url"]}"') == 1, index  # literally, as an agent reads it
        assert row["expected_url"].startswith("https://") and row["expected_url"].split("/")[2].endswith(".test")
        labels = [text.lower() for _, text in links]
        assert len(set(labels)) == len(labels), index
        assert not any(row["label"].lower() in other for other in labels if other != row["label"].lower()), index
        spec = page_spec(index)
        assert len({link.kind for link in spec.links}) == len(spec.links)
        assert len({link.url for link in spec.links}) == len(spec.links)
        name = f'"{row["label"]}"' if spec.by_label else KINDS[row["kind"]].description
        named = name in row["prompt"]
        assert named, row


def test_both_ways_of_naming_the_target_occur():
    specs = [page_spec(i) for i in range(NUM_PAGES)]
    assert 0.3 < sum(spec.by_label for spec in specs) / len(specs) < 0.7
    assert len({spec.target.kind for spec in specs}) == len(KINDS)


def test_base_url_from_argument_environment_or_default(monkeypatch):
    assert task(5, base="http://127.0.0.1:9999/")["url"] == "http://127.0.0.1:9999/pages/5.html"
    assert "http://127.0.0.1:9999/pages/5.html" in task(5, base="http://127.0.0.1:9999")["prompt"]
    monkeypatch.delenv(envs.VERI_WEBFIXTURE_URL, raising=False)
    assert base_url() == "http://webfixture:8080"
    monkeypatch.setenv(envs.VERI_WEBFIXTURE_URL, "http://localhost:1234/")
    assert base_url() == "http://localhost:1234"
    assert task(0)["url"] == "http://localhost:1234/pages/0.html"


@pytest.mark.needs("process")
def test_cli_writes_the_dataset(tmp_path):
    out = tmp_path / "data" / "tasks.jsonl"
    veri = [sys.executable, "-m", "veri.cli", "data", "url-extract"]
    subprocess.run([*veri, "--out", str(out), "--count", "3", "--base-url", "http://127.0.0.1:8080"], check=True)
    assert out.read_text() == dataset_text(3, "http://127.0.0.1:8080")
    printed = subprocess.run([*veri, "--count", "2"], capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", envs.VERI_WEBFIXTURE_URL: "http://x:1"})
    assert printed.stdout == dataset_text(2, "http://x:1")
    inline = subprocess.run([*veri, "--inline", "--count", "2"], capture_output=True, text=True, check=True)
    assert inline.stdout == inline_dataset_text(2)
    bad = subprocess.run([*veri, "--count", str(NUM_PAGES + 1)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--count" in bad.stderr


@pytest.mark.needs("process")
def test_server_serves_pages_health_and_404(webfixture):
    assert httpx.get(f"{webfixture.url}/health").json() == {"status": "ok", "pages": NUM_PAGES}
    reply = httpx.get(f"{webfixture.url}/pages/42.html")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    assert reply.text == page(42)
    assert httpx.get(f"{webfixture.url}/pages/{NUM_PAGES - 1}.html").status_code == 200
    assert httpx.get(f"{webfixture.url}/").status_code == 200


@pytest.mark.needs("process")
@pytest.mark.parametrize("path", [f"/pages/{NUM_PAGES}.html", "/pages/042.html", "/pages/-1.html", "/pages/abc.html",
                                  "/pages/1", "/pages/", "/nope"])
def test_server_404s_unknown_pages(webfixture, path):
    assert httpx.get(webfixture.url + path).status_code == 404
