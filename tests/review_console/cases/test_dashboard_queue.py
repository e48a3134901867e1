"""The dashboard's trends and the queue's chips, on PostgreSQL.

Cases are opened through the services (tests/factories.py) and settled through
the review services, so the figures are those of the states production makes.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.models import Destination, Operation, ReconciliationRun, ReviewCase
from idempotency_core.review.cases import case_close, case_take_ownership
from review_console.cases.bulk import bulk_replay_run
from review_console.cases.dashboard import dashboard_summary
from review_console.glossary import kind_label
from review_console.models import BulkReplayJob
from tests.factories import permanent_case

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _opened_days_ago(case: ReviewCase, days: int) -> None:
    ReviewCase.objects.filter(pk=case.pk).update(created_at=timezone.now() - timedelta(days=days))


def test_the_dashboard_counts_cases_per_day_and_the_median_time_to_settle(users):
    rita = users["reviewer"]
    cases = [permanent_case(f"trend-{i}") for i in range(4)]
    _opened_days_ago(cases[0], 5)
    _opened_days_ago(cases[1], 1)
    _opened_days_ago(cases[2], 40)  # outside the 30 days: not in the trend
    for case in cases[:2]:
        case_close(case_id=case.pk, actor=rita, resolution_code="other", reason="done")
    summary = dashboard_summary()
    trend = {row["day"].date(): (row["opened"], row["settled"]) for row in summary["trend"]}
    today = timezone.now().date()
    assert len(trend) == 30 and max(trend) == today
    assert trend[today] == (1, 2)  # one opened today, both closures today
    assert trend[today - timedelta(days=5)] == (1, 0)
    assert trend[today - timedelta(days=1)] == (1, 0)
    assert sum(o for o, _ in trend.values()) == 3
    # Settled after 5 days and after 1 day: the median is 3 days.
    settle = summary["settle"]
    assert settle["count"] == 2
    assert abs(settle["median"] - timedelta(days=3)) < timedelta(minutes=1)
    assert settle["median_words"] == "3.0 days"
    # The open ones by age: 1 under an hour, 1 over 7 days (opened 40 days ago).
    assert [b["count"] for b in summary["ages_chart"]] == [1, 0, 0, 1]

    page = _client(rita).get(reverse("console:dashboard")).content.decode()
    assert "3.0 days" in page
    # Each chart readable as text: the trend's table, the ages in the caption.
    table = page.split('aria-label="Cases opened and settled per day"', 1)[1].split("</table>")[0]
    assert f'<th scope="row">{today:%Y-%m-%d}</th><td>1</td><td>2</td>' in table
    caption = re.search(r'<figcaption id="age-caption"[^>]*>(.*?)</figcaption>', page, re.S)
    assert caption and "under 1 h: 1" in caption.group(1) and "over 7 days: 1" in caption.group(1)


def test_the_dashboard_figures_follow_a_decision_at_once(users):
    """The counted history is reused for a minute, but not past a new decision."""
    rita = users["reviewer"]
    case = permanent_case("fresh-1")
    assert dashboard_summary()["settle"]["count"] == 0
    case_close(case_id=case.pk, actor=rita, resolution_code="other", reason="done")
    assert dashboard_summary()["settle"]["count"] == 1


def test_the_dashboard_shows_my_cases_and_the_last_reconciliation(users):
    rita = users["reviewer"]
    mine, other = permanent_case("mine-1"), permanent_case("mine-2")
    case_take_ownership(case_ids=[mine.pk], actor=rita, take_over=False)
    # A run as the reconciliation command leaves it (its own tests run it for real).
    now = timezone.now()
    run = ReconciliationRun.objects.create(
        destination=Destination.objects.get(name="crm"),
        since=now - timedelta(days=1),
        until=now,
        as_of=now,
        listing_since=now - timedelta(days=1),
        listing_until=now,
        status="completed",
        findings_total={"missing": 2, "orphan": 1, "stuck": 0},
        findings_new={"missing": 1, "orphan": 1, "stuck": 0},
        finished_at=now,
    )
    page = _client(rita).get(reverse("console:dashboard")).content.decode()
    my_cases = page.split('id="my-cases"', 1)[1].split("</div>", 1)[0]
    assert f"Case #{mine.pk}</a>" in my_cases and f"Case #{other.pk}<" not in my_cases
    recon = page.split('id="last-reconciliation"', 1)[1].split("</div>\n</div>", 1)[0]
    assert reverse("console:reconciliation-run", args=[run.pk]) in recon
    assert '<th scope="row">Missing</th><td>2</td><td>1</td>' in recon
    assert '<th scope="row">Orphan record</th><td>1</td><td>1</td>' in recon
    assert "Stuck" not in recon  # nothing found of that kind
    nobody = _client(users["replay_admin"]).get(reverse("console:dashboard")).content.decode()
    assert "You own no open case" in nobody


# -- the queue ------------------------------------------------------------------


def _chips(html: str, group: str) -> dict[str, tuple[int | None, str, bool]]:
    """A chip group: label -> (count or None, href, active)."""
    nav = html.split(f'<nav aria-label="{group}"', 1)[1].split("</nav>", 1)[0]
    chips = {}
    for href, active, body in re.findall(
        r'<a class="btn[^"]*" href="([^"]+)"( aria-current="true")?>(.*?)</a>', nav
    ):
        count = re.search(r"<span class=\"badge\" data-count>(\d+)</span>", body)
        label = re.sub(r"<span.*", "", body).strip()
        chips[label] = (
            int(count.group(1)) if count else None,
            href.replace("&amp;", "&"),
            bool(active),
        )
    return chips


def test_the_queue_filters_by_chips_with_counts_that_follow_the_other_filters(users):
    rita = users["reviewer"]
    cases = [permanent_case(f"chip-{i}") for i in range(3)]
    case_take_ownership(case_ids=[cases[0].pk], actor=rita, take_over=False)
    client = _client(rita)
    page = client.get(reverse("console:case-list")).content.decode()
    assert "<select" not in page or " multiple" not in page  # chips, not multi-selects
    kinds = _chips(page, "Kind")
    assert kinds["All kinds"][0] == 3 and kinds["All kinds"][2] is True
    permanent = kind_label("permanent_failure")
    assert kinds[permanent][:2] == (3, "?kind=permanent_failure")
    owners = _chips(page, "Owner")
    assert (owners["Mine"][0], owners["No owner"][0]) == (1, 2)
    # Following a chip: the kind counts now count only the viewer's cases.
    mine = client.get(reverse("console:case-list") + "?" + owners["Mine"][1].lstrip("?"))
    html = mine.content.decode()
    assert _chips(html, "Owner")["Mine"][2] is True
    assert _chips(html, "Kind")[permanent][0] == 1
    assert html.count('<li class="case-card" data-href=') == 1
    statuses = _chips(html, "Status")
    assert statuses["Open and in progress"][2] is True and statuses["Closed"][0] is None


def test_the_queue_shows_the_customer_masked_for_the_viewer_and_whole_row_links(users):
    case = permanent_case("customer-1")
    masked = _client(users["reviewer"]).get(reverse("console:case-list")).content.decode()
    url = reverse("console:case-detail", args=[case.pk])
    row = masked.split(f'<li class="case-card" data-href="{url}"', 1)[1].split("</li>", 1)[0]
    assert "A. L." in row and "Ada Lovelace" not in row and "ada@example.com" not in row
    full = _client(users["superuser"]).get(reverse("console:case-list")).content.decode()
    assert "Ada Lovelace" in full  # the card names the customer, unmasked for this viewer
    assert 'data-select-all="queue-form"' in full and "review_console/queue.js" in full


def test_replay_selected_replays_the_ticked_cases_and_never_everything(users):
    cases = [permanent_case(f"pick-{i}") for i in range(3)]
    client = _client(users["replay_admin"])
    nothing = client.post(
        reverse("console:bulk-replay-new"), {"selected": "yes", "next": "/x"}, follow=True
    )
    assert "Select at least one case to replay." in nothing.content.decode()
    assert not BulkReplayJob.objects.exists()
    picked = [str(cases[0].pk), str(cases[2].pk)]
    confirm = client.post(reverse("console:bulk-replay-new"), {"selected": "yes", "case": picked})
    assert confirm.status_code == 200 and "<strong>2 cases</strong>" in confirm.content.decode()
    client.post(
        reverse("console:bulk-replay-new"),
        {"case": picked, "confirm": "yes", "reason": "The CRM accepts them again"},
    )
    job = BulkReplayJob.objects.get()
    while bulk_replay_run(job_id=job.pk, chunk_seconds=0.5) != "finished":
        pass
    job.refresh_from_db()
    assert job.total == 2
    assert sorted(job.items.values_list("case_id", flat=True)) == sorted(int(p) for p in picked)
    replayed = Operation.objects.filter(status="retry_scheduled").values_list("pk", flat=True)
    assert sorted(replayed) == sorted(c.operation_id for c in (cases[0], cases[2]))


def test_a_chip_count_stops_at_its_cap(users, monkeypatch):
    """Counts read at most CHIP_COUNT_CAP + 1 rows each and say "N+" beyond it."""
    monkeypatch.setattr("review_console.cases.selectors.CHIP_COUNT_CAP", 2)
    for i in range(3):
        permanent_case(f"cap-{i}")
    page = _client(users["reviewer"]).get(reverse("console:case-list")).content.decode()
    nav = page.split('<nav aria-label="Kind"', 1)[1].split("</nav>", 1)[0]
    assert nav.count('<span class="badge" data-count>2+</span>') == 2  # all kinds, the kind
    owner = page.split('<nav aria-label="Owner"', 1)[1].split("</nav>", 1)[0]
    assert '<span class="badge" data-count>2+</span>' in owner and "data-count>0<" in owner
