"""An employee's chat, end to end: sign in at the IdP, stream, stop, edit, find again."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from playwright.sync_api import Browser, expect

from tests.e2e.conftest import Appliance, browsing, off_loop
from tests.e2e.flows import (
    answers,
    long_answers,
    questions,
    running_requests,
    send,
    sign_in_at_idp,
    sign_in_with_sso,
    stream_lengths,
    watch_stream,
)
from tests.gateway.traffic.conftest import read_records


def test_an_employee_signs_in_chats_and_finds_the_conversation_again(
    browser: Browser, appliance: Appliance
) -> None:
    with browsing(browser, appliance) as (_, page):
        sign_in_with_sso(page, "alice")
        composer = page.get_by_role("textbox", name="Message")
        # Shift+Enter is a new line, not a send.
        composer.fill("Draft the shift report")
        composer.press("Shift+Enter")
        composer.type("for line four")
        assert composer.input_value() == "Draft the shift report\nfor line four"
        assert questions(page).count() == 0  # nothing sent

        long_answers(page, 200)
        watch_stream(page)
        composer.press("Enter")
        expect(answers(page)).to_have_count(1, timeout=60_000)
        lengths = stream_lengths(page)
        # The answer grew on screen piece by piece before it was stored.
        assert len(set(lengths)) >= 3 and sorted(lengths) == lengths, lengths
        expect(composer).to_have_value("")
        expect(page).to_have_url(re.compile(r"/c/[0-9a-f-]{36}$"))
        conversation_url = page.url

        page.reload()
        expect(questions(page)).to_have_text(re.compile("Draft the shift report\\s+for line four"))
        expect(answers(page)).to_have_count(1)
        expect(page.get_by_role("link", name="Draft the shift report")).to_be_visible()

        # Ctrl+Shift+O opens a new chat; the search finds the old one by a word in it.
        page.keyboard.press("Control+Shift+O")
        expect(page).to_have_url(appliance.url + "/")
        page.get_by_role("searchbox", name="Search your conversations").fill("four")
        hit = page.get_by_role("list", name="Search results").get_by_role("link")
        expect(hit).to_have_count(1)
        hit.click()
        expect(page).to_have_url(conversation_url)
        expect(questions(page)).to_contain_text("line four")


def test_stop_ends_the_generation_in_the_engine(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (_, page):
        sign_in_with_sso(page, "alice")
        before = len(off_loop(_chat_records, appliance))  # earlier tests' requests
        long_answers(page, 4000)
        send(page, "Write a very long answer.")
        expect(page.locator("[data-streaming] .markdown")).not_to_be_empty(timeout=30_000)
        assert _wait_for(lambda: running_requests(appliance.worker_url) == 1)
        page.keyboard.press("Escape")
        expect(page.locator("[data-notice=stopped]")).to_have_text("Stopped.")
        # The engine lets go of the sequence at once, not after 4,000 tokens.
        assert _wait_for(lambda: running_requests(appliance.worker_url) == 0, timeout=5)
        expect(answers(page)).to_have_count(1)  # what had arrived is kept
        # The gateway writes the stopped request's record once it sees the disconnect,
        # which may be after the engine has let go: wait for it rather than read too soon.
        assert _wait_for(lambda: len(off_loop(_chat_records, appliance)) > before)
        stopped = off_loop(_chat_records, appliance)[before]
        assert stopped["status_code"] == 499 and stopped["reason"] == "client_disconnected"
        assert 0 < stopped["completion_tokens"] < 4000
        assert stopped["details"] == '{"via":"ui"}' and stopped["api_key_id"] is None


def test_edit_a_message_and_rerun_then_regenerate(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (_, page):
        sign_in_with_sso(page, "alice")
        long_answers(page, 20)
        asked: list[str] = []
        page.on(
            "request",
            lambda r: (
                asked.append(r.post_data or "") if r.url.endswith("/chat/completions") else None
            ),
        )
        send(page, "First question")
        expect(answers(page)).to_have_count(1, timeout=30_000)
        send(page, "Second question")
        expect(answers(page)).to_have_count(2, timeout=30_000)

        page.locator("li[data-role=user]").first.get_by_role("button", name="Edit").click()
        page.get_by_role("textbox", name="Edit your message").fill("First question, edited")
        page.get_by_role("button", name="Send", exact=True).first.click()
        expect(questions(page)).to_have_count(1, timeout=30_000)
        expect(questions(page)).to_have_text("First question, edited")
        expect(answers(page)).to_have_count(1, timeout=30_000)
        assert "Second question" not in asked[-1] and "First question, edited" in asked[-1]

        before = len(asked)
        answers(page).get_by_role("button", name="Regenerate").click()
        expect(page.get_by_role("button", name="Regenerate")).to_be_enabled(timeout=30_000)
        expect(answers(page)).to_have_count(1)
        assert len(asked) == before + 1
        page.reload()
        expect(questions(page)).to_have_text("First question, edited")
        expect(answers(page)).to_have_count(1)


def test_an_expired_session_keeps_what_was_typed(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (context, page):
        sign_in_with_sso(page, "alice")
        context.clear_cookies()  # the session ends (and the IdP's too)
        send(page, "A thought I must not lose")
        expect(page).to_have_url(re.compile(r"/signin$"))
        expect(page.get_by_role("status")).to_contain_text("Your session ended")
        sign_in_at_idp(page, "alice")
        expect(page.get_by_role("textbox", name="Message")).to_have_value(
            "A thought I must not lose"
        )


def test_another_user_cannot_see_or_open_it(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (_, alice), browsing(browser, appliance) as (_, bob):
        sign_in_with_sso(alice, "alice")
        long_answers(alice, 5)
        send(alice, "The secret formula of the glue")
        expect(answers(alice)).to_have_count(1, timeout=30_000)
        alices = alice.url.rsplit("/", 1)[1]

        sign_in_with_sso(bob, "bob")
        expect(bob.get_by_role("link", name="The secret formula of the glue")).to_have_count(0)
        bob.goto(f"/c/{alices}")
        expect(bob.get_by_role("alert")).to_have_text(
            "This conversation does not exist, or is not yours."
        )
        expect(bob.locator("li[data-role]")).to_have_count(0)
        assert bob.request.get(f"/api/conversations/{alices}").status == 404
        found = bob.request.get("/api/conversations/search?q=glue").json()["items"]
        assert found == []


def test_the_break_glass_account_signs_in_and_out(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance) as (_, page):
        page.goto("/")
        page.get_by_text("Administrator sign-in").click()
        page.get_by_label("Email").fill(appliance.admin_email)
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
        page.get_by_label("Password").fill(appliance.admin_password)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("textbox", name="Message")).to_be_visible()
        # The break-glass account belongs to no department: no model, said plainly.
        picker = page.get_by_role("combobox", name="Chat with")
        expect(picker).to_be_disabled()
        expect(picker.locator("option:checked")).to_have_text("no model available")
        send(page, "hello")
        expect(page.locator("[data-notice=error]")).to_have_text(
            "No model is available to your department yet."
        )
        expect(page.get_by_role("textbox", name="Message")).to_have_value("hello")  # kept
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/signin$"))
        assert page.request.get("/api/me").status == 401


def _wait_for(condition: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _chat_records(appliance: Appliance) -> list[dict[str, object]]:
    import asyncio

    return asyncio.run(read_records(appliance.settings.effective_database_url))


def test_rename_delete_system_prompt_and_copy(browser: Browser, appliance: Appliance) -> None:
    with browsing(browser, appliance, permissions=["clipboard-read", "clipboard-write"]) as (
        _,
        page,
    ):
        sign_in_with_sso(page, "alice")
        page.get_by_role("button", name="System prompt").click()
        page.get_by_label("Instructions the model follows in this conversation").fill(
            "Answer as the quality manual."
        )
        page.get_by_role("button", name="Save").click()
        long_answers(page, 5)
        with page.expect_request("**/v1/chat/completions") as asked:
            send(page, "Which gauge for the bore?")
        sent = asked.value.post_data_json
        assert sent["messages"][0] == {"role": "system", "content": "Answer as the quality manual."}
        expect(answers(page)).to_have_count(1, timeout=30_000)
        page.reload()  # the system prompt is the conversation's, stored
        expect(answers(page)).to_have_count(1)
        page.get_by_role("button", name="System prompt ●").click()
        expect(
            page.get_by_label("Instructions the model follows in this conversation")
        ).to_have_value("Answer as the quality manual.")

        answers(page).get_by_role("button", name="Copy").click()
        copied = page.evaluate("() => navigator.clipboard.readText()")
        stored = page.request.get(f"/api/conversations/{page.url.rsplit('/', 1)[1]}").json()
        assert copied == stored["messages"][1]["content"] != ""  # the answer's markdown source

        page.get_by_role("button", name="Rename “Which gauge for the bore?”").click()
        page.get_by_label("New title").fill("Bore gauges")
        page.get_by_label("New title").press("Enter")
        expect(page.get_by_role("link", name="Bore gauges")).to_be_visible()
        page.reload()
        expect(page.get_by_role("link", name="Bore gauges")).to_be_visible()

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Delete “Bore gauges”").click()
        expect(page.get_by_role("link", name="Bore gauges")).to_have_count(0)
        expect(page).to_have_url(appliance.url + "/")
        page.reload()
        expect(page.get_by_role("link", name="Bore gauges")).to_have_count(0)
