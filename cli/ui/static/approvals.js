// The approval page's behaviour (served as /static/approvals.js: the page's CSP
// allows no inline script). Every decision is a same-origin JSON POST carrying
// the CSRF token from the page's <meta name="csrf-token">; the session cookie
// is HttpOnly and travels by itself. Nothing here builds HTML from data: the
// server renders (and escapes) every fragment, the script only places them.
"use strict";
const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
const refreshMs = Number(document.body.dataset.refreshMs) || 2000;
const list = document.getElementById("approvals");
const empty = document.getElementById("empty");
const log = document.getElementById("log");
const decidedBox = document.getElementById("decided");
const VERBS = { approve: "approved", reject: "rejected", respond: "answered", edit: "edited" };

function note(text, ok) {
  const item = document.createElement("li");
  item.textContent = text;
  if (!ok) item.className = "error";
  log.prepend(item);
  while (log.children.length > 8) log.lastChild.remove();
}

function post(url, body) {
  return fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken },
    body: JSON.stringify(body),
  }).then((response) => response.json());
}

// ------------------------------------------------------------------ listing

// Merge fresh cards by key: unchanged cards (and what the reviewer typed) stay;
// a card whose version changed (a fresh preview) is replaced; decided cards stay
// until the page is reloaded, showing who decided.
function merge(html) {
  const fresh = document.createElement("template");
  fresh.innerHTML = html;
  const keys = new Set();
  let previous = null;
  for (const card of fresh.content.querySelectorAll(".card")) {
    keys.add(card.dataset.key);
    let current = [...list.children].find((c) => c.dataset.key === card.dataset.key);
    if (current && current.dataset.version !== card.dataset.version && !current.dataset.decided) {
      const wasSelected = current.classList.contains("selected");
      if (current.dataset.awaitFresh) card.querySelector(".changed-note")?.removeAttribute("hidden");
      current.replaceWith(card);
      if (wasSelected) card.classList.add("selected");
      current = card;
    }
    if (!current) {
      current = card;
      list.insertBefore(current, previous ? previous.nextSibling : list.firstChild);
    }
    previous = current;
  }
  for (const card of [...list.children]) {
    if (!keys.has(card.dataset.key) && !card.dataset.decided) card.remove();
  }
  localTimes(list);
  tick();
  // A workflow that did not answer ("unreachable" card) may be waiting for a decision:
  // "No pending approvals" would be untrue above it (the CLI exits 3 there).
  empty.hidden = list.querySelector(".card:not(.decided)") !== null;
}

