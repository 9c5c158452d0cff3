"""Department assistants, end to end: an admin gives Research an assistant with a manual of
about 2,000 tokens and a report template; a Research employee chats with it and exports a
filled report; its first answer already reads the manual from the worker's prefix cache;
people and keys of another department neither see nor use it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from playwright.sync_api import Browser, Page, expect

from gateway import admin_tasks
from gateway.bench.shift_change import manual_text
from inference.server.app import create_app as create_worker_app
from inference.server.settings import ServerSettings
from tests.e2e.conftest import Appliance, browsing, off_loop
from tests.e2e.flows import IMAGES, answers, csrf_of, send, serious_violations, sign_in_with_sso
from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

SLUG = "research-ncr"
# About 2,000 tokens of the tiny checkpoint's tokenizer (about 1.5 characters a token).
MANUAL = manual_text(3_000)
TEMPLATE = {
    "type": "object",
    "required": ["lot", "defect"],
    "properties": {
        "lot": {"type": "string", "title": "Lot", "maxLength": 40},
        "defect": {"type": "string", "title": "Defect"},
        "severity": {"type": "string", "enum": ["minor", "major"]},
        "quantity": {"type": "integer"},
    },
}


@pytest.fixture(scope="module")
def e2e_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's worker: the tiny checkpoint with room for the manual (4,096 tokens)."""
    from tests.inference.checkpoints import make_checkpoint

    checkpoint = make_checkpoint(
        "llama", tmp_path_factory.mktemp("assistants-worker"), max_position_embeddings=4096
    )
    engine = tiny_engine(checkpoint, max_model_len=4096, kv_cache_memory_bytes=64 << 20)
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_worker_app(engine, settings)) as url:
        yield url


def _create_assistant(admin: Page, manual_file: Path) -> int:
    """Through the console; the manual comes as an uploaded Markdown file. Its tokens."""
    admin.get_by_role("link", name="Assistants").click()
    admin.get_by_role("button", name="New assistant").click()
    form = admin.get_by_role("form", name="New assistant")
    form.get_by_label("Department", exact=True).select_option(label="Research")
    form.get_by_label("Name", exact=True).fill("Research NCR")
    form.get_by_label("Slug").fill(SLUG)
    form.get_by_label("Max tokens").fill("8")
    form.get_by_label("The department's default assistant").check()
    form.locator("input[type=file]").set_input_files(str(manual_file))
    expect(form.get_by_label(re.compile("^System prompt"))).to_have_value(MANUAL)
    counted = form.locator("[data-prompt-tokens]")
    expect(counted).to_have_text(re.compile(r"^[\d,]+ tokens$"))
    tokens = int(counted.inner_text().split()[0].replace(",", ""))
    template = form.get_by_label(re.compile("^Response template"))
    template.fill('{"type": "string"}')
    expect(form.get_by_text('must be "object"')).to_be_visible()
    expect(form.get_by_role("button", name="Create assistant")).to_be_disabled()
    template.fill(json.dumps(TEMPLATE))
    expect(form).to_contain_text("The report has 4 fields: Lot, Defect, severity, quantity.")
    form.get_by_role("button", name="Create assistant").click()
    row = admin.locator(f"tr[data-assistant={SLUG}]")
    expect(row).to_contain_text("Research NCR (default)")
    expect(row).to_contain_text("v1")
    # Warmed on the worker: the page looks again a moment after the save.
    expect(row.locator("[data-warm]")).to_have_attribute("data-warm", "warm", timeout=20_000)
    # The list counts the whole system message: the manual and the template's request.
    stored = row.locator("td").nth(4).inner_text()
    assert int(stored.split()[0].replace(",", "")) > tokens, stored
    admin.get_by_role("button", name="Versions of Research NCR").click()
    versions = admin.get_by_role("region", name="Versions of Research NCR")
    expect(versions).to_contain_text("v1 (current)")
    return tokens


