"""The controller's pages: the swarm panel (`/`), the ledger page and the unknown-swarm page.

Each page is one HTML document with its style and script inline, so its content security
policy allows exactly that style and that script, by their hashes, and nothing else: no
external asset and no `unsafe-inline`. What the panel and the ledger share (the credential
prompt, the style, the session and polling code) is written once, in `signin.html`,
`page.css` and `session.js`, and put into each page where it says `<!--@include NAME-->` or
`/*@include NAME*/` when the page is loaded. Every page reads its data from the
authenticated API with the tab's credential; a page itself holds no swarm data, except the
unknown-swarm page, which echoes the name asked for, escaped.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html
import importlib.resources
import re
from typing import Final

from aiohttp import web

INCLUDE: Final = re.compile(r"<!--@include ([\w-]+\.html)-->|/\*@include ([\w-]+\.(?:css|js))\*/")
MISSING_NAME: Final = "@@SWARM@@"
"""Where the unknown-swarm page puts the (escaped) name it was asked for."""

HEADERS: Final = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@dataclasses.dataclass(frozen=True)
class Page:
    """A page's HTML and the content security policy that allows exactly its own blocks."""

    text: str
    policy: str

    def response(self, status: int = 200) -> web.Response:
        return html_response(self.text, self.policy, status)


def html_response(text: str, policy: str, status: int = 200) -> web.Response:
    headers = {**HEADERS, "Content-Security-Policy": policy}
    return web.Response(
        text=text, status=status, content_type="text/html", charset="utf-8", headers=headers
    )


def _file(name: str) -> str:
    return importlib.resources.files(__package__).joinpath(name).read_text()


def _expanded(name: str) -> str:
    """The file with its includes put in (one level: an included file includes nothing)."""
    return INCLUDE.sub(lambda found: _file(found.group(1) or found.group(2)), _file(name))


def _only_block(tag: str, text: str) -> str | None:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    if len(blocks) > 1:
        raise RuntimeError(f"a page holds one <{tag}> block at most, not {len(blocks)}")
    return blocks[0] if blocks else None


def _hash(block: str) -> str:
    digest = hashlib.sha256(block.encode()).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


def load(name: str) -> Page:
    """The page `name` (a file beside this module) and its policy: its own inline script and
    style, and calls to this origin only when it has a script."""
    text = _expanded(name)
    script, style = _only_block("script", text), _only_block("style", text)
    policy = ["default-src 'none'"]
    if script is not None:
        policy += [f"script-src {_hash(script)}", "connect-src 'self'"]
    if style is not None:
        policy.append(f"style-src {_hash(style)}")
    policy += ["img-src data:", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"]
    return Page(text, "; ".join(policy))


PANEL: Final = load("panel.html")
LEDGER: Final = load("ledger.html")
_MISSING: Final = load("missing.html")


def missing_swarm(name: str) -> web.Response:
    """404: a readable page saying no swarm named `name` exists, linking back to the panel.
    The name is the caller's text: escaped, it is shown and never becomes markup."""
    text = _MISSING.text.replace(MISSING_NAME, html.escape(name, quote=True))
    return html_response(text, _MISSING.policy, 404)
