"""The console's one error: something asked for does not exist. Pages answer it with a 404 page, the
JSON API with a 404 body; both say what does exist, so the next click can be right."""

from __future__ import annotations


class NotFound(LookupError):
    def __init__(self, what: str, exists: list[str], hint: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.exists = exists
        self.hint = hint

    def as_dict(self) -> dict[str, object]:
        return {"error": f"{self.what} not found", "exists": self.exists, "hint": self.hint}
