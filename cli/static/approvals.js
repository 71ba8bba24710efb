// The approval page's behaviour (served as /static/approvals.js: the page's CSP
// allows no inline script). Every decision is a same-origin JSON POST carrying
// the CSRF token from the page's <meta name="csrf-token">; the session cookie
// is HttpOnly and travels by itself.
"use strict";
const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
const refreshMs = Number(document.body.dataset.refreshMs) || 2000;
const list = document.getElementById("approvals");
const empty = document.getElementById("empty");
const log = document.getElementById("log");

function note(text, ok) {
  const item = document.createElement("li");
  item.textContent = text;
  if (!ok) item.className = "error";
  log.prepend(item);
  while (log.children.length > 8) log.lastChild.remove();
}

// Merge fresh cards by key: existing cards (and what the reviewer typed) stay.
function merge(html) {
  const fresh = document.createElement("template");
  fresh.innerHTML = html;
  const keys = new Set();
  let previous = null;
  for (const card of fresh.content.querySelectorAll(".card")) {
    keys.add(card.dataset.key);
    let current = [...list.children].find((c) => c.dataset.key === card.dataset.key);
    if (!current) {
      current = card;
      list.insertBefore(current, previous ? previous.nextSibling : list.firstChild);
    }
    previous = current;
  }
  for (const card of [...list.children]) {
    if (!keys.has(card.dataset.key)) card.remove();
  }
  // "unreachable" cards name workflows that did not answer; they are not approvals.
  empty.hidden = list.querySelector(".card:not(.unreachable)") !== null;
}

async function refresh() {
  try {
    const response = await fetch("fragment", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    merge(await response.text());
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.getElementById("conn").textContent = "";
  } catch (error) {
    document.getElementById("conn").textContent = "refresh failed: " + error.message;
  }
}

async function decide(card, kind, button) {
  const body = { workflow_id: card.dataset.workflow, id: card.dataset.id, decision: kind };
  const answer = card.querySelector(".answer");
  if (kind === "reject") body.reason = card.querySelector("input[name=reason]").value;
  if (kind === "respond") body.message = card.querySelector("input[name=message]").value;
  if (kind === "edit") {
    try {
      body.args = JSON.parse(card.querySelector("textarea[name=args]").value);
    } catch (error) {
      answer.className = "answer error";
      answer.textContent = "arguments are not valid JSON: " + error.message;
      return;
    }
  }
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  answer.className = "answer";
  answer.textContent = "sending " + kind + "...";
  let result;
  try {
    const response = await fetch("api/decide", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken },
      body: JSON.stringify(body),
    });
    result = await response.json();
  } catch (error) {
    result = { ok: false, error: "request failed: " + error.message };
  }
  const text = result.ok ? result.message : result.error;
  answer.className = "answer " + (result.ok ? "ok" : "error");
  answer.textContent = text;
  note((result.ok ? "" : card.dataset.workflow + " " + card.dataset.id + ": ") + text, result.ok);
  if (result.ok) {
    card.classList.add("decided");
    refresh();
  } else {
    for (const b of card.querySelectorAll("button")) b.disabled = false;
  }
}

list.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-decision]");
  if (button) decide(button.closest(".card"), button.dataset.decision, button);
});
document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
setInterval(refresh, refreshMs);
