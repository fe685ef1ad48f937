"""`veri serve webfixture`: serves the demo pages (`/pages/<i>.html`), `/health` and a small index.

It stands in for the web in tests and the CPU demo: compose runs it as the `webfixture` service on
the `rollouts` network, where sandboxes reach it as http://webfixture:8080.
"""

from __future__ import annotations

import re
from functools import lru_cache

import uvicorn
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, PlainTextResponse

from veri.infra.logging import AccessLog, configure_service_logging
from veri.services.webfixture.pages import NUM_PAGES, page, page_path

PAGE_NAME = re.compile(r"(0|[1-9][0-9]{0,8})\.html")  # one canonical name per page: no leading zeros


@lru_cache(maxsize=NUM_PAGES)
def _page(index: int) -> str:
    return page(index)


def create_app(num_pages: int = NUM_PAGES) -> FastAPI:
    app = FastAPI(title="veri webfixture", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(AccessLog)

    @app.get("/health")
    def health() -> dict[str, object]:
        return {"status": "ok", "pages": num_pages}

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return (f"<!DOCTYPE html>\n<html><head><title>webfixture</title></head><body>\n"
                f"<p>{num_pages} demo pages: <a href=\"{page_path(0)}\">{page_path(0)}</a> to "
                f"{page_path(num_pages - 1)}</p>\n</body></html>\n")

    @app.get("/pages/{name}")
    def get_page(name: str):
        match = PAGE_NAME.fullmatch(name)
        if not match or int(match.group(1)) >= num_pages:
            return PlainTextResponse(f"no such page: /pages/{name} (pages are 0..{num_pages - 1})\n",
                                     status_code=404)
        return HTMLResponse(_page(int(match.group(1))))

    return app


def serve(host: str, port: int, num_pages: int = NUM_PAGES) -> None:
    configure_service_logging("webfixture")
    # log_config=None: uvicorn keeps the JSON stream's handlers; AccessLog writes each request.
    uvicorn.run(create_app(num_pages), host=host, port=port, log_level="info", log_config=None, access_log=False)
