"""Headless Debian Chromium driven by Playwright (async API), one browser per test.

The browser is the `chromium` binary of the Debian package (never a Playwright download); a
missing binary fails the test loudly. Playwright's `launch` gives every browser a fresh,
temporary user data dir. A page that throws, or whose content security policy blocks something,
fails the test at teardown: the page must run clean under its own policy. Everything the page
writes to its console is kept (`Tab.console`), so a test can check what it must never log.

`record_mutations` and `mutated_keys` watch which parts of a page a refresh touched (a
`MutationObserver`), so a test can say "only this card changed" without measuring time.
"""

from __future__ import annotations

import dataclasses
import pathlib
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
    console: list[str] = dataclasses.field(default_factory=list)
    """Every console message of the page, as `TYPE: TEXT`."""


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
        found.console.append(f"{message.type}: {message.text}")
        if message.type == "error" and "Content Security Policy" in message.text:
            found.problems.append(f"csp: {message.text}")

    page.on("pageerror", lambda error: found.problems.append(f"pageerror: {error}"))
    page.on("console", on_console)
    try:
        yield found
    finally:
        await context.close()
    assert not found.problems, found.problems


async def screenshot(page: async_api.Page, path: pathlib.Path) -> pathlib.Path:
    """A full-page PNG of `page` at `path` (printed, so a run's output says where it is)."""
    data = await page.screenshot(path=str(path), full_page=True)
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, path
    print(f"screenshot: {path}")
    return path


_RECORD = """(selectors) => {
  window.__mutations = [];
  const observer = new MutationObserver((records) => window.__mutations.push(...records));
  for (const selector of selectors) {
    observer.observe(document.querySelector(selector),
      { subtree: true, childList: true, attributes: true, characterData: true });
  }
  window.__observer = observer;
}"""

_KEYS = """(attribute) => {
  const keyOf = (node) => {
    const element = node && (node.nodeType === 1 ? node : node.parentElement);
    const holder = element && element.closest(`[${attribute}]`);
    return holder ? holder.getAttribute(attribute) : null;
  };
  window.__mutations.push(...window.__observer.takeRecords());
  const keys = [];
  for (const record of window.__mutations) {
    const own = keyOf(record.target);
    if (own !== null) { keys.push(own); continue; }
    // A container's own child list changed: the nodes added or removed are what it touched.
    const moved = [...record.addedNodes, ...record.removedNodes].map(keyOf);
    const found = moved.length ? moved : ["(outside any keyed node)"];
    keys.push(...found.map((key) => key ?? "(unkeyed)"));
  }
  window.__mutations = [];
  return keys;
}"""


async def record_mutations(page: async_api.Page, *selectors: str) -> None:
    """Start recording every change under the elements `selectors` name (subtree, child
    lists, attributes and text)."""
    await page.evaluate(_RECORD, list(selectors))


async def mutated_keys(page: async_api.Page, attribute: str) -> list[str]:
    """What changed since `record_mutations` (or the last call), as the value of `attribute`
    on the nearest keyed element around each change; then starts over."""
    keys: list[str] = await page.evaluate(_KEYS, attribute)
    return keys
