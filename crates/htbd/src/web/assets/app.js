// htbd's console: one page, views picked by the part after '#', every number from /api/v1
// (the same counters `htb-cli class show -s` prints), refreshed every second.
"use strict";

const REFRESH_MS = 1000;
const view = document.getElementById("view");
let timer = null;
let charts = [];

// ---- the token (a non-loopback listener asks for it) ----
function token() { return sessionStorage.getItem("htbd-token"); }

async function api(path) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const r = await fetch("/api/v1/" + path, { headers, cache: "no-store" });
  if (r.status === 401) {
    askToken();
    throw new Error("this htbd needs its token");
  }
  const body = await r.json().catch(() => ({ message: r.statusText }));
  if (!r.ok) throw new Error(body.message || r.statusText);
  return body;
}

function askToken() {
  const dialog = document.getElementById("token-dialog");
  if (!dialog.open) dialog.showModal();
}

document.getElementById("token-form").addEventListener("submit", () => {
  sessionStorage.setItem("htbd-token", document.getElementById("token").value.trim());
  route();
});

// ---- formatting ----
function bits(v) {
  if (v === null || v === undefined) return "–";
  const units = [["Gbit", 1e9], ["Mbit", 1e6], ["Kbit", 1e3]];
  for (const [u, f] of units) if (v >= f) return (v / f).toFixed(v >= 100 * f ? 0 : 2) + " " + u;
  return v + " bit";
}
function num(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en"); }
function us(v) { return v === null || v === undefined ? "–" : v >= 1000 ? (v / 1000).toFixed(2) + " ms" : v + " µs"; }
function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
function enc(s) { return encodeURIComponent(s); }
function card(id, value, label, attrs) {
  return `<div class="card"><b id="${id}" ${attrs || ""}>${value}</b><span>${esc(label)}</span></div>`;
}

// ---- charts (uPlot) ----
function chart(el, title, series, data, fmt) {
  const opts = {
    title, width: Math.min(1200, view.clientWidth - 20), height: 200,
    scales: { x: { time: true } },
    axes: [{}, { values: (u, vs) => vs.map(fmt), size: 80 }],
    series: [{}].concat(series.map((s, i) => ({ label: s, stroke: ["#3b82f6", "#f59e0b", "#10b981", "#ef4444"][i % 4], width: 1.5 }))),
  };
  const c = new uPlot(opts, data, el);
  charts.push(c);
  return c;
}

// Rates between consecutive samples: [[t…], [rate…]…] from cumulative counters.
function rates(samples, fields, scale) {
  const t = [], cols = fields.map(() => []);
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i], dt = (b.at_ms - a.at_ms) / 1000;
    if (dt <= 0) continue;
    t.push(b.at_ms / 1000);
    fields.forEach((f, k) => cols[k].push(Math.max(0, b[f] - a[f]) * scale / dt));
  }
  return [t].concat(cols);
}
function gauge(samples, field) {
  return [samples.map(s => s.at_ms / 1000), samples.map(s => s[field])];
}

