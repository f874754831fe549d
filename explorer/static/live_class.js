/* A live class in the browser, both sides (explorer.web.routes.classes). The teacher starts one from any page ("Teach"): its browser
   keeps the presenter key (localStorage) and, on every page it opens and every change of its address (a page keeps its state in its
   URL: the tour step, the kernel, the target tab, the pass and match) and every change of what the URL does not hold (a graph's selected
   node, pan and zoom, a pinned source line, the opened panels), tells the class where it is. A student opens the join URL
   (/c/ID) and follows over an event stream: each move brings its tab to the presenter's page and view. A student who goes elsewhere explores
   freely under a banner and rejoins with F. A tour step that asks a question (data-ask) gives the presenter "Ask the class": each
   student answers on its own screen (a number, a choice, or a click on a node of the page's graph), the answers' distribution fills
   in on every screen, and the presenter reveals the answer, which every screen shows beside the class's. The class a tab is in is
   kept in sessionStorage, so it holds across the tab's pages. */
import { $, $$, el, esc, api } from "./dom.js";
import { viewers } from "./viewer.js";
import { goTo } from "./in_place.js";

const SESSION = "ke-class";  // {id, role: "presenter" | "student", student, following, state, expect}
const keyOf = (id) => localStorage.getItem(`ke-class-key:${id}`);
const here = () => location.pathname + location.search;
const QR_SCRIPT = "/static/vendor/qrcode-generator-1.4.4.js";

function session() { try { return JSON.parse(sessionStorage.getItem(SESSION)); } catch (e) { return null; } }
function save(s) { if (s) sessionStorage.setItem(SESSION, JSON.stringify(s)); else sessionStorage.removeItem(SESSION); }

function onAddressChange(changed) {  // the pages change their address with history.replaceState/pushState: each is told
  for (const name of ["pushState", "replaceState"]) {
    const original = history[name];
    history[name] = function (...args) { const r = original.apply(this, args); changed(); return r; };
  }
  window.addEventListener("popstate", changed);
}

function bar(cls) {
  const b = el("div", { class: `class-bar ${cls}`, role: "status", "aria-live": "polite" });
  document.body.prepend(b);
  return b;
}

function countsText(c) {
  const where = c.pages.length ? ` (on ${c.pages.map((p) => `${p.page} ×${p.students}`).join(", ")})` : "";
  return `${c.following} following · ${c.exploring} exploring${where}`;
}

function pollHtml(poll, mine = null) {  // the question, the class's answers (most first), the answer once revealed
  const rows = poll.answers.map((a) => `<li class="${a.answer === poll.revealed ? "right" : ""}${a.answer === mine ? " mine" : ""}">` +
    `<b>${esc(a.answer)}</b> <span class="n">${a.students}</span></li>`).join("");
  const told = poll.revealed === null ? "" : `<p class="class-answer">Answer: <b>${esc(poll.revealed)}</b>${mine === null ? "" : mine === poll.revealed ? " · yours too" : ` · yours: ${esc(mine)}`}</p>`;
  return `<p class="class-prompt">${esc(poll.question.prompt)}</p>${told}<p class="small">${poll.total} answered</p><ol class="class-answers">${rows}</ol>`;
}

function pollCard() {
  let card = $(".class-poll");
  if (!card) { card = el("aside", { class: "class-poll", "aria-live": "polite" }); document.body.appendChild(card); }
  return card;
}

/* ***** what the URL does not hold: a graph's selected node, a graph's pan and zoom, a pinned source line, the opened panels ***** */

