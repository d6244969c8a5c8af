"""One page of a listing (``GET /windows``, ``/stress``, ``/workloads``): ``?limit=`` (1 to
``MAX_LIMIT``, ``DEFAULT_LIMIT`` by default) items from ``?offset=``, so that no answer holds more than
``MAX_LIMIT`` of them, however long the history it lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, TypeVar

from pydantic import ConfigDict, Field, ValidationError

from warptd.http.app import Request
from warptd.http.protection import validation_error
from warptd.models import WireModel

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: The furthest offset asked for: more than any listing holds (histories are capped at 10,000).
MAX_OFFSET = 1_000_000
Item = TypeVar("Item")


class PageQuery(WireModel):
    """``?limit=N&offset=M`` of a listing; other parameters are not its business."""

    model_config = ConfigDict(extra="ignore")
    errors: ClassVar[tuple[int, ...]] = (422,)

    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="items in this page")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="items of the listing before this page")

    @classmethod
    def of(cls, request: Request) -> PageQuery:
        """The request's page; 422 naming the parameter where it is not a number in range."""
        asked = {name: request.query[name][0] for name in ("limit", "offset") if name in request.query}
        try:
            return cls.model_validate(asked)
        except ValidationError as exc:
            raise validation_error(exc, "page") from None

    def cut(self, items: Sequence[Item]) -> list[Item]:
        return list(items[self.offset : self.offset + self.limit])

    def next(self, path: str, total: int) -> str | None:
        """The path of the page after this one, or None where this one reaches the end."""
        after = self.offset + self.limit
        return f"{path}?offset={after}&limit={self.limit}" if after < total else None
