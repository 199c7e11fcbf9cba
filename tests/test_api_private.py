"""The worker API refuses private targets where URLs are queued (issue 26, item 1).

A token holder used to be able to queue ``http://169.254.169.254/...`` (the cloud metadata
service); it was refused only when fetched. Address literals and ``localhost`` are judged at
the door, without DNS; names are checked again, resolved, when fetched.
"""

from __future__ import annotations

import pytest
import requests
from sqlalchemy import select

from service.api.app import ApiSettings
from store import Database
from store.models import Page
from tests.api_server import TOKEN, ApiServer
from tests.conftest import orm_all

AUTH = {"Authorization": f"Bearer {TOKEN}"}
PRIVATE = [
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:8080/admin",
    "http://localhost/x",
    "http://db.localhost/x",
    "http://10.0.0.7/x",
    "http://[::1]/x",
    "http://[::ffff:127.0.0.1]/x",
]
PUBLIC = ["http://public.test/a", "http://93.184.215.14/b"]


@pytest.mark.parametrize("allow_private", [False, True])
def test_private_targets_are_rejected_at_the_door(db: Database, allow_private: bool) -> None:
    settings = ApiSettings(tokens=(TOKEN,), release_every=None, allow_private=allow_private)
    with ApiServer(db, settings) as api:

        def post(path: str, body: object) -> dict[str, int]:
            response = requests.post(api.url + path, json=body, headers=AUTH, timeout=10)
            assert response.status_code == 200, response.text
            result: dict[str, int] = response.json()
            return result

        refused = 0 if allow_private else len(PRIVATE)
        pages = post("/v1/pages", {"urls": PRIVATE + PUBLIC})
        assert (pages["added"], pages["rejected"]) == (
            len(PUBLIC) + len(PRIVATE) - refused,
            refused,
        )
        urgent = post("/v1/urgent", {"urls": [PRIVATE[0]]})
        assert urgent["rejected"] == (0 if allow_private else 1)
        notes = post("/v1/notifications", {"notifications": [{"url": PRIVATE[0]}]})
        assert notes["rejected"] == (0 if allow_private else 1)
    stored = {p.url for p in orm_all(db, select(Page))}
    assert set(PUBLIC) <= stored
    assert any("169.254.169.254" in url for url in stored) == allow_private
