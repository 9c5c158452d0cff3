"""POST /api/admin/assistants/tokens: a system prompt's length in tokens, counted by a real
worker (a tiny random checkpoint, on the CPU) as the chat template wraps a system message;
503 when no worker can count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.gateway.assistants.conftest import Office, office_on
from tests.gateway.helpers import embedded_gateway

PATH = "/api/admin/assistants/tokens"
TEXT = "You answer quality questions about our 8D reports, briefly and precisely."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.inference.checkpoints import make_checkpoint

    return make_checkpoint("llama", tmp_path_factory.mktemp("assistants-llama"))


@pytest.fixture(scope="module")
def worker(checkpoint: Path) -> Iterator[str]:
    from inference.server.app import create_app
    from inference.server.settings import ServerSettings
    from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_app(tiny_engine(checkpoint), settings)) as url:
        yield url


def test_a_worker_counts_the_system_message(tmp_path: Path, worker: str, checkpoint: Path) -> None:
    from tests.inference.server.conftest import API_KEY

    gateway = embedded_gateway(tmp_path, workers=worker, worker_token=API_KEY)
    with office_on(gateway) as office:
        check_counts(office, checkpoint)


def check_counts(office: Office, checkpoint: Path) -> None:
    from tests.inference.server.conftest import MODEL

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    for text in (TEXT, TEXT * 20, ""):
        rendered = tokenizer.apply_chat_template(
            [{"role": "system", "content": text}], tokenize=False, add_generation_prompt=False
        )
        expected = tokenizer.encode(rendered, add_special_tokens=False)
        counted = office.admin.ok("POST", PATH, {"text": text})
        assert counted == {"tokens": len(expected), "model": MODEL}
    named = office.admin.ok("POST", PATH, {"text": TEXT, "model": MODEL})
    assert named["model"] == MODEL
    unknown = office.admin.call("POST", PATH, {"text": TEXT, "model": "nope"})
    assert unknown.status_code == 400 and "does not exist" in unknown.json()["detail"]
    for body in ({}, {"text": 3}, {"text": "x" * (256 * 1024 + 1)}, {"text": "a", "x": 1}):
        assert office.admin.call("POST", PATH, body).status_code == 400, body


def test_no_worker_to_count_is_a_503(tmp_path: Path) -> None:
    with office_on(embedded_gateway(tmp_path)) as office:
        reply = office.admin.call("POST", PATH, {"text": TEXT})
    assert reply.status_code == 503, reply.text
    assert "no worker is up" in reply.json()["detail"]


def test_a_worker_that_cannot_count_is_a_503(sqlite_office: Office) -> None:
    # The stub worker is healthy but serves no /tokenize.
    reply = sqlite_office.admin.call("POST", PATH, {"text": TEXT})
    assert reply.status_code == 503 and "could not count" in reply.json()["detail"], reply.text