let refreshing = false;
async function refresh() {
  if (refreshing) return; // a slow listing must not pile up requests
  refreshing = true;
  try {
    const response = await fetch("fragment", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    merge(await response.text());
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.getElementById("conn").textContent = "";
  } catch (error) {
    document.getElementById("conn").textContent = "refresh failed: " + error.message;
  } finally {
    refreshing = false;
  }
}

async function refreshDecided() {
  try {
    const response = await fetch("decided", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const fresh = document.createElement("template");
    fresh.innerHTML = await response.text();
    decidedBox.replaceChildren(fresh.content);
    localTimes(decidedBox);
  } catch (error) {
    document.getElementById("conn").textContent = "recent decisions failed: " + error.message;
  }
}

function showTab(name) {
  for (const tab of document.querySelectorAll("nav.tabs button")) {
    tab.setAttribute("aria-selected", String(tab.dataset.tab === name));
  }
  document.getElementById("pending-tab").hidden = name !== "pending";
  document.getElementById("decided-tab").hidden = name !== "decided";
  document.getElementById("grants-tab").hidden = name !== "grants";
  if (name === "decided") refreshDecided();
  if (name === "grants") refreshGrants();
}

// ------------------------------------------------------------------ time

function localTimes(root) {
  for (const t of root.querySelectorAll("time[datetime]")) {
    const when = new Date(t.getAttribute("datetime"));
    if (!Number.isNaN(when.getTime())) t.textContent = when.toLocaleString();
  }
}

function left(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s left";
}

function tick() {
  for (const span of document.querySelectorAll(".countdown[data-deadline]")) {
    const ms = new Date(span.dataset.deadline).getTime() - Date.now();
    if (Number.isNaN(ms)) continue;
    span.textContent = ms > 0 ? left(ms) : "timed out";
    span.classList.toggle("late", ms < 60_000);
  }
}

// ------------------------------------------------------------------ deciding

function editedArgs(card) {
  const args = {};
  for (const field of card.querySelectorAll("[data-arg]")) {
    const name = field.dataset.arg, type = field.dataset.type;
    if (type === "bool") args[name] = field.checked;
    else if (type === "number") args[name] = Number(field.value);
    else if (type === "json") {
      try {
        args[name] = JSON.parse(field.value);
      } catch (error) {
        throw new Error(name + " is not valid JSON: " + error.message);
      }
    } else args[name] = field.value;
  }
  return args;
}

function answer(card, text, ok) {
  const line = card.querySelector(".answer");
  line.className = "answer" + (ok === undefined ? "" : ok ? " ok" : " error");
  line.textContent = text;
}

async function editPreview(card) {
  let args;
  try {
    args = editedArgs(card);
  } catch (error) {
    answer(card, error.message, false);
    return;
  }
  const original = JSON.parse(card.dataset.args);
  let result;
  try {
    result = await post("api/edit-preview", { tool: card.dataset.tool, original, args });
  } catch (error) {
    result = { ok: false, error: "request failed: " + error.message };
  }
  if (!result.ok) {
    answer(card, result.error, false);
    return;
  }
  const box = card.querySelector(".edit-preview");
  const fresh = document.createElement("template");
  fresh.innerHTML = result.html;
  box.replaceChildren(fresh.content);
  card.querySelector("button[data-decision=edit]").disabled = false;
  answer(card, "");
}

async function decide(card, kind) {
  const body = { workflow_id: card.dataset.workflow, id: card.dataset.id, decision: kind };
  // The preview this card shows: the workflow refuses an approve or edit made on another one.
  if ((kind === "approve" || kind === "edit") && card.dataset.fingerprint !== undefined) {
    body.preview_fingerprint = card.dataset.fingerprint;
  }
  if (kind === "reject") body.reason = card.querySelector("input[name=reason]").value;
  if (kind === "respond") body.message = card.querySelector("input[name=message]").value;
  if (kind === "approve") {
    try {
      const remember = rememberOf(card);
      if (remember) body.remember = remember;
    } catch (error) {
      answer(card, error.message, false);
      return;
    }
  }
  if (kind === "edit") {
    try {
      body.args = editedArgs(card);
    } catch (error) {
      answer(card, error.message, false);
      return;
    }
  }
  const buttons = [...card.querySelectorAll("button")];
  for (const b of buttons) b.disabled = true;
  answer(card, "sending " + kind + "...");
  let result;
  try {
    result = await post("api/decide", body);
  } catch (error) {
    result = { ok: false, error: "request failed: " + error.message };
  }
  const text = result.ok ? result.message : result.error;
  answer(card, text, result.ok && !result.changed);
  note((result.ok ? "" : card.dataset.workflow + " " + card.dataset.id + ": ") + text, result.ok);
  if (result.ok && result.changed) {
    // Nothing ran: the workflow computed a fresh preview; the next listing
    // brings it (a new version of this card) and the card says why.
    card.dataset.awaitFresh = "1";
    card.querySelector(".changed-note").hidden = false;
    refresh();
  } else if (result.ok) {
    markDecided(card, result.ack);
    refresh();
  }
  if (!(result.ok && !result.changed)) {
    for (const b of buttons) b.disabled = b.dataset.decision === "edit";
  }
}

// ------------------------------------------------------------------ grants

const grantsBox = document.getElementById("grants");
const UNITS = { s: 1, m: 60, h: 3600, d: 86400 };

// "90s", "30m", "1h30m", "2d" or bare seconds, as `filegate approve --for` takes them.
function durationSeconds(text) {
  const spelled = text.trim().toLowerCase();
  if (/^\d+(\.\d+)?$/.test(spelled)) return Number(spelled);
  if (!/^(\d+(\.\d+)?[smhd])+$/.test(spelled)) throw new Error("for: give a duration such as 30m or 2h");
  let total = 0;
  for (const [, n, unit] of spelled.matchAll(/(\d+(?:\.\d+)?)([smhd])/g)) total += Number(n) * UNITS[unit];
  return total;
}

// The card's "remember" choice as Decision.remember, or null when not ticked.
function rememberOf(card) {
  const box = card.querySelector("input[name=remember]");
  if (!box || !box.checked) return null;
  const remember = {};
  const pattern = card.querySelector("input[name=remember-pattern]").value.trim();
  const lasting = card.querySelector("input[name=remember-for]").value;
  if (pattern) remember.pattern = pattern;
  if (lasting.trim()) {
    const seconds = durationSeconds(lasting);
    if (!(seconds > 0)) throw new Error("for: a duration must be longer than 0");
    remember.duration_seconds = seconds;
  }
  return remember;
}

async function refreshGrants() {
  try {
    const response = await fetch("grants", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const fresh = document.createElement("template");
    fresh.innerHTML = await response.text();
    grantsBox.replaceChildren(fresh.content);
    localTimes(grantsBox);
  } catch (error) {
    document.getElementById("conn").textContent = "grants failed: " + error.message;
  }
}

grantsBox.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-revoke]");
  if (!button) return;
  const row = button.closest("tr");
  button.disabled = true;
  let result;
  try {
    result = await post("api/revoke", { workflow_id: row.dataset.workflow, id: button.dataset.revoke });
  } catch (error) {
    result = { ok: false, error: "request failed: " + error.message };
  }
  note(result.ok ? result.message : row.dataset.workflow + " " + button.dataset.revoke + ": " + result.error, result.ok);
  refreshGrants();
});

