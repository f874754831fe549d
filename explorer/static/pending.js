/* A part of a page computed on first view (a job): follow the job, then put the part in place (no reload). */

export async function swapIn(id, also = []) {  // the element of this id as the same page renders it now, in place of the one shown, brought to
  // life; `also`: selectors of other parts that change with it (the pipeline ribbon's facts), replaced as they are
  const html = await (await fetch(window.location.href, { headers: { Accept: "text/html" }, cache: "no-store" })).text();
  const doc = new DOMParser().parseFromString(html, "text/html");
  const fresh = doc.getElementById(id), now = document.getElementById(id);
  if (!fresh || !now) { window.location.reload(); return; }
  const node = document.importNode(fresh, true);
  now.replaceWith(node);
  node.dispatchEvent(new CustomEvent("swapped-in", { bubbles: true }));  // explorer.js's boot brings it to life (importing boot: a cycle)
  for (const sel of also) {
    const was = document.querySelector(sel), is = doc.querySelector(sel);
    if (was && is) was.replaceWith(document.importNode(is, true));
  }
}

export function follow(url, { detail, done, failed }) {  // a lazy part's job, polled until it is stored (done), fails (failed) or while it waits
  // (detail: the job's words as it goes); refused a place in the line (429, 503), the page waits as Retry-After says and asks again
  const poll = async () => {
    let wait = 700;
    try {
      const r = await fetch(url);
      if (r.status === 200) { await done(r); return; }
      const d = await r.json();
      if (r.status === 202) detail(d.detail || d.status);
      else if (r.status === 429 || r.status === 503) {
        detail(`waits for a place in the line (${d.detail})`);
        wait = 1000 * (Number(r.headers.get("Retry-After")) || 5);
      } else { failed(d.detail || `${r.status}`); return; }
    } catch (e) { /* try again */ }
    setTimeout(poll, wait);
  };
  setTimeout(poll, 500);
}
