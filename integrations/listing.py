"""The keyword arguments of `CrmAdapter.iter_records`, the one read that pages through
a CRM's records (reconciliation's scan); an absent key takes the default noted.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

# How many records a page of `CrmAdapter.iter_records` asks for when the caller names none.
LISTING_LIMIT = 2000


class RecordListing(TypedDict):
    """`CrmAdapter.iter_records`'s arguments."""

    since: str
    until: NotRequired[str | None]  # default None
    cursor: NotRequired[str | None]  # default None
    limit: NotRequired[int]  # default LISTING_LIMIT


def listing_limit(listing: RecordListing) -> int:
    """How many records a page of the listing asks for: the caller's, else LISTING_LIMIT."""
    return listing.get("limit", LISTING_LIMIT)
