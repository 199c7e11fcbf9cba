"""The worker API over real HTTP on loopback: auth, validation of hostile requests, leases,
reports, the plan, health and metrics; fuzzed against its own OpenAPI schema."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from crawler.remote import RemoteQueueError, RemoteWorkQueue
from service.api.app import ApiSettings
from store import (
    Database,
    FetchResult,
    LeasePolicy,
    PlanDraft,
    PlanPeriodDraft,
    add_pages,
    publish_plan,
)
from store.errors import LeaseNotFoundError
from store.models import Page
from store.types import utcnow
from tests.api_server import TOKEN, ApiServer
from tests.conftest import orm_all

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(db: Database) -> Iterator[ApiServer]:
    add_pages(db, [(f"http://a.test/{i}", "http://a.test") for i in range(5)])
    add_pages(db, [(f"http://b.test/{i}", "http://b.test") for i in range(5)])
    settings = ApiSettings(
        tokens=(TOKEN,),
        policy=LeasePolicy(max_urls=50, max_urls_per_host=10),
        max_results=20,
        max_new_urls=50,
        max_body_bytes=64 * 1024,
        release_every=None,
    )
    with ApiServer(db, settings) as server:
        yield server


def _post(api: ApiServer, path: str, body: object, **kw: object) -> requests.Response:
    headers = kw.pop("headers", AUTH)
    return requests.post(api.url + path, json=body, headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def test_health_and_openapi_need_no_token(api: ApiServer) -> None:
    health = requests.get(api.url + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    spec = requests.get(api.url + "/openapi.json", timeout=10).json()
    routes = {(m.upper(), path) for path, ops in spec["paths"].items() for m in ops}
    # Every endpoint of the table in service/api/app.py's docstring, and no other.
    assert routes == {
        ("POST", "/v1/leases"),
        ("POST", "/v1/leases/{lease_id}/renew"),
        ("POST", "/v1/leases/{lease_id}/report"),
        ("POST", "/v1/leases/{lease_id}/finish"),
        ("POST", "/v1/leases/{lease_id}/release"),
        ("POST", "/v1/pages"),
        ("POST", "/v1/urgent"),
        ("POST", "/v1/notifications"),
        ("GET", "/v1/work"),
        ("GET", "/v1/plan"),
        ("GET", "/health"),
        ("GET", "/metrics"),
    }
    secured = {p for p, ops in spec["paths"].items() for op in ops.values() if "security" in op}
    assert secured == {p for _, p in routes if p.startswith("/v1/")}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}],
)
def test_bad_tokens_get_401(api: ApiServer, headers: dict[str, str]) -> None:
    response = _post(api, "/v1/leases", {"worker": "w"}, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert requests.get(api.url + "/v1/plan", headers=headers, timeout=10).status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"worker": "w", "max_urls": "ten"}, "max_urls"),
        ({"worker": "w", "max_urls": 0}, "max_urls"),
        ({"worker": "w", "max_urls": 10**9}, "max_urls"),
        ({"worker": ""}, "worker"),
        ({"worker": "a b/../c"}, "worker"),
        ({"worker": "w", "admin": True}, "admin"),
        ({}, "worker"),
        ([], "body"),
    ],
)
def test_malformed_lease_requests_get_422_naming_the_field(
    api: ApiServer, body: object, field: str
) -> None:
    response = _post(api, "/v1/leases", body)
    assert response.status_code == 422
    assert field in str(response.json()["detail"])


def test_lease_report_finish_round_trip(api: ApiServer) -> None:
    response = _post(api, "/v1/leases", {"worker": "w1", "max_urls": 4})
    assert response.status_code == 200
    leases = response.json()["leases"]
    assert leases and sum(len(x["pages"]) for x in leases) <= 4
    lease = leases[0]
    now = utcnow().isoformat()
    result = {
        "page_id": lease["pages"][0]["page_id"],
        "fetched_at": now,
        "status": "ok",
        "http_status": 200,
        "changed": None,
        "duration": 0.1,
    }
    path = f"/v1/leases/{lease['lease_id']}"
    first = _post(api, path + "/report", {"worker": "w1", "results": [result]})
    assert first.json() == {"recorded": 1, "duplicates": 0, "late": 0}
    again = _post(api, path + "/report", {"worker": "w1", "results": [result]})
    assert again.json() == {"recorded": 0, "duplicates": 1, "late": 0}  # idempotent
    assert _post(api, path + "/report", {"worker": "w2", "results": []}).status_code == 409
    done = _post(api, path + "/finish", {"worker": "w1", "results": [], "host": {}})
    assert done.status_code == 200 and done.json()["returned"] == len(lease["pages"]) - 1
    assert _post(api, "/v1/leases/999999/renew", {"worker": "w1"}).status_code == 404


def test_hostile_reports_are_refused_whole(api: ApiServer) -> None:
    (lease,) = _post(api, "/v1/leases", {"worker": "w", "max_urls": 1}).json()["leases"]
    path = f"/v1/leases/{lease['lease_id']}/report"
    good = {
        "page_id": lease["pages"][0]["page_id"],
        "fetched_at": utcnow().isoformat(),
        "status": "ok",
    }
    cases = [
        ({**good, "status": "pwned"}, "status"),
        ({**good, "fetched_at": "yesterday"}, "fetched_at"),
        ({**good, "fetched_at": "2026-01-01T00:00:00"}, "fetched_at"),  # no time zone
        ({**good, "http_status": 99}, "http_status"),
        ({**good, "page_id": -1}, "page_id"),
        ({**good, "etag": "x" * 10_000}, "etag"),
        ({**good, "outlinks": ["http://x.test/" + "a" * 3000]}, "outlinks"),
    ]
    for result, field in cases:
        response = _post(api, path, {"worker": "w", "results": [result]})
        assert response.status_code == 422, (field, response.text)
        assert field in str(response.json()["detail"])
    many = _post(api, path, {"worker": "w", "results": [good] * 21})
    assert many.status_code == 422 and "at most 20 results" in many.text
    huge = _post(api, path, {"worker": "w", "results": [], "pad": "x" * 100_000})
    assert huge.status_code == 413
    lying = requests.post(
        api.url + path,
        data=b'{"worker": "w", "results": []}' + b" " * 70_000,
        headers={**AUTH, "Content-Type": "application/json", "Content-Length": "10"},
        timeout=10,
    )
    assert lying.status_code in (400, 413, 422)
    assert _post(api, path, {"worker": "w", "results": [good]}).json()["recorded"] == 1


def test_a_chunked_body_over_the_cap_gets_413(api: ApiServer) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"worker": "w", "max_urls": 1, "pad": "'
        for _ in range(20):
            yield b"x" * 8192  # 160 KiB in all, no Content-Length: the cap is 64 KiB
        yield b'"}'

    response = requests.post(
        api.url + "/v1/leases",
        data=chunks(),
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413 and "over 65536 bytes" in response.text
    assert _post(api, "/v1/leases", {"worker": "w", "max_urls": 1}).status_code == 200


def test_a_retried_lease_call_gets_the_same_leases(api: ApiServer) -> None:
    body = {"worker": "w", "max_urls": 3, "request_id": "call-1"}
    first = _post(api, "/v1/leases", body).json()["leases"]
    again = _post(api, "/v1/leases", body).json()["leases"]
    assert first and again == first  # a lost answer is answered again, not leased twice
    other = _post(api, "/v1/leases", {**body, "request_id": "call-2"}).json()["leases"]
    assert {x["lease_id"] for x in other}.isdisjoint(x["lease_id"] for x in first)
    elsewhere = _post(api, "/v1/leases", {**body, "worker": "v"}).json()["leases"]
    assert {x["lease_id"] for x in elsewhere}.isdisjoint(x["lease_id"] for x in first)
    bad = _post(api, "/v1/leases", {**body, "request_id": "no spaces"})
    assert bad.status_code == 422 and "request_id" in bad.text


def test_new_pages_are_normalized_and_capped(api: ApiServer) -> None:
    response = _post(
        api, "/v1/pages", {"urls": ["HTTP://C.test:80/x#frag", "not a url", "http://c.test/x"]}
    )
    assert response.json() == {"added": 1, "known": 1, "unfetchable": 0, "rejected": 1}
    too_many = _post(api, "/v1/pages", {"urls": [f"http://c.test/{i}" for i in range(51)]})
    assert too_many.status_code == 422


def test_blocked_urls_are_stored_unfetchable(api: ApiServer, db: Database) -> None:
    """URLs a worker found disallowed by robots.txt are stored, but as unfetchable pages due
    when the worker's rules expire: never new pages."""
    check_at = utcnow() + timedelta(hours=3)
    body = {
        "urls": ["http://d.test/open"],
        "blocked": [
            {"url": "HTTP://d.test/private/1", "check_at": check_at.isoformat()},
            {"url": "ftp://d.test/private/2", "check_at": check_at.isoformat()},
        ],
    }
    response = _post(api, "/v1/pages", body)
    assert response.json() == {"added": 1, "known": 0, "unfetchable": 1, "rejected": 1}
    again = _post(api, "/v1/pages", body).json()
    assert again["unfetchable"] == 0 and again["added"] == 0
    pages = {p.url: p for p in orm_all(db, select(Page).where(Page.url.like("http://d.test/%")))}
    assert pages["http://d.test/open"].status == "new"
    blocked = pages["http://d.test/private/1"]
    assert blocked.status == "blocked" and blocked.discovered
    assert blocked.next_due_at is not None
    assert abs((blocked.next_due_at - check_at).total_seconds()) < 1e-3
    no_time = _post(api, "/v1/pages", {"urls": [], "blocked": [{"url": "http://d.test/x"}]})
    assert no_time.status_code == 422


