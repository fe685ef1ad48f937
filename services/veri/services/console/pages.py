"""The HTML pages (Jinja2 templates in templates/, one JS and one CSS file in static/), the live log
stream and the JSONL downloads. GET only: nothing here can change a job."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse
from sse_starlette import EventSourceResponse

from veri.archive import RolloutQuery, job_status
from veri.archive.status import JobStatus
from veri.services.console.downloads import record_line, records_jsonl
from veri.services.console.logs import PING_S, SEP, log_events, start_offset
from veri.services.console.protocol import ArchivePage
from veri.services.console.serving import ConsoleService, RolloutRef
from veri.services.console.tokens import cells_html

router = APIRouter()
ROLLOUT = "/jobs/{job}/steps/{step}/tasks/{task}/rollouts/{rollout}"
RECENT_STEPS = 20  # steps in the job page's tool-call table (the plot has them all)


def service(request: Request) -> ConsoleService:
    return request.app.state.console


def render(request: Request, template: str, **context: object) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(request, template, context)


@router.get("/", response_class=HTMLResponse)
def jobs_page(request: Request) -> HTMLResponse:
    return render(request, "jobs.html", jobs=service(request).jobs())


@router.get("/jobs/{job}", response_class=HTMLResponse)
def job_page(request: Request, job: str) -> HTMLResponse:
    console = service(request)
    summary, info = console.job(job)
    archive = console.archive(job, ArchivePage.from_params(request.query_params))
    return render(request, "job.html", job=summary, info=info, archive=archive,
                  recent_metrics=console.recent_metrics(job, RECENT_STEPS), evals=console.evals(job),
                  signals=console.signals(job))


@router.get("/jobs/{job}/archive", response_class=HTMLResponse)
def archive_fragment(request: Request, job: str) -> HTMLResponse:
    """The archive section alone: the job page's facet form swaps it in without a reload."""
    archive = service(request).archive(job, ArchivePage.from_params(request.query_params))
    return render(request, "_archive.html", job_name=job, archive=archive)


@router.get("/jobs/{job}/steps/{step}")
def step_page(request: Request, job: str, step: int) -> RedirectResponse:
    service(request).check_step(job, step)
    return RedirectResponse(f"/jobs/{job}?step={step}#archive", status_code=307)


@router.get("/jobs/{job}/tasks/{task}", response_class=HTMLResponse)
def same_task_page(request: Request, job: str, task: int) -> HTMLResponse:
    rows, total = service(request).same_task(job, task)
    return render(request, "same_task.html", job_name=job, task=task, rows=rows, total=total)


@router.get(ROLLOUT, response_class=HTMLResponse)
def trajectory_page(request: Request, job: str, step: int, task: int, rollout: int) -> HTMLResponse:
    ref = RolloutRef(job, step, task, rollout)
    row, view = service(request).trajectory(ref)
    return render(request, "trajectory.html", ref=ref, row=row, view=view, record=view.record)


@router.get(ROLLOUT + "/tokens", response_class=HTMLResponse)
def tokens_page(request: Request, job: str, step: int, task: int, rollout: int, row: int = 1) -> HTMLResponse:
    ref = RolloutRef(job, step, task, rollout)
    row_info, view = service(request).tokens(ref, row)
    row = row_info
    return render(request, "tokens.html", ref=ref, row=row, view=view, tokens_html=cells_html(view.cells))


@router.get("/jobs/{job}/logs/stream")
def log_stream(request: Request, job: str) -> EventSourceResponse:
    console = service(request)
    layout, path = console.layout(job), console.log_file(job)
    offset = start_offset(path, request.headers.get("last-event-id"))
    events = log_events(path, lambda: job_status(layout) == JobStatus.RUNNING, offset, console.settings.log_poll_s)
    return EventSourceResponse(events, ping=PING_S, sep=SEP)


# --- downloads: JSONL of rollout records, as `veri debug` reads them --------------------------------


@router.get("/jobs/{job}/download.jsonl")
def download_job(request: Request, job: str) -> StreamingResponse:
    return _jsonl(request, job, RolloutQuery(), f"{job}.jsonl")


@router.get("/jobs/{job}/steps/{step}/download.jsonl")
def download_step(request: Request, job: str, step: int) -> StreamingResponse:
    service(request).check_step(job, step)
    return _jsonl(request, job, RolloutQuery(step_min=step, step_max=step), f"{job}-step-{step}.jsonl")


@router.get(ROLLOUT + "/download.jsonl")
def download_rollout(request: Request, job: str, step: int, task: int, rollout: int) -> StreamingResponse:
    console = service(request)
    row, _ = console.rollout(RolloutRef(job, step, task, rollout))  # 404 when it does not exist

    def line() -> Iterator[bytes]:
        with console.index(job) as index:
            yield record_line(index, row)

    return _attachment(line(), f"{job}-step-{step}-task-{task}-rollout-{rollout}.jsonl")


def _jsonl(request: Request, job: str, query: RolloutQuery, filename: str) -> StreamingResponse:
    console = service(request)

    def lines() -> Iterator[bytes]:  # the index stays open while the response streams
        with console.index(job) as index:
            yield from records_jsonl(index, query)

    return _attachment(lines(), filename)


def _attachment(body: Iterator[bytes], filename: str) -> StreamingResponse:
    return StreamingResponse(body, media_type="application/x-ndjson",
                             headers={"Content-Disposition": f'attachment; filename="{filename}"'})
