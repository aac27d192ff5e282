"""Headless Debian Chromium driven by Playwright (async API), one browser per test.

The browser is the `chromium` binary of the Debian package (never a Playwright download); a
missing binary fails the test loudly. Playwright's `launch` gives every browser a fresh,
temporary user data dir. A page that throws, or whose content security policy blocks something,
fails the test at teardown: the page must run clean under its own policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
from playwright import async_api

from tests.support import binaries

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@dataclasses.dataclass
class Tab:
    """A page in its own browser context, and what went wrong in it."""

    page: async_api.Page
    problems: list[str] = dataclasses.field(default_factory=list)


@pytest.fixture
async def chromium() -> AsyncIterator[async_api.Browser]:
    """Headless Chromium (Debian's binary), closed after the test."""
    executable = binaries.require("chromium")
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(CHROMIUM_ARGS)
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def tab(chromium: async_api.Browser) -> AsyncIterator[Tab]:
    """A fresh context and page; fails the test if the page threw or broke its CSP."""
    context = await chromium.new_context()
    context.set_default_timeout(10_000)
    page = await context.new_page()
    found = Tab(page)

    def on_console(message: async_api.ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            found.problems.append(f"csp: {message.text}")

    page.on("pageerror", lambda error: found.problems.append(f"pageerror: {error}"))
    page.on("console", on_console)
    try:
        yield found
    finally:
        await context.close()
    assert not found.problems, found.problems
