/* The pass stepper over one pass graph (templates/_partials/stepper.html): the pass list, before / after / match by match, every match
   of the current pass; ?pass=P&at=before|after|mJ in the URL. */
import { $, $$, esc, setQuery, fetchJSON } from "./dom.js";

export function initPassList(root = document) {  // the pass list: filtered by name, matched passes only
  $$("[data-pass-filter]", root).forEach((box) => {
    const list = document.getElementById(box.dataset.passFilter);
    box.addEventListener("input", () => {
      const q = box.value.trim().toLowerCase();
      $$("a[data-pass]", list).forEach((a) => a.classList.toggle("filtered-out", !!q && !a.dataset.name.toLowerCase().includes(q)));
    });
  });
  $$("[data-matched-only]", root).forEach((cb) => {
    const list = document.getElementById(cb.dataset.matchedOnly);
    const apply = () => list.classList.toggle("matched-only", cb.checked);
    cb.addEventListener("change", apply);
    const active = $("a.active", list);
    if (active && active.classList.contains("zero")) cb.checked = false;
    apply();
  });
}

/* ***** pass stepper: ?pass=P&at=before|after|mJ ***** */

export class Stepper {
  constructor(bar, viewer) {
    this.bar = bar; this.viewer = viewer; this.prefix = bar.dataset.prefix; this.maxSteps = +bar.dataset.maxSteps;
    this.list = document.getElementById(bar.dataset.list);
    this.items = $$("a[data-pass]", this.list);
    this.pass = +bar.dataset.pass; this.at = bar.dataset.at;
    this.items.forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); this.go(+a.dataset.pass, "after"); }));
    $$("[data-toggle-nested]", this.list).forEach((t) => {
      const toggle = (e) => { e.preventDefault(); e.stopPropagation(); this.openNested(t.dataset.toggleNested, t.getAttribute("aria-expanded") !== "true"); };
      t.addEventListener("click", toggle);
      t.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") toggle(e); });
    });
    $$("[data-at-choice]", bar).forEach((r) => r.addEventListener("change", () => this.go(this.pass, r.value)));
    $$("[data-step]", bar).forEach((b) => b.addEventListener("click", () => this.step(b.dataset.step)));
    const goto = $("[data-goto-match]", bar);
    if (goto) goto.addEventListener("change", () => {
      const n = Math.round(+goto.value);
      if (n >= 1 && n <= this.matches()) { this.go(this.pass, `m${n}`); goto.blur(); }
    });
    const slider = $("[data-pass-slider]", bar);
    if (slider) slider.addEventListener("input", () => this.go(+slider.value, this.at.startsWith("m") ? "after" : this.at));
    const panel = $("[data-match-list]");
    this.matchList = panel && bar.dataset.trace ? new MatchList(panel, this) : null;
    document.addEventListener("keydown", (e) => {
      if (!this.bar.isConnected) return;  // a part of the page put in place since brought its own stepper
      // a radio or checkbox keeps the keys (clicking "before" must not stop j/k); a field one types into takes them
      const typing = e.target.closest("textarea, select, input:not([type=radio]):not([type=checkbox]):not([type=button])");
      if (typing || e.metaKey || e.ctrlKey || e.altKey) return;
      const act = { j: "next-pass", k: "prev-pass", l: "next-match", h: "prev-match" }[e.key];
      if (act) { e.preventDefault(); this.step(act); }
    });
    window.addEventListener("popstate", () => {
      if (!this.bar.isConnected) return;
      const u = new URL(window.location.href);
      if (u.searchParams.has("pass")) this.go(+u.searchParams.get("pass"), u.searchParams.get("at") || "after", false);
    });
    this.render(); this.viewer.show(this.ref());
    this.reveal(true);
  }

  ref() { return `${this.prefix}/${this.pass}/${this.at}`; }

  reveal(center) {  // scroll the pass list (only the list, not the page) to the current pass
    const a = this.items[this.pass];
    if (!a || !a.offsetParent) return;
    const top = a.offsetTop, h = this.list.clientHeight;
    if (center) this.list.scrollTop = top - h / 2;
    else if (top < this.list.scrollTop) this.list.scrollTop = top;
    else if (top + a.offsetHeight > this.list.scrollTop + h) this.list.scrollTop = top + a.offsetHeight - h;
  }
  matches() { return +(this.items[this.pass] ? this.items[this.pass].dataset.matches : 0); }
  matchedOnly() { return this.list.classList.contains("matched-only"); }

  go(pass, at, push = true) {
    const from = this.ref();
    this.pass = pass; this.at = at;
    setQuery({ pass, at }, push);
    const stable = $("[data-stable-layout]", this.bar);
    this.render(); this.viewer.show(this.ref(), false, stable && stable.checked && from !== this.ref() ? from : null);
  }

  current() { return this.at.startsWith("m") ? +this.at.slice(1) : 0; }
  item() { return this.items[this.pass]; }

  step(act) {
    const m = this.matches();
    const cur = this.at.startsWith("m") ? +this.at.slice(1) : (this.at === "after" ? m + 1 : 0);
    if (act === "next-pass" || act === "prev-pass") {
      const dir = act === "next-pass" ? 1 : -1;
      for (let i = this.pass + dir; i >= 0 && i < this.items.length; i += dir) {
        const a = this.items[i], shown = !a.classList.contains("nested") || a.classList.contains("open");  // a closed group is one step
        if (shown && (!this.matchedOnly() || +a.dataset.matches > 0)) { this.go(i, "after"); this.reveal(false); return; }
      }
    } else if (act === "next-match") {
      if (cur < m) this.go(this.pass, `m${cur + 1}`); else if (cur === m) this.go(this.pass, "after");
      else { const i = this.passWithMatches(1); if (i !== null) { this.go(i, "m1"); this.reveal(false); } }  // past the last match: the next pass's first
    } else if (act === "prev-match") {
      if (cur > 1 && cur <= m) this.go(this.pass, `m${cur - 1}`); else if (cur > m) this.go(this.pass, m ? `m${m}` : "before");
      else if (cur === 1 || this.at !== "before") this.go(this.pass, "before");
      else { const i = this.passWithMatches(-1); if (i !== null) { this.go(i, `m${+this.items[i].dataset.matches}`); this.reveal(false); } }
    }
  }

  passWithMatches(dir) {  // the nearest pass in that direction that matched anything (null: none)
    for (let i = this.pass + dir; i >= 0 && i < this.items.length; i += dir) if (+this.items[i].dataset.matches > 0) return i;
    return null;
  }

  openNested(top, open) {  // show (or hide) the nested rewrites a top-level pass ran
    $$(`a[data-top="${top}"]`, this.list).forEach((a) => a.classList.toggle("open", open));
    const t = $(`[data-toggle-nested="${top}"]`, this.list);
    if (t) { t.setAttribute("aria-expanded", String(open)); t.textContent = `${open ? "▾" : "▸"} ${t.textContent.slice(2)}`; }
  }

  render() {
    this.items.forEach((a, i) => a.classList.toggle("active", i === this.pass));
    if (this.items[this.pass] && this.items[this.pass].dataset.top) this.openNested(this.items[this.pass].dataset.top, true);  // stepped into a group
    const item = this.items[this.pass];
    const m = this.matches(), steppable = m;
    $("[data-pos-pass]", this.bar).textContent = `${this.pass + 1} / ${this.items.length}`;
    $("[data-pass-name]", this.bar).textContent = item ? `${item.dataset.name} · ${m} match${m === 1 ? "" : "es"}${m > this.maxSteps ? ` (whole graph for the first ${this.maxSteps}, then each match's own UOps)` : ""}` : "";
    const goto = $("[data-goto-match]", this.bar);
    if (goto) { goto.max = m; goto.disabled = !m; goto.placeholder = m ? `1..${m}` : "–"; }
    const slider = $("[data-pass-slider]", this.bar);
    if (slider) slider.value = this.pass;
    if (this.matchList) this.matchList.show();
    $$("[data-at-choice]", this.bar).forEach((r) => { r.checked = r.value === this.at; });
    const pos = this.at.startsWith("m") ? this.at.slice(1) : (this.at === "before" ? "0" : "end");
    $("[data-pos-match]", this.bar).textContent = steppable ? `${pos} / ${steppable}` : "–";
    $("[data-step=prev-match]", this.bar).disabled = this.at === "before" && this.passWithMatches(-1) === null;
    $("[data-step=next-match]", this.bar).disabled = this.at === "after" && this.passWithMatches(1) === null;
  }
}