def test_plan_health_and_metrics(api: ApiServer, db: Database) -> None:
    assert requests.get(api.url + "/v1/plan", headers=AUTH, timeout=10).status_code == 404
    now = utcnow()
    publish_plan(
        db,
        PlanDraft(
            starts_at=now,
            period_days=1.0,
            strategy="test",
            periods=[
                PlanPeriodDraft(1, now, now + timedelta(days=1), 10.0, 3, {7: 4, 9: 2}),
                PlanPeriodDraft(2, now + timedelta(days=1), now + timedelta(days=2), 10.0, 1, {}),
            ],
            inputs={},
            solver={},
        ),
    )
    plan = requests.get(api.url + "/v1/plan", headers=AUTH, timeout=10).json()
    assert plan["version"] == 1 and plan["periods"] == 2
    assert plan["period_quotas"][0]["quotas"] == {"7": 4, "9": 2}
    assert plan["period_quotas"][0]["new_pages"] == 3
    assert plan["period_quotas"][1]["new_pages"] == 1
    assert requests.get(api.url + "/health", timeout=10).json()["plan"] == 1
    text = requests.get(api.url + "/metrics", timeout=10).text
    assert "crawlplan_plan_version 1.0" in text
    assert 'crawlplan_api_requests_total{code="200",endpoint="/v1/plan"}' in text


