// MyMCP console: keeps the list of pending approvals current without a reload.
// Everything it shows is set with textContent, never parsed as HTML.
"use strict";

(function () {
  const list = document.getElementById("pending");
  if (!list) {
    return;
  }
  const empty = document.getElementById("pending-empty");
  const status = document.getElementById("live-status");
  const source = list.dataset.source;
  const intervalMs = 1500;
  let version = list.dataset.version;

  function say(text) {
    if (status.textContent !== text) {
      status.textContent = text;
    }
  }

  function card(item) {
    const entry = document.createElement("li");
    entry.className = "card";
    const link = document.createElement("a");
    link.href = "/console/approvals/" + encodeURIComponent(item.id);
    const tool = document.createElement("strong");
    tool.textContent = item.tool;
    link.appendChild(tool);
    const who = document.createElement("span");
    who.className = "exact";
    who.textContent = "requested by " + item.principal;
    const when = document.createElement("span");
    when.textContent = "at " + item.created_at + ", expires " + item.expires_at;
    entry.append(link, who, when);
    if (item.principal_beyond_ascii) {
      const lookalike = document.createElement("span");
      lookalike.className = "badge";
      lookalike.textContent = "name beyond ASCII";
      entry.append(lookalike);
    }
    if (item.client_declined) {
      const declined = document.createElement("span");
      declined.className = "badge";
      declined.textContent = "the client declined to open it";
      entry.append(declined);
    }
    return entry;
  }

  function show(pending) {
    // Rebuilding the list must not take the keyboard focus away from the entry on it.
    const focused = list.contains(document.activeElement)
      ? document.activeElement.getAttribute("href")
      : null;
    list.replaceChildren(...pending.map(card));
    empty.hidden = pending.length > 0;
    if (focused !== null) {
      const again = Array.from(list.querySelectorAll("a")).find(
        (link) => link.getAttribute("href") === focused,
      );
      if (again) {
        again.focus();
      }
    }
  }

  async function poll() {
    try {
      const response = await fetch(source, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { accept: "application/json" },
      });
      if (response.status === 403) {
        say("Signed out: run `mymcp console` in a terminal to sign in again.");
        return; // stop polling; a reload after signing in starts again
      }
      if (response.ok) {
        const data = await response.json();
        if (String(data.version) !== version) {
          version = String(data.version);
          show(data.pending);
        }
        say("");
      }
    } catch (error) {
      say("The MyMCP server does not answer; still trying.");
    }
    window.setTimeout(poll, intervalMs);
  }

  window.setTimeout(poll, intervalMs);
})();
