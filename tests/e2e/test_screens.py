"""The chat as people see it: screenshots for the README (light and dark, desktop and
phone), and axe-core's accessibility check of the main views."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import DESKTOP, PHONE, Appliance, browsing
from tests.e2e.flows import IMAGES, csrf_of, serious_violations, sign_in_with_sso

# A conversation as an employee of the machine shop would have it (stored through the
# API: the tiny test model's answers are random bytes, no picture of the app).
ANSWER = """Here is a first draft of the nonconformance report:

**Part:** bracket 4471-B · **Lot:** 2026-118 · **Found at:** final inspection

1. Hole spacing measured **62.4 mm** against a drawing limit of 62.0 ± 0.2 mm.
2. 14 of 200 parts affected; the lot is quarantined.

To list the affected parts from the inspection export:

```python
import csv

with open("inspection.csv") as f:
    failed = [row for row in csv.DictReader(f) if float(row["spacing_mm"]) > 62.2]
print(len(failed), "parts out of tolerance")
```
"""
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Draft an NCR for lot 2026-118: hole spacing out of tolerance."},
    {"role": "assistant", "content": ANSWER},
]


def _seed(page: Page) -> str:
    """Alice's conversation, stored through the API as the app stores it (once)."""
    listed = page.request.get("/api/conversations").json()["items"]
    known = [c["id"] for c in listed if c["title"] == "NCR for lot 2026-118"]
    if known:
        return str(known[0])
    headers = {"X-CSRF-Token": csrf_of(page)}
    for title in ("Torque table for M8 bolts", "Summarise the audit findings"):
        page.request.post(
            "/api/conversations", data={"model": "tiny", "title": title}, headers=headers
        )
    created = page.request.post(
        "/api/conversations",
        data={"model": "tiny", "title": "NCR for lot 2026-118", "system_prompt": "Be precise."},
        headers=headers,
    ).json()
    page.request.post(
        f"/api/conversations/{created['id']}/messages",
        data={"messages": CONVERSATION},
        headers=headers,
    )
    return str(created["id"])


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_of_the_chat(browser: Browser, appliance: Appliance, scheme: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        with browsing(browser, appliance, viewport=viewport, color_scheme=scheme) as (_, page):
            sign_in_with_sso(page, "alice")
            conversation = _seed(page)
            page.goto(f"/c/{conversation}")
            expect(page.locator(".code-block")).to_be_visible()
            page.screenshot(path=str(IMAGES / f"chat-{scheme}-{name}.png"))
    with browsing(browser, appliance, color_scheme=scheme) as (_, page):
        page.goto("/signin")
        expect(page.get_by_role("link", name="Sign in with your company account")).to_be_visible()
        page.screenshot(path=str(IMAGES / f"signin-{scheme}.png"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_main_views_pass_axe(browser: Browser, appliance: Appliance, scheme: str) -> None:
    # bypass_csp: axe is injected as an inline script, which the app's policy (rightly) refuses.
    with browsing(browser, appliance, color_scheme=scheme, bypass_csp=True) as (_, page):
        page.goto("/signin")
        expect(page.get_by_role("link", name="Sign in with your company account")).to_be_visible()
        assert serious_violations(page, "sign-in") == []
        sign_in_with_sso(page, "alice")
        page.goto(f"/c/{_seed(page)}")
        expect(page.locator(".code-block")).to_be_visible()
        assert serious_violations(page, "chat") == []
        page.get_by_role("button", name="System prompt").click()
        assert serious_violations(page, "system prompt") == []


ADMIN_VIEWS = ("departments", "users", "keys", "usage", "audit", "workers")


def _some_traffic(page: Page, appliance: Appliance) -> None:
    """A key of research's, used a few times, so that the console has something to show."""
    import openai

    headers = {"X-CSRF-Token": csrf_of(page)}
    departments = page.request.get("/api/admin/departments").json()["items"]
    research = next(d for d in departments if d["slug"] == "research")
    page.request.patch(
        f"/api/admin/departments/{research['id']}",
        data={"daily_token_quota": 2_000_000, "requests_per_minute": 120},
        headers=headers,
    )
    if page.request.get("/api/admin/keys").json()["items"]:
        return
    created = page.request.post(
        "/api/admin/keys",
        data={"department_id": research["id"], "name": "inspection-bot"},
        headers=headers,
    ).json()
    client = openai.OpenAI(base_url=f"{appliance.url}/v1", api_key=created["key"], max_retries=0)
    for question in ("Summarise NCR 118.", "List open CAPAs.", "Torque for M8?"):
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": question}], max_tokens=16
        )


def test_screenshots_of_the_console(browser: Browser, appliance: Appliance) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with browsing(browser, appliance, viewport={"width": 1280, "height": 760}) as (_, page):
        sign_in_with_sso(page, "bob")
        _some_traffic(page, appliance)
        for view in ADMIN_VIEWS:
            page.goto(f"/admin/{view}")
            expect(page.locator("tbody tr").first).to_be_visible()
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(IMAGES / f"admin-{view}.png"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_console_passes_axe(browser: Browser, appliance: Appliance, scheme: str) -> None:
    with browsing(browser, appliance, color_scheme=scheme, bypass_csp=True) as (_, page):
        sign_in_with_sso(page, "bob")
        _some_traffic(page, appliance)
        for view in ADMIN_VIEWS:
            page.goto(f"/admin/{view}")
            expect(page.locator("tbody tr").first).to_be_visible()
            assert serious_violations(page, f"admin {view}") == []
        page.goto("/admin/departments")
        page.get_by_role("button", name="Edit Research").click()
        assert serious_violations(page, "department editor") == []