/* ***** every match of the current pass, a page at a time ***** */

const MATCH_PAGE = 100;

class MatchList {
  constructor(panel, stepper) {
    this.panel = panel; this.stepper = stepper; this.key = null; this.offset = 0; this.total = 0;
    $$("[data-match-page]", panel).forEach((b) => b.addEventListener("click", () => {
      const off = this.offset + (b.dataset.matchPage === "next" ? MATCH_PAGE : -MATCH_PAGE);
      if (off >= 0 && off < this.total) this.load(off);
    }));
    $("[data-pass-python]", panel).addEventListener("click", () => this.python());
  }

  url(kind, extra = "") {
    const item = this.stepper.item(), target = this.stepper.bar.dataset.target;
    return `/api/traces/${this.stepper.bar.dataset.trace}/rewrites/${item.dataset.group}/${item.dataset.step}/${kind}?` +
      (target ? `target=${encodeURIComponent(target)}&` : "") + extra;
  }

  show() {  // the page holding the current match, loaded when the pass or the page changes
    const item = this.stepper.item();
    if (!item || item.dataset.group === "" || item.dataset.group === undefined) { this.panel.hidden = true; return; }
    this.panel.hidden = false;
    const cur = this.stepper.current(), offset = cur ? Math.floor((cur - 1) / MATCH_PAGE) * MATCH_PAGE : 0;
    const key = `${this.stepper.pass}`;
    if (key !== this.key) { $("[data-pass-python-text]", this.panel).hidden = true; }
    if (key !== this.key || (cur && offset !== this.offset)) { this.key = key; this.load(offset); } else this.mark();
  }

