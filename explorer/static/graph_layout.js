/* A layered layout of a directed acyclic graph, after Sugiyama's steps but kept simple enough that 20,000 nodes take well under a
   second (dot takes seconds at 600): ranks by longest path from the inputs (an input sits just above its first user), an order within
   each rank by median sweeps, x from each node's neighbours, pushed apart so that no two boxes of a rank overlap. Plain data in and
   out, no DOM: it runs in a worker (graph_worker.js). Edges point from an input to its user, drawn downwards, as dot draws UOps. */

const GAP_X = 14, GAP_Y = 36, SWEEPS = 4, PLACE_ROUNDS = 4;

function ranked(n, ins, outs) {  // longest path from the inputs, then each input moved down to just above its nearest user
  const rank = new Int32Array(n), indeg = new Int32Array(n), order = [];
  for (let i = 0; i < n; i++) indeg[i] = ins[i].length;
  for (let i = 0; i < n; i++) if (!indeg[i]) order.push(i);
  for (let h = 0; h < order.length; h++) {
    const u = order[h];
    for (const v of outs[u]) { rank[v] = Math.max(rank[v], rank[u] + 1); if (!--indeg[v]) order.push(v); }
  }
  for (let h = order.length - 1; h >= 0; h--) {
    const u = order[h];
    if (!ins[u].length && outs[u].length) rank[u] = Math.min(...outs[u].map((v) => rank[v])) - 1;
  }
  return { rank, order };
}

function median(xs) {
  if (!xs.length) return -1;
  const s = xs.slice().sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function ordered(layers, ins, outs, at) {  // median sweeps, down then up: each node sorted by where its neighbours are
  const place = () => layers.forEach((layer) => layer.forEach((u, i) => { at[u] = (i + 0.5) / layer.length; }));
  place();
  for (let s = 0; s < SWEEPS; s++) {
    for (const [from, range] of [[ins, layers.keys()], [outs, [...layers.keys()].reverse()]]) {
      for (const r of range) {
        const layer = layers[r], key = new Map(layer.map((u) => [u, median(from[u].map((v) => at[v]))]));
        layer.forEach((u) => { if (key.get(u) < 0) key.set(u, at[u]); });  // nothing to follow: stays where it is
        layer.sort((a, b) => key.get(a) - key.get(b));
        layer.forEach((u, i) => { at[u] = (i + 0.5) / layer.length; });
      }
    }
  }
}

function packed(layer, w, want, x) {  // x near `want` in the layer's order, no two boxes closer than GAP_X: a left and a right pass, averaged
  const k = layer.length, left = new Float64Array(k), right = new Float64Array(k);
  for (let i = 0; i < k; i++) {
    const u = layer[i];
    left[i] = i ? Math.max(want[u], left[i - 1] + (w[layer[i - 1]] + w[u]) / 2 + GAP_X) : want[u];
  }
  for (let i = k - 1; i >= 0; i--) {
    const u = layer[i];
    right[i] = i < k - 1 ? Math.min(want[u], right[i + 1] - (w[layer[i + 1]] + w[u]) / 2 - GAP_X) : want[u];
  }
  for (let i = 0; i < k; i++) {
    const u = layer[i], mid = (left[i] + right[i]) / 2;
    x[u] = i ? Math.max(mid, x[layer[i - 1]] + (w[layer[i - 1]] + w[u]) / 2 + GAP_X) : mid;
  }
}

function backEdges(n, outs) {  // the edges that close a cycle, found depth first (a graph of groups has cycles; a UOp graph none)
  const state = new Uint8Array(n), back = new Set();  // 0 unseen, 1 on the path, 2 done
  for (let root = 0; root < n; root++) {
    if (state[root]) continue;
    const stack = [[root, 0]];
    state[root] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1], [u, i] = top;
      if (i === outs[u].length) { state[u] = 2; stack.pop(); continue; }
      top[1]++;
      const v = outs[u][i];
      if (state[v] === 1) back.add(u * n + v);
      else if (!state[v]) { state[v] = 1; stack.push([v, 0]); }
    }
  }
  return back;
}

/* nodes: [{id, w, h}]; edges: [{src, dst}] by id. Returns {x, y} (centres, by node index), the ranks, and the drawing's size. An
   edge that closes a cycle is laid out reversed. */
export function layered(nodes, edges) {
  const n = nodes.length, index = new Map(nodes.map((nd, i) => [nd.id, i]));
  const pairs = [], all = Array.from({ length: n }, () => []);
  for (const e of edges) {
    const s = index.get(e.src), d = index.get(e.dst);
    if (s === undefined || d === undefined || s === d) continue;
    pairs.push([s, d]); all[s].push(d);
  }
  const back = backEdges(n, all), ins = Array.from({ length: n }, () => []), outs = Array.from({ length: n }, () => []);
  for (const [s, d] of pairs) {
    const [a, b] = back.has(s * n + d) ? [d, s] : [s, d];
    ins[b].push(a); outs[a].push(b);
  }
  const { rank, order } = ranked(n, ins, outs);
  let low = 0, high = 0;
  for (let i = 0; i < n; i++) { low = Math.min(low, rank[i]); high = Math.max(high, rank[i]); }
  const layers = Array.from({ length: high - low + 1 }, () => []);
  for (const u of order) layers[rank[u] - low].push(u);
  ordered(layers, ins, outs, new Float64Array(n));
  const w = Float64Array.from(nodes, (nd) => nd.w), x = new Float64Array(n), want = new Float64Array(n);
  for (const layer of layers) {  // first each rank packed around 0
    let at = -layer.reduce((s, u) => s + w[u] + GAP_X, 0) / 2;
    for (const u of layer) { x[u] = at + w[u] / 2; at += w[u] + GAP_X; }
  }
  for (let round = 0; round < PLACE_ROUNDS; round++) {  // then each node towards its neighbours (inputs and users alternately)
    const near = round % 2 ? outs : ins, range = round % 2 ? [...layers.keys()].reverse() : [...layers.keys()];
    for (const r of range) {
      for (const u of layers[r]) want[u] = near[u].length ? near[u].reduce((s, v) => s + x[v], 0) / near[u].length : x[u];
      packed(layers[r], w, want, x);
    }
  }
  const y = new Float64Array(n), heights = layers.map((layer) => Math.max(0, ...layer.map((u) => nodes[u].h)));
  let top = 0, minX = Infinity, maxX = -Infinity;
  layers.forEach((layer, r) => {
    for (const u of layer) { y[u] = top + heights[r] / 2; minX = Math.min(minX, x[u] - w[u] / 2); maxX = Math.max(maxX, x[u] + w[u] / 2); }
    top += heights[r] + GAP_Y;
  });
  if (!n) minX = maxX = 0;
  for (let i = 0; i < n; i++) x[i] -= minX;
  return { x, y, rank: Int32Array.from(rank, (r) => r - low), width: maxX - minX, height: Math.max(0, top - GAP_Y) };
}
