"""/api/...: the console's JSON (what the job page's plots poll, and scripts can read). GET only."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from veri.services.console.protocol import ArchivePage
from veri.services.console.serving import ConsoleService, RolloutRef

router = APIRouter(prefix="/api")


def service(request: Request) -> ConsoleService:
    return request.app.state.console


@router.get("/jobs")
def jobs(request: Request) -> list[dict[str, Any]]:
    return [job.as_dict() for job in service(request).jobs()]


@router.get("/jobs/{job}")
def job(request: Request, job: str) -> dict[str, Any]:
    summary, info = service(request).job(job)
    return summary.as_dict() | {"config": info.get("config")}


@router.get("/jobs/{job}/signals")
def signals(request: Request, job: str) -> list[dict[str, Any]]:
    """Reward-hacking signals raised over the job's steps, each with the rollouts that raised it."""
    return service(request).signals(job)


@router.get("/jobs/{job}/metrics")
def metrics(request: Request, job: str) -> dict[str, Any]:
    console = service(request)
    summary, _ = console.job(job)
    return {"status": summary.status, "steps_done": summary.steps_done, "max_steps": summary.max_steps,
            "metrics": console.metrics(job)}


@router.get("/jobs/{job}/timeline")
def timeline(request: Request, job: str, step: int | None = None) -> dict[str, Any]:
    """`step`'s timeline line (`trainer.timeline.record`; default the latest) and the steps that have one."""
    steps, line = service(request).timeline(job, step)
    return {"steps": steps, "timeline": line}


@router.get("/jobs/{job}/rollouts")
def rollouts(request: Request, job: str) -> dict[str, Any]:
    page = ArchivePage.from_params(request.query_params)
    result = service(request).archive(job, page)
    return {"total": result.total, "page": page.page, "pages": result.pages, "rows": result.rows}


@router.get("/jobs/{job}/tasks/{task}")
def same_task(request: Request, job: str, task: int) -> dict[str, Any]:
    rows, total = service(request).same_task(job, task)
    return {"total": total, "rows": rows}


@router.get("/jobs/{job}/steps/{step}/tasks/{task}/rollouts/{rollout}")
def rollout(request: Request, job: str, step: int, task: int, rollout: int) -> dict[str, Any]:
    row, record = service(request).rollout(RolloutRef(job, step, task, rollout))
    return {"index": row, "record": record.model_dump(mode="json")}


@router.get("/jobs/{job}/steps/{step}/tasks/{task}/rollouts/{rollout}/tokens")
def tokens(request: Request, job: str, step: int, task: int, rollout: int, row: int = 1) -> dict[str, Any]:
    _, view = service(request).tokens(RolloutRef(job, step, task, rollout), row)
    return view.as_dict()