function watchView(changed) {  // the presenter's view, kept up to date by the pages' own events (caught on their way down)
  const view = {};
  const on = (type, fn) => document.addEventListener(type, (e) => { if (fn(e) !== false) changed(view); }, true);
  on("node-selected", (e) => { view.graph = e.target.id; view.node = e.detail ? e.detail.id : null; });
  on("view-moved", (e) => {
    const v = viewers.get(e.target.id), at = v && v.placement();
    if (!at) return false;
    Object.assign(view, { panned: e.target.id, ...at });
  });
  on("line-pinned", (e) => { view.lines = $$(".line-mapped").indexOf(e.target); view.pin = e.detail; });
  on("toggle", (e) => {
    if (e.target.tagName !== "DETAILS") return false;
    view.open = $$("details").map((d, i) => (d.open ? i : null)).filter((i) => i !== null).slice(0, 40).join(",");  // the server takes 200 characters
  });
  return view;
}

function loadedViewer(id, until) {  // the viewer of that id once its graph is drawn (null: none comes, or the view moved on)
  return new Promise((done) => {
    const look = () => {
      const v = viewers.get(id);
      if (!v || until()) return done(null);
      if (v.el.dataset.loaded === v.ref && (v.pz || v.big)) return done(v);
      if (v.el.dataset.loaded === "error") return done(null);
      setTimeout(look, 100);
    };
    look();
  });
}

let shown = 0;  // the newest view a student's tab is putting in place: an older one still waiting for its graph gives way

async function showView(view) {
  const mine = ++shown, stale = () => mine !== shown;
  if (typeof view.open === "string") {
    const open = new Set(view.open.split(",").filter(Boolean).map(Number));
    $$("details").forEach((d, i) => { if (d.open !== open.has(i)) d.open = open.has(i); });
  }
  const box = typeof view.lines === "number" ? $$(".line-mapped")[view.lines] : null;
  if (box && "pin" in view) box.dispatchEvent(new CustomEvent("pin-line", { detail: view.pin }));
  if (typeof view.graph === "string") {
    const v = await loadedViewer(view.graph, stale);
    if (v && (view.node === null || typeof view.node === "string")) v.select(view.node, false);
  }
  if (typeof view.panned === "string" && [view.zoom, view.cx, view.cy].every(Number.isFinite)) {
    const v = await loadedViewer(view.panned, stale);
    if (v && !stale()) await v.place(view);
  }
}

/* ***** the presenter ***** */

async function qr(box, url) {
  if (!window.qrcode) await new Promise((ok, fail) => document.head.appendChild(Object.assign(el("script", { src: QR_SCRIPT }), { onload: ok, onerror: fail })));
  const code = window.qrcode(0, "M");
  code.addData(url); code.make();
  box.innerHTML = code.createSvgTag({ cellSize: 3, margin: 2, scalable: true });
}

let presenterPoll = () => {};