// ---- views ----
async function overview() {
  const o = await api("overview");
  const s = o.status;
  const workers = s.workers.map((w, i) => {
    const st = w.stalls || {};
    const sum = a => (a || []).reduce((x, y) => x + y, 0);
    return `<tr><td>${i}</td><td>${w.cpu ?? "–"}</td><td>${num(w.loops)}</td><td>${num(w.queued)}</td>
      <td>${num(w.subtrees)}</td><td>${num(w.handoff_drops)}</td>
      <td>${num(sum(st.counts))}</td><td>${us(Math.round(sum(st.total_ns) / 1000))}</td><td>${us(Math.round((st.longest_ns || 0) / 1000))}</td></tr>`;
  }).join("");
  const ports = o.ports.map(p => {
    const ps = s.ports.find(x => x.dev === p.dev) || {};
    return `<tr><td><a href="#/tree/${enc(p.dev)}">${esc(p.dev)}</a></td>
      <td class="rx" data-bps="${p.rx_bps ?? ""}">${bits(p.rx_bps)}/s</td><td class="tx" data-bps="${p.tx_bps ?? ""}">${bits(p.tx_bps)}/s</td>
      <td>${num(ps.rx_packets)}</td><td>${num(ps.tx_packets)}</td>
      <td>${num(ps.drops_queue)}</td><td>${num(ps.drops_pool)}</td><td>${num(ps.drops_police)}</td>
      <td>${num(ps.drops_no_egress)}</td><td>${num(ps.drops_purged)}</td><td>${num(ps.kernel_rx_ring_full)}</td></tr>`;
  }).join("");
  view.innerHTML = `<h1>Overview</h1>
    <p class="banner ${o.healthy ? "ok" : "bad"}" id="health">${esc(o.health)}</p>
    ${o.one_way_total ? `<p class="banner bad" id="one-way">${num(o.one_way_total)} class(es) carried
      traffic one way at the last scrape of /metrics (the other direction took another path: routes
      and shaping disagree): ${o.one_way.map(w => `${esc(w.class)} (${num(w.packets)} packets on
      ${esc(w.carried_on)}, none on ${esc(w.silent_on)})`).join(", ")}</p>` : ""}
    <div class="cards">
      ${card("frames", num(s.frames.in_tx + s.frames.held + (s.frames.between_workers || 0)), "frames in use of " + num(s.frames.total))}
      ${card("queued", num(s.frames.queued), "packets queued")}
      ${card("longest-job", us(s.longest_job_us), "longest data-plane job")}
      ${card("jobs", num(s.jobs), "control jobs")}
      ${card("tracked", num(o.tracked_classes), "classes with history (" + (o.history_bytes / 1e6).toFixed(1) + " MB)")}
    </div>
    <h2>Ports</h2>
    <table id="ports"><tr><th>port</th><th>in</th><th>out</th><th>rx packets</th><th>tx packets</th>
      <th>queue drops</th><th>pool</th><th>police</th><th>no egress</th><th>purged</th><th>rx ring full</th></tr>${ports}</table>
    <div id="port-charts"></div>
    <h2>Workers</h2>
    <table id="workers"><tr><th>worker</th><th>cpu</th><th>passes</th><th>queued</th><th>subtrees</th><th>handoff drops</th>
      <th title="passes that began over 200 µs late: the host, the kernel or a control job kept the worker from forwarding">stalls</th><th>stalled for</th><th>longest stall</th></tr>${workers}</table>
    <p class="muted">htbd ${esc(s.daemon)}, pid ${s.pid}; stall credit ${us(s.stall_credit_us)}.</p>`;
  const box = document.getElementById("port-charts");
  for (const p of o.ports) {
    const el = document.createElement("div");
    el.className = "chart";
    box.appendChild(el);
    chart(el, p.dev + ": throughput", ["in", "out"], rates(p.history.seconds, ["rx_bytes", "bytes"], 8), v => bits(v));
  }
}

// A label's title, as htbd's ClassLabel::title picks it.
function title(l) {
  const d = (l.devices || [])[0];
  return l.name || l.circuit || (d && (d.name || d.id)) || l.comment || "";
}

// Who a class shapes: its label's circuit, devices, MACs and addresses.
function labelSection(l) {
  if (!l) return "";
  const rows = (l.devices || []).map(d => `<tr><td>${esc(d.id)}</td><td>${esc(d.name || "")}</td>
    <td>${esc(d.mac || "")}</td><td>${(d.addresses || []).map(esc).join("<br>")}</td></tr>`).join("");
  return `<h2>Subscriber</h2><p id="label">${l.name ? `<b>${esc(l.name)}</b>` : ""}
      ${l.circuit ? ` · circuit ${esc(l.circuit)}` : ""}${l.comment ? ` · ${esc(l.comment)}` : ""}</p>
    ${rows ? `<table id="devices"><tr><th>device</th><th>name</th><th>MAC</th><th>addresses</th></tr>${rows}</table>` : ""}`;
}

function classRow(dev, c) {
  const r = c.rates;
  const util = c.utilisation === null || c.utilisation === undefined ? 0 : Math.min(1, c.utilisation);
  const st = c.stats || {};
  const drill = c.leaf ? "" : ` <a href="#/tree/${enc(dev)}/${enc(c.id)}" title="children">▸</a>`;
  const name = c.label ? ` <span class="name">${esc(title(c.label))}</span>` : "";
  return `<tr data-class="${esc(c.id)}"><td><a href="#/class/${enc(dev)}/${enc(c.id)}">${esc(c.id)}</a>${drill}${name}</td>
    <td>${bits(c.rate)}</td><td>${bits(c.ceil)}</td>
    <td class="bps" data-bps="${r ? r.bps : ""}">${r ? bits(r.bps) + "/s" : "–"}</td>
    <td><span class="util"><span style="width:${(util * 100).toFixed(1)}%"></span></span>${r ? (util * 100).toFixed(1) + " %" : ""}</td>
    <td>${r ? r.drops_per_s.toFixed(1) : "–"}</td><td>${num(st.drops)}</td><td>${num(st.backlog_bytes)}</td></tr>`;
}

