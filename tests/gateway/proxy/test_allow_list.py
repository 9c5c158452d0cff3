"""The proxy's model allow-lists: a key's and its department's, each enforced on its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.bench.fake_upstream import MODEL
from tests.gateway.helpers import embedded_gateway
from tests.gateway.traffic.conftest import WORKER_TOKEN, read_records, set_limits
from tests.gateway.traffic.processes import fake_worker

OTHER = "some-other-model"


def _chat(client: TestClient, key: str, model: str) -> tuple[int, dict[str, object]]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    response = client.post(
        "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    )
    return response.status_code, response.json()


def _listed(client: TestClient, key: str) -> list[str]:
    response = client.get("/v1/models", headers={"authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return [card["id"] for card in response.json()["data"]]


def test_key_and_department_allow_lists_refuse_other_models_through_the_proxy(
    tmp_path: Path,
) -> None:
    with fake_worker() as (worker_url, upstream):
        gateway = embedded_gateway(tmp_path, workers=worker_url, worker_token=WORKER_TOKEN)
        settings = gateway.settings
        # "open" has no list of its own; "narrow" admits only OTHER, "wide" only MODEL.
        for slug in ("open", "narrow", "wide"):
            asyncio.run(admin_tasks.create_department(settings, slug.title(), slug))
        asyncio.run(set_limits(settings, "narrow", allowed_models=[OTHER]))
        asyncio.run(set_limits(settings, "wide", allowed_models=[MODEL]))
        lists = {  # each key's department and its own allow-list
            "key_admits": ("open", [MODEL]),
            "key_refuses": ("open", [OTHER]),
            "dept_refuses": ("narrow", None),
            "dept_admits": ("wide", None),
            "both_admit": ("wide", [MODEL]),
        }
        keys = {
            name: asyncio.run(admin_tasks.create_key(settings, slug, name, models, None))
            for name, (slug, models) in lists.items()
        }
        with TestClient(app=create_app(settings)) as client:
            for name in ("key_refuses", "dept_refuses"):
                status, body = _chat(client, keys[name], MODEL)
                assert status == 403, (name, body)
                error = body["error"]
                assert isinstance(error, dict)
                assert error["code"] == "model_not_allowed" and error["param"] == "model"
                assert error["type"] == "permission_error"
                assert _listed(client, keys[name]) == []  # /v1/models hides what is refused
            for name in ("key_admits", "dept_admits", "both_admit"):
                status, body = _chat(client, keys[name], MODEL)
                assert status == 200, (name, body)
                assert body["model"] == MODEL
                assert _listed(client, keys[name]) == [MODEL]
            # The lists are checked before the model is looked up: a model no worker serves
            # is refused as not allowed where a list leaves it out, and unknown where not.
            assert _chat(client, keys["dept_admits"], OTHER)[0] == 403
            assert _chat(client, keys["key_refuses"], OTHER)[0] == 404
        assert upstream.completions == 3  # only the admitted requests reached the worker
    # Every request, refused or not, has its audit record with the reason.
    records = asyncio.run(read_records(settings.effective_database_url))
    chats = [(r["status_code"], r["reason"]) for r in records if r["endpoint"] != "models"]
    assert sorted(chats) == sorted(
        [(403, "model_not_allowed")] * 3 + [(200, "")] * 3 + [(404, "model_not_found")]
    )