// A decided card stays until the page is reloaded, saying who decided.
function markDecided(card, ack) {
  const line = card.querySelector(".decision");
  line.textContent = (VERBS[ack.decision] || ack.decision) + " by " + ack.reviewer + " via " +
    ack.via + " at " + new Date().toLocaleTimeString();
  line.hidden = false;
  card.dataset.decided = ack.decision;
  card.classList.add("decided");
}

// The cards of one turn still open on the page: what "Approve all N" decides.
function turnCards(bar) {
  return [...list.querySelectorAll(".card:not(.turn):not(.unreachable):not(.decided)")].filter(
    (c) => c.dataset.workflow === bar.dataset.workflow && c.dataset.turn === bar.dataset.turn);
}

// Every pending call of a turn in one decision (the workflow's decide_turn update),
// naming the preview each of the turn's cards shows: all of them are decided, or none.
async function decideTurn(bar, kind) {
  const cards = turnCards(bar);
  const fingerprints = {};
  for (const c of cards) {
    fingerprints[c.dataset.id] = c.dataset.fingerprint === undefined ? null : c.dataset.fingerprint;
  }
  const body = { workflow_id: bar.dataset.workflow, turn: bar.dataset.turn, decision: kind, fingerprints };
  if (kind === "reject") body.reason = bar.querySelector("input[name=turn-reason]").value;
  const buttons = [...bar.querySelectorAll("button")];
  for (const b of buttons) b.disabled = true;
  answer(bar, "sending " + kind + " for " + cards.length + " calls...");
  let result;
  try {
    result = await post("api/decide-turn", body);
  } catch (error) {
    result = { ok: false, error: "request failed: " + error.message };
  }
  const text = result.ok ? result.message : result.error;
  answer(bar, text, result.ok && !result.changed);
  note((result.ok ? "" : bar.dataset.workflow + " turn " + bar.dataset.turn + ": ") + text, result.ok);
  if (result.ok && result.changed) {
    // Nothing ran: the changed cards come back with fresh previews (and say why).
    for (const c of cards) {
      if (!result.ack.changed_since_preview.includes(c.dataset.id)) continue;
      c.dataset.awaitFresh = "1";
      c.querySelector(".changed-note").hidden = false;
    }
    refresh();
  } else if (result.ok) {
    for (const c of cards) markDecided(c, result.ack);
    markDecided(bar, result.ack);
    refresh();
  }
  if (!(result.ok && !result.changed)) for (const b of buttons) b.disabled = false;
}

