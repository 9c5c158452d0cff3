"""The admin console, end to end: an admin sets up a department and a key in the browser,
the key works with the official client, shows in the audit log, and stops when revoked."""

from __future__ import annotations

import re

import openai
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import Appliance, browsing
from tests.e2e.flows import sign_in_with_sso
from tests.inference.server.conftest import MODEL


def _create_department(page: Page) -> None:
    page.goto("/admin/departments")
    page.get_by_role("button", name="New department").click()
    form = page.get_by_role("form", name="New department")
    form.get_by_label("Name").fill("Quality")
    form.get_by_label("Slug").fill("quality")
    form.get_by_label("Tokens per day").fill("not a number")
    expect(form.get_by_text("a whole number, or empty for no limit")).to_be_visible()
    expect(form.get_by_role("button", name="Create department")).to_be_disabled()
    form.get_by_label("Tokens per day").fill("200,000")
    form.get_by_role("button", name="Create department").click()
    row = page.get_by_role("row", name=re.compile("^Quality quality"))
    expect(row).to_contain_text("200,000")

    # Editing shows what the change does before it is saved.
    row.get_by_role("button", name="Edit Quality").click()
    editor = page.get_by_role("form", name="Edit Quality")
    editor.get_by_label("Requests per minute").fill("60")
    changes = editor.get_by_role("region", name="Changes to review")
    expect(changes).to_contain_text("Requests per minute: no limit → 60")
    editor.get_by_role("button", name="Save changes").click()
    expect(row).to_contain_text("60")


def test_an_admin_sets_up_a_department_and_a_key(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (_, admin):
        sign_in_with_sso(admin, "bob")  # the IdP puts bob in the admins' group
        admin.get_by_role("link", name="Admin console").click()
        expect(admin.get_by_role("heading", name="Departments")).to_be_visible()
        _create_department(admin)

        admin.get_by_role("link", name="Users").click()
        mappings = admin.get_by_role("region", name="IdP groups → departments")
        mappings.get_by_label("IdP group").fill("quality-team")
        mappings.get_by_label("Department", exact=True).select_option(label="Quality")
        mappings.get_by_role("button", name="Map group").click()
        expect(mappings.get_by_role("row", name="quality-team Quality")).to_be_visible()

        admin.get_by_role("link", name="API keys").click()
        new_key = admin.get_by_role("form", name="New key")
        new_key.get_by_label("Name").fill("line-4-dashboard")
        new_key.get_by_label("Department", exact=True).select_option(label="Quality")
        new_key.get_by_role("button", name="Create key").click()
        secret = admin.locator("[data-secret]").inner_text()
        assert secret.startswith("sk-enc-")
        admin.get_by_role("button", name="Done").click()
        expect(admin.locator("[data-secret]")).to_have_count(0)  # shown once

        client = openai.OpenAI(base_url=f"{appliance.url}/v1", api_key=secret, max_retries=0)
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Status of line 4?"}], max_tokens=4
        )
        assert reply.usage is not None and reply.usage.completion_tokens > 0

        admin.get_by_role("link", name="Audit log").click()
        admin.get_by_label("Action").select_option(label="API and chat requests")
        admin.get_by_role("button", name="Filter").click()
        request_row = admin.locator("tbody tr", has_text="quality").first
        expect(request_row).to_contain_text("api.request")
        expect(request_row).to_contain_text("200")
        request_row.get_by_role("button").click()
        record = admin.get_by_role("region", name=re.compile("^Record"))
        expect(record).to_contain_text("department_slug")
        expect(record).to_contain_text("chat.completions")

        record.get_by_role("button", name="Close").click()
        admin.get_by_role("button", name="Check the hash chain").click()
        expect(admin.locator("[data-chain]")).to_have_attribute("data-chain", "ok")

        # Usage comes from the rollups written with the audit records.
        admin.get_by_role("link", name="Usage").click()
        admin.get_by_label("Department", exact=True).select_option(label="Quality")
        expect(admin.locator("[data-figure=requests]")).to_have_text("1")
        top_keys = admin.get_by_role("region", name="Top API keys")
        expect(top_keys.get_by_role("row", name=re.compile("line-4-dashboard 1"))).to_be_visible()

        # A quota below what was used today says so before it is saved.
        admin.get_by_role("link", name="Departments").click()
        admin.get_by_role("button", name="Edit Quality").click()
        editor = admin.get_by_role("form", name="Edit Quality")
        editor.get_by_label("Tokens per day").fill("1")
        expect(editor.get_by_role("region", name="Changes to review")).to_contain_text(
            re.compile(
                r"Tokens per day: 200,000 → 1 \(\d+ already used today: refused until the reset\)"
            )
        )
        editor.get_by_role("button", name="Cancel").click()

        admin.get_by_role("link", name="Workers").click()
        worker = admin.locator("[data-worker='0']")
        expect(worker.locator("[data-state]")).to_contain_text("ready")
        expect(worker).to_contain_text(MODEL)

        admin.get_by_role("link", name="Users").click()
        admin.get_by_role("searchbox", name="Search by name or email").fill("BOB@")
        expect(admin.locator("tbody tr", has_text="@example.test")).to_have_count(1)

        admin.get_by_role("link", name="API keys").click()
        admin.get_by_role("link", name="Audit records of line-4-dashboard").click()
        expect(admin.get_by_role("button", name="One key only ✕")).to_be_visible()
        expect(admin.locator("tbody tr")).to_have_count(1)  # the key's one request
        expect(admin.locator("tbody tr")).to_contain_text("chat.completions")

        admin.get_by_role("link", name="API keys").click()
        admin.once("dialog", lambda dialog: dialog.accept())
        admin.get_by_role("button", name="Revoke line-4-dashboard").click()
        expect(admin.get_by_role("row", name=re.compile("line-4-dashboard"))).to_contain_text(
            "revoked"
        )
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "again"}], max_tokens=4
            )

    # The mapping puts carol in Quality at her sign-in.
    with browsing(browser, appliance) as (_, carol):
        sign_in_with_sso(carol, "carol")
        expect(carol.get_by_role("navigation", name="Conversations")).to_contain_text("quality")


def test_a_member_is_refused_the_console(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (_, member):
        sign_in_with_sso(member, "alice")
        expect(member.get_by_role("link", name="Admin console")).to_have_count(0)
        member.goto("/admin/departments")
        expect(member.get_by_role("heading", name="Admins only")).to_be_visible()
        assert member.request.get("/api/admin/departments").status == 403
