"""The `spans` and `texts` tables: each model call's span, its token ids packed in their own columns (a
bridged prompt stored as what it adds to the span it extends), long strings kept once in `texts`; and the
ids of each rollout's latest span kept in this worker's memory (`RecentIds`)."""

from __future__ import annotations

import sqlite3
import struct
from array import array
from dataclasses import dataclass
from typing import Any

import orjson
from cachetools import LRUCache

from veri.core.records import Span
from veri.services.proxy.long_texts import LongTexts, hashes_at, join
from veri.services.proxy.store.database import Tables, store_error

# A bridged prompt is stored as what it adds to the prompt + completion it extends; past this many
# links the whole prompt is stored again, so rebuilding one reads a bounded number of rows.
MAX_PROMPT_DEPTH = 8

# Ids of rollouts' latest spans kept in memory, at most this many in all (~8 bytes each: the lists
# share their int objects along a rollout): 256 rollouts of 8k-token prompts.
RECENT_IDS_BUDGET = 2_000_000


@dataclass(frozen=True)
class SharedIds:
    """A prompt's first `count` ids are the prompt + completion ids of span `request_index`."""

    request_index: int
    count: int


@dataclass(frozen=True)
class PriorTurn:
    """What a later call needs from an earlier one to bridge: its exact ids (shared: never mutated)."""

    request_index: int
    n_messages: int
    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass(frozen=True)
class _SpanIds:
    request_index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    prompt_depth: int  # as in its row: spans read to rebuild its prompt


class RecentIds:
    """The ids of each rollout's latest span this worker wrote or read, LRU by rollout within a budget.

    A later turn bridges from its previous one: 8k ids read back and unpacked cost ~0.2 ms a call."""

    def __init__(self, budget: int = RECENT_IDS_BUDGET) -> None:
        self._by_rollout: LRUCache[str, _SpanIds] = LRUCache(maxsize=budget, getsizeof=_ids_held)

    def get(self, rollout_id: str, request_index: int) -> _SpanIds | None:
        found = self._by_rollout.get(rollout_id)  # marks it used
        if found is None or found.request_index != request_index:
            return None
        return found

    def put(self, rollout_id: str, ids: _SpanIds) -> None:
        known = self._by_rollout.get(rollout_id)
        if known is not None and known.request_index > ids.request_index:
            return  # a later span of the rollout is the one its next turn extends
        self._by_rollout.pop(rollout_id, None)
        if _ids_held(ids) <= self._by_rollout.maxsize:  # one span over the whole budget is not kept
            self._by_rollout[rollout_id] = ids  # the least recently used go until it fits


def _ids_held(ids: _SpanIds) -> int:
    return len(ids.prompt_ids) + len(ids.completion_ids)


# Token ids live in their own columns (compact, and read alone when a later turn bridges); the
# JSON column holds the rest of the span, its long strings in `texts`.
_IN_BLOBS = {"prompt_token_ids", "completion_token_ids"}
_IN_COLUMNS = {*_IN_BLOBS, "request_index"}  # assigned in the write transaction
_WITH_TEXTS = ("request", "response", "messages", "tools", "reply_message")
_SPAN_ROW = "request_index, span, long_texts, prompt_base, prompt_shared, prompt_ids, completion_ids"


_ID_BYTES = 4


def _pack(ids: list[int]) -> bytes:
    # The same bytes as array("i", ids).tobytes() (native 4-byte ints), in half the time for 8k ids.
    return struct.pack(f"{len(ids)}i", *ids)


def _unpack(blob: bytes) -> list[int]:
    ids = array("i")
    ids.frombytes(blob)
    return ids.tolist()