async function tree(dev, parent) {
  if (!dev) {
    const o = await api("overview");
    view.innerHTML = "<h1>Tree</h1><ul>" + o.ports.map(p => `<li><a href="#/tree/${enc(p.dev)}">${esc(p.dev)}</a></li>`).join("") + "</ul>";
    return;
  }
  const list = await api(`classes?dev=${enc(dev)}&parent=${enc(parent || "root")}`);
  const up = parent ? `<a href="#/class/${enc(dev)}/${enc(parent)}">${esc(parent)}</a>` : "root";
  view.innerHTML = `<h1>${esc(dev)}: children of ${up}</h1>
    <p class="muted">${list.total} classes${list.total > list.classes.length ? ", the " + list.classes.length + " busiest shown" : ""}; busiest first, then the most dropping.</p>
    <table id="classes"><tr><th>class</th><th>rate</th><th>ceil</th><th>sending</th><th>of ceil</th><th>drops/s</th><th>drops</th><th>backlog B</th></tr>
    ${list.classes.map(c => classRow(dev, c)).join("")}</table>`;
}

// ---- flows ----
const PROTOCOLS = { 1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp", 132: "sctp" };
function endpoint(addr, port, proto) {
  const host = addr.includes(":") ? `[${addr}]` : addr;
  return proto === 6 || proto === 17 || proto === 132 ? `${host}:${port}` : host;
}

// The class's largest flows now (`htb-cli flows dev D class C`), or why there are none: htbd
// keeps flow records only with a [flows] section, and says so.
async function flowSection(dev, id) {
  let list;
  try {
    list = await api(`flows?dev=${enc(dev)}&class=${enc(id)}&top=10`);
  } catch (e) {
    return `<h2>Flows</h2><p class="muted" id="flows">${esc(e.message)}</p>`;
  }
  if (list.flows.length === 0) return `<h2>Flows</h2><p class="muted" id="flows">No flow through this class now.</p>`;
  const n = list.sampling || 1;
  const rows = list.flows.map(f => {
    const proto = PROTOCOLS[f.proto] || String(f.proto);
    const bps = f.age_ms > 0 ? Math.round(f.bytes * n * 8000 / f.age_ms) : null;
    return `<tr data-dport="${f.dport}" data-proto="${esc(proto)}" data-bytes="${f.bytes * n}">
      <td>${esc(endpoint(f.src, f.sport, f.proto))}</td><td>${esc(endpoint(f.dst, f.dport, f.proto))}</td>
      <td>${esc(proto)}${f.vlan !== undefined ? " vlan " + f.vlan : ""}</td><td>${esc(f.ingress)}</td>
      <td>${num(f.bytes * n)}</td><td>${num(f.packets * n)}</td><td>${bps === null ? "–" : bits(bps) + "/s"}</td>
      <td>${(f.age_ms / 1000).toFixed(1)} s</td><td>${us(f.rtt_min_us)}</td><td>${num(f.retransmits)}</td><td>${num(f.leaf_drops * n)}</td></tr>`;
  }).join("");
  const shown = list.matched > list.flows.length ? `the ${list.flows.length} largest of ${num(list.matched)}` : `${list.flows.length}`;
  return `<h2>Flows</h2>
    <p class="muted">${shown} flow(s) now, the largest first${n > 1 ? `; 1 in ${n} packets sampled, counts scaled up` : ""}.
      Bytes and packets are what arrived for the flow, its drops included; its rate is theirs over its life so far.</p>
    <table id="flows"><tr><th>from</th><th>to</th><th>protocol</th><th>in on</th><th>bytes</th><th>packets</th>
      <th>arriving</th><th>age</th><th>RTT min</th><th>retransmits</th><th>leaf drops</th></tr>${rows}</table>`;
}

async function classPage(dev, id, span) {
  const day = span === "day";
  const p = await api(`class/${enc(dev)}/${enc(id)}` + (day ? "?day=true" : ""));
  const flows = p.class.leaf ? await flowSection(dev, id) : "";
  const c = p.class, st = c.stats || {}, rtt = st.rtt || {};
  const s = day ? p.history.minutes : p.history.seconds;
  const recent = p.history.seconds;
  const last = recent.length > 1 ? rates(recent.slice(-2), ["bytes", "packets", "drops"], 1) : null;
  const bps = last ? last[1][0] * 8 : (c.rates ? c.rates.bps : null);
  const crumbs = p.path.map(a => `<a href="#/class/${enc(dev)}/${enc(a.id)}">${esc(a.id)}</a>`).join(" › ");
  const leaf = p.leaf ? `<h2>Leaf qdisc</h2><pre id="leaf">${esc(JSON.stringify(p.leaf, null, 2))}</pre>` : "";
  const who = c.label ? ` <span class="name" id="class-name">${esc(title(c.label))}</span>` : "";
  view.innerHTML = `<h1>${esc(dev)} class ${esc(c.id)}${who}</h1>
    <p class="crumbs">${esc(dev)} › ${crumbs}${crumbs ? " › " : ""}<b>${esc(c.id)}</b>
      ${c.leaf ? "" : ` · <a href="#/tree/${enc(dev)}/${enc(c.id)}">children</a>`}</p>
    <div class="cards">
      ${card("class-bps", bps === null ? "–" : bits(Math.round(bps)) + "/s", "sending (last second)", `data-bps="${bps === null ? "" : Math.round(bps)}"`)}
      ${card("class-rate", bits(c.rate), "rate", `data-bps="${c.rate}"`)}
      ${card("class-ceil", bits(c.ceil), "ceil")}
      ${card("class-drops", num(st.drops), "drops")}
      ${card("class-backlog", num(st.backlog_bytes) + " B", "backlog (" + num(st.backlog_packets) + " packets)")}
      ${card("class-rtt", us(rtt.p50_us), "RTT p50 (p95 " + us(rtt.p95_us) + ")")}
      ${card("class-retransmits", num(rtt.retransmits), "TCP retransmits")}
      ${card("class-lended", num(st.lended) + " / " + num(st.borrowed), "lended / borrowed")}
    </div>
    <p>Charts: ${day ? `<a href="#/class/${enc(dev)}/${enc(c.id)}">last 10 minutes</a> · <b>last day</b>`
      : `<b>last 10 minutes</b> · <a id="day" href="#/class/${enc(dev)}/${enc(c.id)}/day">last day</a>`}</p>
    ${labelSection(c.label)}${flows}
    <div id="class-charts"></div>${leaf}
    <p class="muted">History from the moment this class was first viewed or found (10 minutes a second, a day a minute).</p>`;
  const box = document.getElementById("class-charts");
  const add = (title, names, data, fmt) => {
    const el = document.createElement("div");
    el.className = "chart";
    box.appendChild(el);
    chart(el, title, names, data, fmt);
  };
  add("throughput", ["sent"], rates(s, ["bytes"], 8), v => bits(v));
  add("drops per second", ["drops"], rates(s, ["drops"], 1), v => v.toFixed(1));
  add("backlog (bytes)", ["backlog"], gauge(s, "backlog"), v => num(v));
  add("RTT p50 (µs)", ["rtt"], gauge(s, "rtt_p50_us"), v => us(v));
}

async function search(q) {
  document.getElementById("search").value = q;
  const found = await api("search?q=" + enc(q));
  view.innerHTML = `<h1>Search: ${esc(q)}</h1>` + (found.length === 0
    ? `<p id="results" class="muted">Nothing found: no class with that id or a label that mentions it, and no port shapes that address.</p>`
    : `<table id="results"><tr><th>port</th><th>class</th><th>name</th><th>why</th></tr>` + found.map(f =>
      `<tr><td>${esc(f.dev)}</td><td>${f.class ? `<a href="#/class/${enc(f.dev)}/${enc(f.class)}">${esc(f.class)}</a>` : "–"}</td><td>${esc(f.name || "")}</td><td>${esc(f.why)}</td></tr>`).join("") + "</table>");
}

// ---- routing and refresh ----
function parts() { return location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent); }

async function render() {
  const [page, a, b, c] = parts();
  for (const c of charts) c.destroy();
  charts = [];
  try {
    if (page === "tree") await tree(a, b);
    else if (page === "class") await classPage(a, b, c);
    else if (page === "search") await search(a);
    else await overview();
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    view.innerHTML = `<p class="bad" id="error">${esc(e.message)}</p>`;
  }
}

function route() {
  clearTimeout(timer);
  const tick = async () => {
    await render();
    // Search results do not change by the second; every other view is live.
    if (parts()[0] !== "search") timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
}

document.getElementById("search-form").addEventListener("submit", e => {
  e.preventDefault();
  const q = document.getElementById("search").value.trim();
  if (q) location.hash = "#/search/" + enc(q);
});
window.addEventListener("hashchange", route);
route();
