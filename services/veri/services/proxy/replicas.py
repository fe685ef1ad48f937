"""Policy replicas: where each rollout's calls go.

A replica is one policy engine: one server per URL (`policy_urls`, e.g. one `vllm serve` container
each), or one rank of a server started with `vllm serve --data-parallel-size D` (`data_parallel_size`:
every call to that URL carries `X-data-parallel-rank`), or both (each URL with D ranks).

Every call of one rollout goes to the replica its session was pinned to when it opened, so later
turns hit that engine's prefix cache; sessions spread evenly (the fewest open sessions, round-robin
on ties). The pinning lives in the span store (`SpanStore.open_session`), not here, so several proxy
workers agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from veri.services.proxy.policy_client import PolicyClient, PolicyCompletion


@dataclass(frozen=True)
class Replica:
    index: int  # what spans and sessions record
    url: str
    rank: int | None  # vLLM data-parallel rank; None: the server's only engine (no header sent)


def plan_replicas(urls: list[str], data_parallel_size: int) -> list[Replica]:
    """Replicas in a stable order: each URL's ranks, URL by URL."""
    if data_parallel_size == 1:
        return [Replica(index, url, None) for index, url in enumerate(urls)]
    pairs = [(url, rank) for url in urls for rank in range(data_parallel_size)]
    return [Replica(index, url, rank) for index, (url, rank) in enumerate(pairs)]


class PolicyReplicas:
    """One `PolicyClient` per policy URL; a call goes to a replica by its index."""

    def __init__(self, replicas: list[Replica], *, model: str | None, timeout_s: float):
        self.replicas = replicas
        self._clients = {url: PolicyClient(url, model=model, timeout_s=timeout_s) for url in dict.fromkeys(
            replica.url for replica in replicas)}

    async def start(self) -> None:
        for client in self._clients.values():
            await client.start()

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    def replica(self, index: int) -> Replica:
        # A store reopened by a proxy with fewer replicas may hold a larger index: wrap it.
        return self.replicas[index % len(self.replicas)]

    async def complete(self, index: int, prompt_ids: list[int], **sampling) -> PolicyCompletion:
        replica = self.replica(index)
        return await self._clients[replica.url].complete(prompt_ids, data_parallel_rank=replica.rank, **sampling)
