"""One watch on this launcher's Jobs and one on their pods, shared by every rollout (not a poll per
rollout: 256 rollouts would be 500 requests a second). Each runs in its own thread with the blocking
client (list, then watch from its resourceVersion; relist when the watch expires or breaks) and
hands each event to the event loop, where `RolloutState`s are updated and their waiters woken.

Events are read as the raw JSON the apiserver sent, not the client's models: the models of a newer
client refuse some objects of an older apiserver, and the few fields read here are stable since 1.20.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = structlog.get_logger("veri.services.launcher.kubernetes")

WATCH_SECONDS = 60  # each watch call's server-side timeout: then it relists from where it was
RETRY_SECONDS = 1.0
# Waiting reasons of the harness container that will not fix themselves: the rollout fails at once.
FATAL_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


@dataclass
class RolloutState:
    """What the watches have seen of one rollout's Job and its pod."""

    job: str
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    pod: str | None = None
    phase: str | None = None
    exit_code: int | None = None
    terminated_reason: str | None = None
    termination_message: str | None = None
    waiting_reason: str | None = None
    waiting_message: str | None = None
    unschedulable: str | None = None
    pod_deleting: bool = False
    running_at: float | None = None  # this launcher's clock when the pod was first seen Running
    job_condition: tuple[str, str, str] | None = None  # (Complete | Failed, reason, message)
    job_gone: bool = False

    def update_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        self.pod = meta.get("name")
        self.phase = status.get("phase")
        self.pod_deleting = kind == "DELETED" or bool(meta.get("deletionTimestamp"))
        if self.phase == "Running" and self.running_at is None:
            self.running_at = time.time()
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                self.unschedulable = condition.get("message") or "Unschedulable"
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            if "terminated" in state:
                ended = state["terminated"] or {}
                self.exit_code = ended.get("exitCode")
                self.terminated_reason = ended.get("reason")
                self.termination_message = ended.get("message")
                if self.running_at is None:
                    self.running_at = time.time()
            waiting = state.get("waiting") or {}
            self.waiting_reason = waiting.get("reason")
            self.waiting_message = waiting.get("message")
        self.changed.set()

    def update_job(self, kind: str, job: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.job_gone = True
        for condition in (job.get("status") or {}).get("conditions") or []:
            if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
                self.job_condition = (condition["type"], condition.get("reason") or "",
                                      condition.get("message") or "")
        self.changed.set()


class ClusterWatch:
    """Pod and Job events of one launcher (label selector) in one namespace, fed to tracked rollouts."""

    def __init__(self, api: client.ApiClient, namespace: str, selector: str) -> None:
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.namespace = namespace
        self.selector = selector
        self._tracked: dict[str, RolloutState] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the current threads feed
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def track(self, job: str) -> RolloutState:
        """Start following a Job (before it is created: no event can be missed)."""
        self._ensure_started()
        state = self._tracked[job] = RolloutState(job=job)
        return state

    def untrack(self, job: str) -> None:
        self._tracked.pop(job, None)

    def close(self) -> None:
        self._stop.set()

    def _ensure_started(self) -> None:
        """Watch threads for the running loop; a new loop (tests, several asyncio.run) gets new ones and
        the old ones end at their next event or watch timeout."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and all(t.is_alive() for t in self._threads):
            return
        self._stop.set()
        self._stop = stop = threading.Event()
        self._loop = loop
        self._threads = [
            threading.Thread(target=self._follow, name=f"veri-k8s-watch-{what}", daemon=True,
                             args=(lister, self._on_event(what), stop, loop))
            for what, lister in (("pods", self.core.list_namespaced_pod), ("jobs", self.batch.list_namespaced_job))
        ]
        for thread in self._threads:
            thread.start()

    def _on_event(self, what: str) -> Callable[[str, dict[str, Any]], None]:
        def handle(kind: str, obj: dict[str, Any]) -> None:  # on the event loop
            meta = obj.get("metadata") or {}
            job = (meta.get("labels") or {}).get("job-name") if what == "pods" else meta.get("name")
            state = self._tracked.get(job or "")
            if state is None:
                return
            if what == "pods":
                state.update_pod(kind, obj)
            else:
                state.update_job(kind, obj)
        return handle

    def _follow(self, lister: Any, handle: Callable[[str, dict[str, Any]], None], stop: threading.Event,
                loop: asyncio.AbstractEventLoop) -> None:
        """List, then watch from that version, until `stop`; every object goes to `handle` on `loop`."""
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    response = lister(self.namespace, label_selector=self.selector, _preload_content=False)
                    listed = json.loads(response.data)
                    version = listed["metadata"]["resourceVersion"]
                    for item in listed.get("items") or []:
                        _hand_over(loop, handle, "ADDED", item)
                stream = watch.Watch().stream(lister, self.namespace, label_selector=self.selector,
                                              resource_version=version, timeout_seconds=WATCH_SECONDS,
                                              allow_watch_bookmarks=True)
                for event in stream:
                    if stop.is_set():
                        return
                    raw = event.get("raw_object") or {}
                    if event.get("type") == "ERROR":
                        version = None  # 410 Gone: the version expired, list again
                        break
                    version = (raw.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        _hand_over(loop, handle, event["type"], raw)
            except ApiException as exc:
                if exc.status == 410:
                    version = None
                    continue
                log.warning("kubernetes watch failed, retrying", error=f"{exc.status} {exc.reason}")
                version = None
                time.sleep(RETRY_SECONDS)
            except Exception as exc:  # noqa: BLE001 - a broken connection: relist and go on while open
                if stop.is_set():
                    return
                log.warning("kubernetes watch broke, retrying", error=f"{type(exc).__name__}: {exc}")
                version = None
                time.sleep(RETRY_SECONDS)



def _hand_over(loop: asyncio.AbstractEventLoop, handle: Callable[[str, dict[str, Any]], None], kind: str,
               obj: dict[str, Any]) -> None:
    if not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # the loop closed in the meantime
            loop.call_soon_threadsafe(handle, kind, obj)