class Spans(Tables):
    _recent_ids: RecentIds
    _stored_texts: set[str]

    def add_span(self, span: Span, *, prefix_hash: str, n_messages: int, answers: int | None = None,
                 shared: SharedIds | None = None) -> Span:
        """Assign the next request_index and commit the span (with the request it `answers`, from
        `begin_request`, in the same transaction). `shared`: the prompt's ids it has from an earlier
        span, stored by reference. Returns the stored span."""
        long_texts = LongTexts()
        stored = span.model_copy(update={name: long_texts.split(getattr(span, name), [name]) for name in _WITH_TEXTS})
        fields = stored.model_dump_json(exclude=_IN_COLUMNS)
        try:
            with self._lock:  # the commit and this worker's copies of what it wrote, in one hold
                with self._write() as db:
                    (next_index,) = db.execute(
                        "SELECT COALESCE(MAX(request_index) + 1, 0) FROM spans WHERE rollout_id = ?",
                        (span.rollout_id,),
                    ).fetchone()
                    span.request_index = next_index
                    base, count, depth = self._prompt_reference(span.rollout_id, shared)
                    if new_texts := [(key, text) for key, text in long_texts.texts.items()
                                     if key not in self._stored_texts]:
                        db.executemany("INSERT OR IGNORE INTO texts VALUES (?, ?)", new_texts)
                    db.execute(
                        "INSERT INTO spans (rollout_id, request_index, span, prefix_hash, n_messages, prompt_ids,"
                        " completion_ids, prompt_base, prompt_shared, prompt_depth, long_texts)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            span.rollout_id,
                            next_index,
                            fields,
                            prefix_hash,
                            n_messages,
                            _pack(span.prompt_token_ids[count:]),
                            _pack(span.completion_token_ids),
                            base,
                            count,
                            depth,
                            orjson.dumps(long_texts.at).decode() if long_texts.at else None,
                        ),
                    )
                    self._count_call(span)
                    if answers is not None:
                        db.execute("UPDATE requests SET request_index = ? WHERE id = ?", (next_index, answers))
                self._stored_texts.update(key for key, _ in new_texts)
                self._recent_ids.put(span.rollout_id, _SpanIds(next_index, span.prompt_token_ids,
                                                               span.completion_token_ids, depth))
        except sqlite3.Error as exc:
            raise store_error(exc, "could not store the span; the response was withheld") from exc
        return span

    def _prompt_reference(self, rollout_id: str, shared: SharedIds | None) -> tuple[int | None, int, int]:
        """(prompt_base, prompt_shared, prompt_depth) for a new span's row: by reference while the chain is short."""
        if shared is None or shared.count == 0:
            return None, 0, 0
        recent = self._recent_ids.get(rollout_id, shared.request_index)
        if recent is not None:
            base_depth: int | None = recent.prompt_depth
        else:
            found = self._db.execute("SELECT prompt_depth FROM spans WHERE rollout_id = ? AND request_index = ?",
                                     (rollout_id, shared.request_index)).fetchone()
            base_depth = None if found is None else found[0] or 0
        if base_depth is None or base_depth + 1 > MAX_PROMPT_DEPTH:
            return None, 0, 0
        return shared.request_index, shared.count, base_depth + 1

    def _ids(self, rollout_id: str, request_index: int) -> tuple[bytes, bytes]:
        """A span's (prompt, completion) ids as packed bytes, its prompt rebuilt from the spans it extends."""
        base, count, prompt, completion = self._db.execute(
            "SELECT prompt_base, prompt_shared, prompt_ids, completion_ids FROM spans"
            " WHERE rollout_id = ? AND request_index = ?", (rollout_id, request_index),
        ).fetchone()
        return self._prompt(rollout_id, base, count, prompt, {}), completion

    def _prompt(self, rollout_id: str, base: int | None, count: int | None, tail: bytes,
                known: dict[int, tuple[bytes, bytes]]) -> bytes:
        if base is None:
            return tail
        prompt, completion = known.get(base) or self._ids(rollout_id, base)
        return (prompt + completion)[: (count or 0) * _ID_BYTES] + tail

    def _spans(self, rollout_id: str, rows: list[tuple]) -> list[Span]:
        """Spans from `_SPAN_ROW` rows (in request order), long strings and prompts rebuilt."""
        paths = [orjson.loads(row[2]) if row[2] else [] for row in rows]
        fields = [orjson.loads(row[1]) for row in rows]
        wanted = {key for one, at in zip(fields, paths, strict=True) for key in hashes_at(one, at)}
        texts = self._texts(wanted)
        known: dict[int, tuple[bytes, bytes]] = {}
        spans = []
        for (index, _, _, base, count, prompt, completion), one, at in zip(rows, fields, paths, strict=True):
            prompt = self._prompt(rollout_id, base, count, prompt, known)
            known[index] = (prompt, completion)
            join(one, at, texts)
            spans.append(Span.model_validate({**one, "request_index": index, "prompt_token_ids": _unpack(prompt),
                                              "completion_token_ids": _unpack(completion)}))
        return spans

    def _texts(self, hashes: set[str]) -> dict[str, str]:
        if not hashes:
            return {}
        marks = ",".join("?" * len(hashes))
        return dict(self._db.execute(f"SELECT hash, text FROM texts WHERE hash IN ({marks})", tuple(hashes)))

    def spans(self, rollout_id: str) -> list[Span]:
        self.get_session(rollout_id)
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_SPAN_ROW} FROM spans WHERE rollout_id = ? ORDER BY request_index", (rollout_id,),
            ).fetchall()
            return self._spans(rollout_id, rows)

    def find_prior_turn(self, rollout_id: str, prefix_hashes: list[str]) -> PriorTurn | None:
        """The latest span whose (messages + reply) equals the longest of the given prefixes."""
        if not prefix_hashes:
            return None
        marks = ",".join("?" * len(prefix_hashes))
        with self._lock:
            found = self._db.execute(
                f"SELECT request_index, n_messages, prompt_depth FROM spans "
                f"WHERE rollout_id = ? AND prefix_hash IN ({marks}) "
                f"ORDER BY n_messages DESC, request_index DESC LIMIT 1",
                (rollout_id, *prefix_hashes),
            ).fetchone()
            if found is None:
                return None
            index, n_messages, depth = found
            recent = self._recent_ids.get(rollout_id, index)
            if recent is None:
                prompt, completion = self._ids(rollout_id, index)
                recent = _SpanIds(index, _unpack(prompt), _unpack(completion), depth or 0)
                self._recent_ids.put(rollout_id, recent)
        return PriorTurn(index, n_messages, recent.prompt_ids, recent.completion_ids)

    def span_by_response_id(self, rollout_id: str, response_id: str) -> Span | None:
        """The span of this rollout whose response carries `response_id` (Responses API chains)."""
        with self._lock:
            found = self._db.execute(
                f"SELECT {_SPAN_ROW} FROM spans WHERE rollout_id = ? "
                "AND json_extract(span, '$.response.id') = ? ORDER BY request_index DESC LIMIT 1",
                (rollout_id, response_id),
            ).fetchone()
            return self._spans(rollout_id, [found])[0] if found is not None else None

    def latest_span_messages(self, rollout_id: str) -> tuple[int, list[dict[str, Any]]] | None:
        """(request_index, messages + assistant reply) of the latest span, for diagnostics."""
        with self._lock:
            found = self._db.execute(
                "SELECT request_index, span, long_texts FROM spans WHERE rollout_id = ?"
                " ORDER BY request_index DESC LIMIT 1",
                (rollout_id,),
            ).fetchone()
            if found is None:
                return None
            span, at = orjson.loads(found[1]), orjson.loads(found[2]) if found[2] else []
            join(span, at, self._texts(set(hashes_at(span, at))))
        return found[0], [*span["messages"], span["reply_message"]]

    def add_retry(self, rollout_id: str, request_index: int, at: float) -> Span:
        """Append `at` to the span's `retried_at` (the client re-sent its request); the updated span."""
        with self._lock:
            with self._write() as db:
                row = db.execute(
                    f"SELECT {_SPAN_ROW} FROM spans WHERE rollout_id = ? AND request_index = ?",
                    (rollout_id, request_index),
                ).fetchone()
                fields = orjson.loads(row[1])
                fields["retried_at"] = [*fields.get("retried_at", []), at]
                span = orjson.dumps(fields).decode()
                db.execute("UPDATE spans SET span = ? WHERE rollout_id = ? AND request_index = ?",
                           (span, rollout_id, request_index))
            return self._spans(rollout_id, [(row[0], span, *row[2:])])[0]

    def count_spans(self, rollout_id: str) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM spans WHERE rollout_id = ?", (rollout_id,)).fetchone()
        return count