function present(s) {
  const key = keyOf(s.id), join = `${location.origin}/c/${s.id}`;
  const asPresenter = (method, path, body) => api(`/api/classes/${s.id}${path}`, { method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Presenter-Key": key } });
  const b = bar("presenter");
  b.innerHTML = `<span class="class-title">Class <b>${s.id}</b></span> <span>join: <a class="mono" href="${join}">${join}</a></span>
    <span class="class-qr" title="the join URL as a QR code"></span> <span class="class-counts">…</span>
    <button type="button" class="small" data-class-end>End class</button>`;
  qr($(".class-qr", b), join).catch(() => {});
  let told = null, soon = null;
  const tell = async () => {  // where this tab is and what it shows, when that changed: a pan is told a few times a second, not per frame
    soon = null;
    const state = { url: here(), view }, said = JSON.stringify(state);
    if (said === told) return;
    told = said;
    try { await asPresenter("PUT", "/state", state); }
    catch (e) { $(".class-counts", b).textContent = `not moved: ${e.message}`; }
  };
  const view = watchView(() => { if (!soon) soon = setTimeout(tell, 200); });
  onAddressChange(tell); tell();
  const poll = async () => {
    try { const c = await api(`/api/classes/${s.id}`); $(".class-counts", b).textContent = countsText(c.counts); presenterPoll(c.poll); }
    catch (e) { $(".class-counts", b).textContent = e.message; if (/no live class/.test(e.message)) { save(null); return; } }
    setTimeout(poll, 2000);
  };
  poll();
  const step = $("#tour[data-ask]"), asks = step ? JSON.parse(step.dataset.ask) : null;
  if (asks) {
    const ask = el("button", { type: "button", class: "small", "data-class-ask": "" }, `Ask the class: ${asks.prompt}`);
    $("[data-class-end]", b).before(ask);
    ask.addEventListener("click", async () => {
      const { answer, ...question } = asks;
      showPoll((await asPresenter("PUT", "/question", question)).poll);
    });
  }
  const showPoll = (p) => {
    if (!p) return;
    const card = pollCard();
    card.innerHTML = pollHtml(p) + (asks && p.question.id === asks.id && p.revealed === null
      ? `<button type="button" class="small" data-class-reveal>Reveal: ${esc(asks.answer)}</button>` : "");
    const reveal = $("[data-class-reveal]", card);
    if (reveal) reveal.addEventListener("click", async () => {
      showPoll((await asPresenter("POST", "/reveal", { answer: asks.answer })).poll);
    });
  };
  presenterPoll = showPoll;
  $("[data-class-end]", b).addEventListener("click", async () => {
    await asPresenter("DELETE", "").catch(() => {});
    localStorage.removeItem(`ke-class-key:${s.id}`); save(null); b.remove();
  });
}

async function startClass() {
  const c = await api("/api/classes", { method: "POST", body: JSON.stringify({ url: here() }) });
  localStorage.setItem(`ke-class-key:${c.id}`, c.presenter_key);
  const s = { id: c.id, role: "presenter" };
  save(s); present(s);
}

/* ***** a student ***** */

function follow(s) {
  const b = bar("student");
  let counts = null;
  const show = () => {
    b.classList.toggle("exploring", !s.following);
    b.innerHTML = s.following ? `Following class <b>${s.id}</b>${counts ? ` · ${countsText(counts)}` : ""}`
      : `You left the class · <button type="button" class="small" data-class-rejoin>follow again: F</button>`;
    const again = $("[data-class-rejoin]", b);
    if (again) again.addEventListener("click", rejoin);
  };
  const tellPresence = () => api(`/api/classes/${s.id}/presence`, { method: "POST", body: JSON.stringify({ student: s.student, following: s.following, page: here().slice(0, 200) }) }).catch(() => {});
  let moves = 0;  // the class's newest move: a step still being fetched when the next one comes gives way
  const go = async (state) => {
    if (!state) return;
    const move = ++moves;
    if (state.url === here()) { showView(state.view || {}); return; }
    s.expect = state.url; save(s);
    if (await goTo(state.url, () => move !== moves || !s.following)) {  // a tour step, put in place: this tab is there
      s.expect = null; save(s);
      showView(state.view || {});
    }
  };
  const explore = () => { if (s.following && s.state && here() !== s.state.url && here() !== s.expect) { s.following = false; save(s); show(); tellPresence(); } };
  function rejoin() { s.following = true; save(s); show(); tellPresence(); go(s.state); }
  if (s.expect && here() === s.expect) s.expect = null;  // arrived where the class sent this tab
  else {  // this tab went somewhere of its own (a link, the address bar, back): it explores
    s.expect = null;
    if (s.following && s.state && here() !== s.state.url) s.following = false;
  }
  save(s); show();
  if (s.following && s.state) go(s.state);  // on the class's page: its view put in place
  // EventSource retries a dropped stream itself, but gives up for good on an answer that is not a stream (a 503 while the server
  // restarts, a 429): then this tab opens it again, a little later each time, until the server says the class is gone
  let src = null, retry = 1000;
  const listen = () => {
    src = new EventSource(`/api/classes/${s.id}/events?` + new URLSearchParams({ student: s.student, following: s.following, page: here().slice(0, 200) }));
    src.addEventListener("open", () => { retry = 1000; });
    src.addEventListener("error", () => {
      if (src.readyState !== EventSource.CLOSED) return;
      const again = () => { setTimeout(listen, retry); retry = Math.min(2 * retry, 10_000); };
      api(`/api/classes/${s.id}`).then(again, (e) => (/no live class/.test(e.message) ? ended() : again()));
    });
    src.addEventListener("state", (e) => {
      s.state = JSON.parse(e.data).state; save(s);
      if (s.following) go(s.state);
    });
    src.addEventListener("counts", (e) => { counts = JSON.parse(e.data); if (s.following) show(); });
    src.addEventListener("poll", (e) => answerCard(s, JSON.parse(e.data)));
    src.addEventListener("ended", ended);
  };
  function ended() { src.close(); save(null); b.classList.add("ended"); b.textContent = "The class ended."; }
  listen();
  onAddressChange(explore);
  document.addEventListener("keydown", (e) => {
    if (e.key !== "f" && e.key !== "F") return;
    if (e.ctrlKey || e.metaKey || e.altKey || /^(INPUT|TEXTAREA|SELECT)$/.test(e.target.tagName) || e.target.isContentEditable) return;
    if (!s.following) { e.preventDefault(); rejoin(); }
  });
}

function answerCard(s, poll) {  // the question on a student's screen: its answer given here, the class's filling in, then revealed
  const card = pollCard(), q = poll.question, mine = (s.answers || {})[q.id] ?? null;
  const fresh = card.dataset.question !== q.id || poll.revealed !== null || !$(".class-poll-view", card);
  if (!fresh) { $(".class-poll-view", card).innerHTML = pollHtml(poll, mine); return; }  // the form kept: an answer may be half typed
  card.dataset.question = q.id;
  card.innerHTML = `<div class="class-poll-view">${pollHtml(poll, mine)}</div>`;
  if (poll.revealed !== null) { delete card.dataset.question; return; }
  const send = (answer) => {
    s.answers = { ...(s.answers || {}), [q.id]: String(answer) }; save(s);  // before the class's next distribution arrives
    api(`/api/classes/${s.id}/answers`, { method: "POST", body: JSON.stringify({ student: s.student, question: q.id, answer: String(answer) }) })
      .catch((e) => { delete s.answers[q.id]; save(s); form.insertAdjacentText("beforeend", ` (not counted: ${e.message})`); });
  };
  const form = el("div", { class: "class-form" });
  if (q.kind === "choice") q.choices.forEach((c) => { const b = el("button", { type: "button", class: "small" }, c); b.addEventListener("click", () => send(c)); form.appendChild(b); });
  else if (q.kind === "number") {
    form.innerHTML = `<input type="number" step="any" aria-label="your answer" value="${mine === null ? "" : esc(mine)}"> <button type="button" class="small">Answer</button>`;
    const input = $("input", form), go = () => { if (input.value !== "") send(input.value); };
    $("button", form).addEventListener("click", go);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  } else {
    form.textContent = "Click a node in the graph to answer.";
    $$(".viewer-canvas").forEach((c) => c.addEventListener("click", (e) => { const g = e.target.closest("g.node"); if (g && g.id.startsWith("n")) send(g.id.slice(1)); }, { once: true }));
  }
  card.appendChild(form);
}

export function joinClass(id, state) {  // the join page (/c/ID): this tab follows the class from now on, from its presenter's page
  const student = Array.from(crypto.getRandomValues(new Uint8Array(12)), (x) => "abcdefghijklmnopqrstuvwxyz0123456789"[x % 36]).join("");
  save({ id, role: "student", student, following: true, state, expect: state.url });
  location.replace(state.url);
}

export function initLiveClass() {
  const s = session();
  if (s && s.role === "presenter" && keyOf(s.id)) present(s);
  else if (s && s.role === "student") follow(s);
  const teach = $("[data-class-start]");
  if (teach) {
    if (s) teach.hidden = true;
    else teach.addEventListener("click", () => startClass().then(() => { teach.hidden = true; }).catch((e) => alert(`No class started: ${e.message}`)));
  }
  const join = $("[data-class-join]");
  if (join) joinClass(join.dataset.classJoin, JSON.parse(join.dataset.state));
}
