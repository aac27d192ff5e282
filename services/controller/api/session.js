  // Shared by the swarm panel and the ledger page (put into each page's script as it is
  // served). The credential is asked for once per tab, kept in this tab's session storage only
  // and sent as a bearer token to this origin; the page never logs it, never puts it in an
  // address and never shows it, and shows the controller's refusal message, not a stack.
  const TOKEN_KEY = "agentihooks.controller.token";
  const POLL_MS = 2000;
  const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

  function el(tag, text, attrs) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    return node;
  }

  // Each setter writes only what differs: a refresh that changed nothing changes nothing.
  function setText(node, text) {
    const value = String(text);
    if (node.textContent !== value) node.textContent = value;
  }

  function setAttr(node, name, value) {
    if (value === null || value === undefined) {
      if (node.hasAttribute(name)) node.removeAttribute(name);
    } else if (node.getAttribute(name) !== String(value)) {
      node.setAttribute(name, String(value));
    }
  }

  function setHidden(node, hidden) {
    if (node.hidden !== hidden) node.hidden = hidden;
  }

  // Puts `nodes` (kept by key across refreshes, never rebuilt) into `container` in this order:
  // what is no longer shown is removed, and a node moves only where the order changed.
  function place(container, nodes) {
    const wanted = new Set(nodes);
    for (const child of Array.from(container.children)) {
      if (!wanted.has(child)) child.remove();
    }
    nodes.forEach((node, i) => {
      if (container.children[i] !== node) container.insertBefore(node, container.children[i] || null);
    });
  }

  function refusalText(answer) {
    const data = answer.data || {};
    return data.message || data.reason || `HTTP ${answer.status}`;
  }

  function words(value) {
    return String(value).replace(/_/g, " ");
  }

  // "2026-12-02T10:00:03Z" as "2026-12-02 10:00:03 UTC": the same text at every refresh.
  function utcTime(iso) {
    const at = new Date(iso);
    if (!iso || Number.isNaN(at.getTime())) return iso || "\u2014";
    return at.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  // The tab's session: the sign-in prompt, the credential, calls to the API and the poll that
  // runs `read` every POLL_MS while a credential is held. `signedOut` clears what was read.
  function session({ read, signedOut }) {
    const prompt = $("sign-in");
    const bar = $("session");
    const input = document.getElementById("token");
    let timer = null;
    let reading = false;
    let again = false;

    function token() { return sessionStorage.getItem(TOKEN_KEY); }

    function showError(text) {
      const box = $("load-error");
      setText(box, text);
      setHidden(box, !text);
    }

    function askForToken(reason) {
      sessionStorage.removeItem(TOKEN_KEY);
      clearTimeout(timer);
      setHidden(bar, true);
      setHidden(prompt, false);
      signedOut();
      showError(reason || "");
      input.focus();
    }

    // A call with the tab's credential; a refused credential (401) asks for it again.
    async function call(method, path, body) {
      const headers = { "Authorization": `Bearer ${token()}`, "Accept": "application/json" };
      const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
      if (body !== undefined) {
        headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
      const response = await fetch(path, init);
      let data = null;
      try { data = await response.json(); } catch (_) { data = null; }
      const answer = { status: response.status, ok: response.ok, data };
      if (answer.status === 401) askForToken(`Credential refused: ${refusalText(answer)}`);
      return answer;
    }

    // A refresh asked for while one is in flight (say, right after a choice) runs once it
    // ends, so the page never settles on an answer older than the choice.
    async function refresh() {
      if (!token()) return;
      if (reading) { again = true; return; }
      reading = true;
      again = false;
      try {
        await read();
      } catch (_) {
        showError("The controller cannot be reached; retrying.");
      } finally {
        reading = false;
        if (token()) { clearTimeout(timer); timer = setTimeout(refresh, again ? 0 : POLL_MS); }
      }
    }

    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = input.value.trim();
      input.value = "";
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      setHidden(prompt, true);
      setHidden(bar, false);
      showError("");
      refresh();
    });
    $("forget-token").addEventListener("click", () => askForToken(""));

    function start() {
      if (!token()) { askForToken(""); return; }
      setHidden(prompt, true);
      setHidden(bar, false);
      refresh();
    }

    return { call, refresh, showError, start };
  }