  async load(offset) {
    const body = $("tbody", this.panel), key = this.key;
    this.offset = offset; this.total = this.stepper.matches();
    if (!this.total) { body.innerHTML = '<tr><td colspan="5" class="muted">This pass matched nothing.</td></tr>'; this.head(null); return; }
    body.innerHTML = '<tr><td colspan="5" class="muted">loading the matches…</td></tr>';
    let got;
    try { got = await fetchJSON(this.url("matches", `offset=${offset}&limit=${MATCH_PAGE}`)); } catch (e) {
      if (key === this.key) body.innerHTML = `<tr><td colspan="5" class="err">${esc(e.message)}</td></tr>`;
      return;
    }
    if (key !== this.key || offset !== this.offset) return;  // the user moved on
    this.head(got);
    body.innerHTML = got.matches.map((m) => {
      const diff = m.diff.map((ln) => `<span class="${ln.startsWith("+") ? "add" : ln.startsWith("-") ? "del" : ""}">${esc(ln)}</span>`).join("\n");
      return `<tr data-match="${m.index}"><td><a href="?pass=${this.stepper.pass}&amp;at=m${m.index}" data-go="${m.index}">${m.index}</a></td>` +
        `<td class="mono">${esc(m.op)}</td><td><details><summary><code>${esc(m.rule)}</code></summary><pre class="listing">${esc(m.rule_source)}</pre></details>` +
        (m.error ? `<div class="err small">${esc(m.error)}</div>` : "") + `</td><td class="num mono">${fmtMicros(m.time_s)}</td>` +
        `<td><details><summary class="muted">${m.diff.length} lines</summary><pre class="diff">${diff}</pre></details></td></tr>`;
    }).join("");
    $$("a[data-go]", body).forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); this.stepper.go(this.stepper.pass, `m${a.dataset.go}`); }));
    this.mark();
  }

  head(got) {
    $("[data-match-call]", this.panel).textContent = got ? `${got.total} in all · run at ${got.call}: ${got.call_code}` : "";
    this.stack(got ? got.stack || [] : []);
    const end = Math.min(this.offset + MATCH_PAGE, this.total);
    $("[data-match-range]", this.panel).textContent = this.total ? ` ${this.offset + 1}–${end} of ${this.total} ` : "";
    $("[data-match-page=prev]", this.panel).disabled = this.offset === 0;
    $("[data-match-page=next]", this.panel).disabled = end >= this.total;
  }

  stack(frames) {  // the Python stack that opened the pass's rewrite group, outermost first; the program's own lines link to its source
    const box = $("[data-pass-stack]", this.panel);
    box.hidden = !frames.length;
    if (!frames.length) return;
    const file = this.panel.dataset.programFile, trace = this.stepper.bar.dataset.trace;
    const where = (f) => `${f.file.startsWith("tinygrad/") ? f.file : f.file.split("/").pop()}:${f.line}`;
    const caller = [...frames].reverse().find((f) => !f.file.startsWith("tinygrad/")) || frames[0];
    $("summary", box).textContent = `called from ${where(caller)} (${caller.function}) · the stack that opened this pass's group, ${frames.length} frames`;
    $("ol", box).innerHTML = frames.map((f) => {
      const at = file && f.file === file ? `<a href="/t/${esc(trace)}/source#L${f.line}">${esc(where(f))}</a>` : `<span title="${esc(f.file)}">${esc(where(f))}</span>`;
      return `<li data-frame><span class="mono">${at}</span> <span class="muted">${esc(f.function)}</span> <code>${esc(f.code)}</code></li>`;
    }).join("");
  }

  mark() {
    const cur = this.stepper.current();
    $$("tr[data-match]", this.panel).forEach((tr) => tr.classList.toggle("current", +tr.dataset.match === cur));
  }

  async python() {
    const pre = $("[data-pass-python-text]", this.panel);
    if (!pre.hidden) { pre.hidden = true; return; }
    pre.hidden = false; pre.textContent = "loading…";
    try {
      const got = await fetchJSON(this.url("python"));
      pre.textContent = got.python + (got.cut ? "\n# ... cut here (the graph is longer)" : "");
    } catch (e) { pre.textContent = e.message; }
  }
}

function fmtMicros(s) { return s >= 1e-3 ? `${(s * 1e3).toFixed(2)} ms` : `${(s * 1e6).toFixed(1)} µs`; }