def test_the_remote_queue_client(api: ApiServer, db: Database) -> None:
    queue = RemoteWorkQueue(api.url, TOKEN)
    assert queue.policy.lease_seconds == 60.0
    assert queue.work_remaining()
    leases = queue.lease("pool-0", max_urls=4)
    assert len(leases[0].pages) >= 2
    page = leases[0].pages[0]
    result = FetchResult(page.page_id, utcnow(), "ok", 200, duration=0.2, outlinks=())
    odd = FetchResult(  # a page with 6,000 links, one too long, and a huge error text
        leases[0].pages[1].page_id,
        utcnow(),
        "error",
        error="redirect to an invalid URL " + "x" * 3_000 + "\x00",
        outlinks=("http://a.test/" + "l" * 3_000, *(f"http://a.test/{i}" for i in range(6_000))),
    )
    with ApiServer(db) as roomy:  # the default 8 MiB body cap
        trimmed = RemoteWorkQueue(roomy.url, TOKEN)
        trimmed.worker = "pool-0"
        outcome, returned = trimmed.finish(leases[0].lease_id, [result, odd])
    assert outcome.recorded == 2 and returned == len(leases[0].pages) - 2
    with pytest.raises(LeaseNotFoundError):
        queue.renew(424242)
    bad = RemoteWorkQueue(api.url, "wrong-token-0123456789", retry_seconds=0)
    with pytest.raises(RemoteQueueError, match="HTTP 401"):
        bad.lease("x")
    gone = RemoteWorkQueue("http://127.0.0.1:9", TOKEN, retry_seconds=0)
    with pytest.raises(RemoteQueueError, match="cannot reach"):
        gone.work_remaining()


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
_result = st.fixed_dictionaries(
    {},
    optional={
        "page_id": st.integers() | _json,
        "fetched_at": st.datetimes().map(str) | _json,
        "status": st.sampled_from(["ok", "gone", "error", "x"]) | _json,
        "http_status": st.integers() | _json,
        "changed": st.booleans() | _json,
        "outlinks": st.lists(st.text(max_size=30), max_size=3) | _json,
    },
)


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.fixed_dictionaries(
        {"worker": st.text(max_size=8) | _json},
        optional={"results": st.lists(_result, max_size=3) | _json, "extra": _json},
    )
)
def test_fuzzed_reports_never_cause_a_server_error(api: ApiServer, body: dict[str, object]) -> None:
    for path in ("/v1/leases/1/report", "/v1/leases/1/finish", "/v1/leases", "/v1/pages"):
        response = _post(api, path, body)
        assert response.status_code < 500, (path, body, response.text)


def test_out_of_range_numbers_and_times_get_422_not_500(api: ApiServer) -> None:
    huge = _post(api, "/v1/leases/99999999999999999999/report", {"worker": "w", "results": []})
    assert huge.status_code == 422
    (lease,) = _post(api, "/v1/leases", {"worker": "w", "max_urls": 1}).json()["leases"]
    path = f"/v1/leases/{lease['lease_id']}/report"
    result = {
        "page_id": lease["pages"][0]["page_id"],
        "status": "ok",
        "fetched_at": "9999-12-31T23:00:00-05:00",
    }
    far = _post(api, path, {"worker": "w", "results": [result]})
    assert far.status_code == 422 and "1970 and 9000" in far.text
    nul = {**result, "fetched_at": utcnow().isoformat(), "error": "a\x00b", "etag": "x\x00"}
    assert _post(api, path, {"worker": "w", "results": [nul]}).json()["recorded"] == 1