list.addEventListener("click", (event) => {
  const card = event.target.closest(".card");
  const plain = card && !card.classList.contains("unreachable") && !card.classList.contains("turn");
  if (plain) select(card, false);
  const button = event.target.closest("button");
  if (!button || !card) return;
  if (button.dataset.action === "edit-preview") editPreview(card);
  else if (button.dataset.turnDecision) decideTurn(card, button.dataset.turnDecision);
  else if (button.dataset.decision) decide(card, button.dataset.decision);
});

// Any change to an argument invalidates the edited change shown: show it again first.
list.addEventListener("input", (event) => {
  const field = event.target.closest("[data-arg]");
  if (!field) return;
  const card = field.closest(".card");
  card.querySelector("button[data-decision=edit]").disabled = true;
  card.querySelector(".edit-preview").replaceChildren();
});

// ------------------------------------------------------------------ keyboard

function cards() {
  return [...list.querySelectorAll(".card:not(.unreachable):not(.decided):not(.turn)")];
}

function selected() {
  return list.querySelector(".card.selected:not(.decided)");
}

function select(card, scroll = true) {
  for (const c of list.querySelectorAll(".card.selected")) c.classList.remove("selected");
  if (!card) return;
  card.classList.add("selected");
  if (scroll) card.scrollIntoView({ block: "nearest" });
}

function move(step) {
  const all = cards();
  if (!all.length) return;
  const at = all.indexOf(selected());
  const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
  select(all[next]);
}

document.addEventListener("keydown", (event) => {
  if (event.altKey || event.metaKey) return;
  const typing = event.target.closest && event.target.closest("input, textarea");
  const card = event.target.closest && event.target.closest(".card");
  if (typing) {
    if (event.key === "Escape") event.target.blur();
    else if (event.key === "Enter" && card && !event.shiftKey) {
      if (event.target.name === "reason") decide(card, "reject");
      else if (event.target.name === "turn-reason") decideTurn(card, "reject");
      else if (event.target.name === "message") decide(card, "respond");
      else if (event.target.dataset.arg && event.ctrlKey) {
        const send = card.querySelector("button[data-decision=edit]");
        if (send.disabled) editPreview(card);
        else decide(card, "edit");
      } else return;
      event.preventDefault();
    }
    return;
  }
  if (event.ctrlKey) return;
  const current = selected() || cards()[0];
  const actions = {
    j: () => move(1),
    k: () => move(-1),
    "?": () => {
      const help = document.getElementById("help");
      help.open = !help.open;
    },
    // Approving needs a card chosen on purpose (j/k or a click): never the first by accident.
    a: () => (selected() ? decide(selected(), "approve") : select(current)),
    r: () => current && (select(current), current.querySelector("input[name=reason]").focus()),
    m: () => current && (select(current), current.querySelector("input[name=message]").focus()),
    e: () => {
      if (!current) return;
      select(current);
      const edit = current.querySelector("details.edit");
      edit.open = true;
      edit.querySelector("[data-arg]")?.focus();
    },
  };
  const action = actions[event.key];
  if (action) {
    event.preventDefault();
    action();
  }
});

for (const tab of document.querySelectorAll("nav.tabs button")) {
  tab.addEventListener("click", () => showTab(tab.dataset.tab));
}

document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
localTimes(document);
tick();
if (document.body.dataset.incomplete) refresh(); // some workflows had not answered yet
setInterval(refresh, refreshMs);
setInterval(tick, 1000);
setInterval(() => {
  if (!document.getElementById("decided-tab").hidden) refreshDecided();
  if (!document.getElementById("grants-tab").hidden) refreshGrants();
}, refreshMs * 2);
