"""The worker API fuzzed from its own OpenAPI schema (schemathesis): no input gets a 5xx,
every 4xx says what was wrong; NaN and Infinity in number fields get a 422 naming the field;
a failure inside a route is a 500 without details, counted in ``/metrics``.

One API server (SQLite) serves the whole module. Schemathesis generates both valid and
invalid bodies, paths and query strings for every operation (``max_examples`` each).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation.modes import GenerationMode
from schemathesis.schemas import APIOperation

from service.api.app import ApiSettings
from store import LeasePolicy, add_pages, open_database, upgrade_schema
from tests.api_server import TOKEN, ApiServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    path = tmp_path_factory.mktemp("fuzz") / "crawlplan.db"
    db = open_database(f"sqlite:///{path}", create=True)
    upgrade_schema(db)
    add_pages(db, [(f"http://a.test/{i}", "http://a.test") for i in range(20)])
    settings_ = ApiSettings(
        tokens=(TOKEN,),
        policy=LeasePolicy(max_urls=5, max_urls_per_host=5),
        max_results=20,
        max_new_urls=50,
        max_body_bytes=64 * 1024,
        release_every=None,
    )
    with ApiServer(db, settings_) as api:
        yield api


@pytest.fixture(scope="module")
def operations(server: ApiServer) -> list[APIOperation]:
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    schema.config.update(base_url=server.url)
    return [result.ok() for result in schema.get_all_operations()]


def assert_says_what_was_wrong(response: requests.Response) -> None:
    """No 5xx; a 4xx is JSON whose ``detail`` is a message, or a list of errors each naming
    its field (``loc``) and what is wrong with it (``msg``)."""
    assert response.status_code < 500, (response.request.method, response.url, response.text)
    if response.status_code >= 400:
        detail = response.json()["detail"]
        if isinstance(detail, list):
            assert detail, response.text
            for item in detail:
                assert item["loc"] and item["msg"], response.text
        else:
            assert isinstance(detail, str) and len(detail) > 5, response.text


# Known flaky (2026-11-26): one clean-clone run in three saw the loopback server reset a
# connection mid-body under load; rerun twice before failing. The cause is open.
@pytest.mark.flaky(reruns=2)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_gets_a_server_error(operations: list[APIOperation], mode: GenerationMode) -> None:
    """Every operation, with bodies, paths and queries that fit its schema (positive) and
    that break it (negative): no 5xx, and a 4xx that says what was wrong."""
    assert len(operations) >= 12  # an empty schema would pass vacuously
    nothing_to_break = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=20,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def call(case: schemathesis.Case) -> None:
            response = case.call(headers=AUTH, timeout=10)
            assert_says_what_was_wrong(response)

        try:
            call()
        except Unsatisfiable:  # negative mode: an operation with no input to break
            nothing_to_break.append(operation.label)
    assert len(nothing_to_break) <= 4, nothing_to_break


_RESULT = {"page_id": 1, "status": "ok", "fetched_at": "2026-11-25T00:00:00Z"}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/leases", '{"worker": "w", "max_urls": NaN}', ["body", "max_urls"]),
        ("/v1/leases", '{"worker": "w", "max_urls": Infinity}', ["body", "max_urls"]),
        (
            "/v1/leases/1/report",
            json.dumps({"worker": "w", "results": [{**_RESULT, "duration": float("nan")}]}),
            ["body", "results", 0, "duration"],
        ),
        (
            "/v1/leases/1/report",
            json.dumps({"worker": "w", "results": [{**_RESULT, "page_id": float("inf")}]}),
            ["body", "results", 0, "page_id"],
        ),
        (
            "/v1/leases/1/release",
            json.dumps({"worker": "w", "host": {"crawl_delay": float("-inf")}}),
            ["body", "host", "crawl_delay"],
        ),
        (
            "/v1/leases/1/finish",
            json.dumps({"worker": "w", "host": {"robots_status": float("nan")}}),
            ["body", "host", "robots_status"],
        ),
    ],
)
def test_nan_and_infinity_get_a_422_naming_the_field(
    server: ApiServer, path: str, body: str, field: list[object]
) -> None:
    """These were 500s with a traceback: the 422 echoed the NaN, which JSON cannot hold."""
    response = requests.post(
        server.url + path,
        data=body,
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"] == field and e["msg"] == "Input should be a finite number" for e in errors)


def test_a_failure_inside_a_route_is_a_counted_500(
    server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_db: object) -> bool:
        raise RuntimeError("a bug")

    monkeypatch.setattr("service.api.routers.plans.work_remaining", broken)
    response = requests.get(server.url + "/v1/work", headers=AUTH, timeout=10)
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error (logged by the server)"}
    assert "a bug" not in response.text
    metrics = requests.get(server.url + "/metrics", timeout=10).text
    assert 'crawlplan_api_requests_total{code="500",endpoint="/v1/work"} 1.0' in metrics