def test_a_department_assistant_answers_from_its_warm_manual_and_fills_a_report(
    browser: Browser, appliance: Appliance, tmp_path: Path
) -> None:
    manual_file = tmp_path / "manual.md"
    manual_file.write_text(MANUAL)
    # bypass_csp: axe is injected as an inline script, which the app's policy refuses.
    with browsing(browser, appliance, bypass_csp=True) as (_, admin):
        sign_in_with_sso(admin, "bob")  # an admin, of Legal
        admin.get_by_role("link", name="Admin console").click()
        tokens = _create_assistant(admin, manual_file)
        assert 1_500 <= tokens <= 2_500, tokens
        admin.get_by_role("button", name="Edit Research NCR").click()
        expect(admin.get_by_role("form", name="Edit Research NCR")).to_be_visible()
        admin.screenshot(path=str(IMAGES / "admin-assistants.png"), full_page=True)
        assert serious_violations(admin, "assistants") == []
        # Bob's own chat (Legal) offers no Research assistant.
        admin.get_by_role("link", name="Chat").click()
        picker = admin.get_by_label("Chat with")
        expect(picker).to_be_visible()
        expect(picker.locator("option", has_text="Research NCR")).to_have_count(0)

    with browsing(browser, appliance, accept_downloads=True, bypass_csp=True) as (_, alice):
        sign_in_with_sso(alice, "alice")  # Research: the assistant is her default
        expect(alice.get_by_label("Chat with")).to_have_value(re.compile("^assistant:"))
        expect(alice.locator(f"[data-hello-assistant={SLUG}]")).to_be_visible()
        expect(alice.get_by_role("button", name="System prompt")).to_have_count(0)
        send(alice, "Draft the report for lot 7.")
        expect(answers(alice)).to_have_count(1, timeout=30_000)
        report = alice.get_by_role("form", name="Report")
        expect(report).to_be_visible()
        export = report.get_by_role("button", name="Export report")
        report.get_by_label("Lot *").fill("L-7")
        report.get_by_label("Defect *").fill("burr on the seat")
        report.get_by_label("severity").select_option("major")
        report.get_by_label("quantity").fill("12.5")
        expect(report).to_contain_text("quantity: not a whole number.")
        expect(export).to_be_disabled()
        report.get_by_label("quantity").fill("12")
        assert serious_violations(alice, "report") == []
        with alice.expect_download() as download:
            export.click()
        assert re.fullmatch(
            rf"{SLUG}-report-\d{{4}}-\d\d-\d\d\.json", download.value.suggested_filename
        )
        exported = json.loads(Path(download.value.path()).read_text())
        assert exported == {
            "lot": "L-7",
            "defect": "burr on the seat",
            "severity": "major",
            "quantity": 12,
        }

        # The conversation keeps its assistant and the version that answered.
        alice.reload()
        expect(alice.locator(f"[data-assistant={SLUG}]")).to_contain_text("Research NCR v1")

        # An answer that holds the report (as a real model writes it) fills the form.
        alice.goto(f"/c/{_stored_chat(alice)}")
        report = alice.get_by_role("form", name="Report")
        expect(report.get_by_label("Lot *")).to_have_value("2026-118")
        expect(report.get_by_label("severity")).to_have_value("major")
        expect(report.get_by_label("quantity")).to_have_value("14")
        expect(report.get_by_role("button", name="Export report")).to_be_enabled()
        alice.screenshot(path=str(IMAGES / "chat-assistant-report.png"))

    # Apps name the assistant as the model: Research's key gets the cached manual from
    # its first request on; Legal's key is told the model does not exist.
    research = off_loop(
        asyncio.run, admin_tasks.create_key(appliance.settings, "research", "ncr-app", None, None)
    )
    legal = off_loop(
        asyncio.run, admin_tasks.create_key(appliance.settings, "legal", "legal-app", None, None)
    )
    client = openai.OpenAI(base_url=f"{appliance.url}/v1", api_key=research, max_retries=0)
    reply = client.chat.completions.create(
        model=SLUG, messages=[{"role": "user", "content": "Lot 9?"}]
    )
    assert reply.usage is not None and reply.usage.completion_tokens <= 8  # its default
    details = reply.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    assert details.cached_tokens >= tokens - 16  # all of the manual's full blocks
    other = openai.OpenAI(base_url=f"{appliance.url}/v1", api_key=legal, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.chat.completions.create(model=SLUG, messages=[{"role": "user", "content": "?"}])
    assert SLUG not in [m.id for m in other.models.list()]
    assert SLUG in [m.id for m in client.models.list()]


async def _key(appliance: Appliance, department: str) -> str:
    return await admin_tasks.create_key(appliance.settings, department, "app", None, None)


ANSWER = """Here is the report for the lot:

```json
{"lot": "2026-118", "defect": "Hole spacing 62.4 mm against 62.0 +/- 0.2 mm",
 "severity": "major", "quantity": 14}
```
"""


def _stored_chat(page: Page) -> str:
    """A conversation with the assistant whose answer holds a report, stored through the
    API (the tiny test model writes random text, no picture of a report)."""
    headers = {"X-CSRF-Token": csrf_of(page)}
    card = page.request.get("/api/assistants").json()["items"][0]
    created = page.request.post(
        "/api/conversations",
        data={"title": "NCR for lot 2026-118", "assistant_id": card["id"]},
        headers=headers,
    ).json()
    messages = [
        {"role": "user", "content": "Draft the NCR for lot 2026-118: hole spacing out."},
        {"role": "assistant", "content": ANSWER, "assistant_version": card["version"]},
    ]
    page.request.post(
        f"/api/conversations/{created['id']}/messages",
        data={"messages": messages},
        headers=headers,
    )
    return str(created["id"])
