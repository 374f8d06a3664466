// MRC run view: replays the recordings (views/runview.py) embedded in the page as JSON,
// or, on the live page (views/liveview.py), polls the current run's new samples twice
// a second. No libraries and no network beyond that loopback poll: the report is one file.
// #run=K&sample=N opens run K (a bench report holds one per contender and scenario) at
// sample N: a link to a moment of a run, and the tests' way in.
"use strict";
const DATA = JSON.parse(document.getElementById("run-data").textContent);
const ASKED = Object.fromEntries(window.location.hash.slice(1).split("&")
  .map(kv => kv.split("=")).filter(kv => kv.length === 2 && /^\d+$/.test(kv[1]))
  .map(([k, v]) => [k, Number(v)]));
const RUN = Math.min(ASKED.run || 0, DATA.runs.length - 1);
const REC = DATA.runs[RUN];
const SAMPLES = REC.samples;
const LINKS = REC.fabric.links;
const NS = "http://www.w3.org/2000/svg";
const PAGE_W = 1280;     // what one screen holds; planes wrap into rows of panels
const MAX_HOSTS = 8;     // more hosts than this: one box per T0 stands for its hosts
const LABEL_GAP = 40;    // below this node spacing names move into the hover text
const notes = new Set();  // what the page aggregates, said on the page

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function fmt(v) { return v >= 1000 ? (v / 1000).toFixed(1) + "k" : String(Math.round(v)); }

// ---- the run chooser (a bench report) -------------------------------------------------------
const chooser = document.getElementById("run");
if (DATA.runs.length > 1) {
  DATA.runs.forEach((r, i) => {
    const opt = document.createElement("option");
    opt.value = i;
    opt.textContent = r.name || "run " + i;
    chooser.appendChild(opt);
  });
  chooser.value = RUN;
  chooser.addEventListener("change", () => {
    window.location.hash = "run=" + chooser.value;
    window.location.reload();
  });
} else {
  chooser.hidden = true;
}
document.getElementById("run-name").textContent = REC.name || "";

// ---- fabric: a panel per plane, T1 on top, T0 in the middle, hosts below ---------------------
const hostsAggregated = REC.fabric.hosts.length > MAX_HOSTS;
const t0Count = Math.max(...REC.fabric.planes.map(p => p.t0.length));
const rowMax = Math.max(...REC.fabric.planes.map(p => Math.max(p.t1.length, p.t0.length,
  hostsAggregated ? p.t0.length : Math.ceil(REC.fabric.hosts.length / 2))));
const PANEL_W = Math.min(PAGE_W, Math.max(180, Math.min(620, 60 + 70 * rowMax)));
const PER_ROW = Math.max(1, Math.floor(PAGE_W / PANEL_W));
const PANEL_H = 230;
const fabricSvg = el("svg", {width: PANEL_W * Math.min(PER_ROW, REC.fabric.planes.length),
  height: PANEL_H * Math.ceil(REC.fabric.planes.length / PER_ROW)},
  document.getElementById("fabric"));
const pos = {};  // "plane:name" -> [x, y]
let spacing = Infinity;
function rowPositions(names, plane, y) {
  const step = (PANEL_W - 40) / Math.max(1, names.length);
  spacing = Math.min(spacing, step);
  const [ox, oy] = [(plane % PER_ROW) * PANEL_W, Math.floor(plane / PER_ROW) * PANEL_H];
  names.forEach((n, i) => { pos[plane + ":" + n] = [ox + 20 + step * (i + 0.5), oy + y]; });
}
const hostBox = {};  // host -> the name of the box it is drawn in, per plane
function hostRow(plane) {
  if (!hostsAggregated) return REC.fabric.hosts;
  const boxes = [];
  for (const h of REC.fabric.hosts) {
    const box = "hosts@" + REC.fabric.nic_t0[h][plane.plane];
    hostBox[plane.plane + ":" + h] = box;
    if (!boxes.includes(box)) boxes.push(box);
  }
  return boxes;
}
const planeTitles = {};
for (const p of REC.fabric.planes) {
  rowPositions(p.t1, p.plane, 40);
  rowPositions(p.t0, p.plane, 120);
  rowPositions(hostRow(p), p.plane, 200);
  const [ox, oy] = [(p.plane % PER_ROW) * PANEL_W, Math.floor(p.plane / PER_ROW) * PANEL_H];
  planeTitles[p.plane] = el("text", {x: ox + 20, y: oy + 14, class: "plane-title"}, fabricSvg,
    "plane " + p.plane);
}
const labels = spacing >= LABEL_GAP;
if (hostsAggregated) {
  notes.add(REC.fabric.hosts.length + " hosts are drawn as one box per T0 ("
    + REC.fabric.hosts.length / t0Count + " each); its link is the sum of its hosts' links.");
}
if (!labels) notes.add("Node names are in the hover text at this size.");
function planeOf(link) {
  const sw = /^p(\d+)/.exec(link.a) || /^p(\d+)/.exec(link.b);
  return sw ? Number(sw[1]) : 0;
}
// a drawn line stands for one link, or for the host links of a T0 when hosts are aggregated
const drawn = {};  // key -> {line, title, links: [index], name}
LINKS.forEach((link, i) => {
  const plane = planeOf(link);
  const a = hostBox[plane + ":" + link.a] || link.a;
  const key = plane + ":" + a + "|" + link.b;
  if (!drawn[key]) {
    const pa = pos[plane + ":" + a], pb = pos[plane + ":" + link.b];
    if (!pa || !pb) return;
    const line = el("line", {x1: pa[0], y1: pa[1], x2: pb[0], y2: pb[1], class: "link"},
      fabricSvg);
    drawn[key] = {line: line, title: el("title", {}, line, ""), links: [], plane: plane,
      name: a.replace("hosts@", "hosts of ") + " - " + link.b};
  }
  drawn[key].links.push(i);
});
for (const key of Object.keys(pos)) {
  const name = key.slice(key.indexOf(":") + 1);
  const role = name.startsWith("h") ? "host" : /s\d+$/.test(name) ? "t1" : "t0";
  const [x, y] = pos[key];
  const shown = name.startsWith("hosts@") ? "hosts" : name;
  const node = labels
    ? el("rect", {x: x - 17, y: y - 9, width: 34, height: 18, rx: 3, class: "node-" + role},
      fabricSvg)
    : el("circle", {cx: x, cy: y, r: 5, class: "node-" + role}, fabricSvg);
  el("title", {}, node, name.replace("hosts@", "hosts of "));
  if (labels) el("text", {x: x - 14, y: y + 4}, fabricSvg, shown);
}

// ---- EV grid: one square per EV of the focus sender's QP, a row per plane --------------------
let evRects = {};
function buildEvGrid() {
  const ids = Object.keys(REC.evs || {});
  const holder = document.getElementById("evs");
  if (!ids.length || ids.every(ev => ev in evRects)) {
    if (!ids.length) holder.textContent = DATA.live ? "waiting for the sender's EVs"
      : "no MRC QP in this run";
    return;
  }
  holder.textContent = "";
  evRects = {};
  const perPlaneCount = {};
  for (const ev of ids) perPlaneCount[REC.evs[ev][0]] = (perPlaneCount[REC.evs[ev][0]] || 0) + 1;
  const widest = Math.max(8, ...Object.values(perPlaneCount));
  const size = Math.max(4, Math.min(16, Math.floor((PAGE_W - 60) / widest)));
  if (size < 10) notes.add("EVs are drawn small (" + widest + " per plane): hover for each.");
  const svg = el("svg", {width: 60 + size * widest, height: 20 * REC.fabric.planes.length + 10},
    holder);
  const col = {};
  for (const ev of ids.sort((x, y) => Number(x) - Number(y))) {
    const [plane, route] = REC.evs[ev];
    col[plane] = (col[plane] || 0) + 1;
    const rect = el("rect", {x: 55 + size * (col[plane] - 1), y: 5 + 20 * plane,
      width: size - 2, height: 14, class: "ev"}, svg);
    evRects[ev] = [rect, el("title", {}, rect, ""), route];
  }
  REC.fabric.planes.forEach(p => el("text", {x: 0, y: 16 + 20 * p.plane}, svg, "plane " + p.plane));
}

// ---- timelines: goodput against capacity; retransmits, trims, NACKs, ECN marks per second ----
const TL_W = 900, TL_H = 150, PAD = 50;
const RATES = [["retransmits", "retransmits"], ["trims_received", "trims"],
  ["nacks_received", "NACKs"], ["ecn_marks_received", "ECN marks"]];
const tl = el("svg", {width: TL_W, height: TL_H}, document.getElementById("timeline"));
const tl2 = el("svg", {width: TL_W, height: TL_H}, document.getElementById("signals"));
let X = () => PAD;
const cursors = [];
function counterRates(key) {  // per sample, from the counters' differences
  const out = [];
  for (let i = 1; i < SAMPLES.length; i++) {
    const [a, b] = [SAMPLES[i - 1], SAMPLES[i]];
    if (!a.counters || !b.counters || b.t <= a.t) continue;
    out.push([b.t, Math.max(0, (b.counters[key] - a.counters[key]) / (b.t - a.t))]);
  }
  return out;
}
function axes(svg, peak, label) {
  const Y = v => TL_H - 20 - (TL_H - 30) * v / peak;
  el("line", {x1: PAD, y1: Y(0), x2: TL_W - 10, y2: Y(0), stroke: "#999"}, svg);
  el("text", {x: 2, y: 14}, svg, label);
  el("text", {x: PAD, y: TL_H - 4}, svg, "0 s");
  el("text", {x: TL_W - 60, y: TL_H - 4}, svg, X.tEnd.toFixed(1) + " s");
  for (const e of REC.events) {
    el("line", {x1: X(e.t), y1: 18, x2: X(e.t), y2: TL_H - 20,
      class: e.event === "up" ? "event-up" : "event-down"}, svg);
    el("text", {x: X(e.t) + 2, y: 28}, svg, e.event + " " + e.a + "-" + e.b);
  }
  cursors.push(el("line", {x1: PAD, y1: 5, x2: PAD, y2: TL_H - 20, class: "cursor"}, svg));
  return Y;
}
function drawTimelines() {
  for (const svg of [tl, tl2]) while (svg.firstChild) svg.removeChild(svg.firstChild);
  cursors.length = 0;
  const tEnd = Math.max(0.001, ...SAMPLES.map(s => s.t));
  X = t => PAD + (TL_W - PAD - 10) * t / tEnd;
  X.tEnd = tEnd;
  const peak = Math.max(REC.capacity_bps || 0, ...SAMPLES.map(s => s.goodput_bps || 0), 1);
  const Y = axes(tl, peak, REC.goodput ? "goodput, " + fmt(peak / 1e6) + " Mbit/s top"
    : "goodput not sampled: these flows' bytes are not the agents' (kernel TCP)");
  if (REC.capacity_bps) {
    el("line", {x1: PAD, y1: Y(REC.capacity_bps), x2: TL_W - 10, y2: Y(REC.capacity_bps),
      class: "capacity"}, tl);
    el("text", {x: TL_W - 60, y: Y(REC.capacity_bps) - 4}, tl, "capacity");
  }
  const points = SAMPLES.filter(s => s.goodput_bps !== undefined)
    .map(s => X(s.t).toFixed(1) + "," + Y(s.goodput_bps).toFixed(1)).join(" ");
  el("polyline", {points: points, class: "goodput"}, tl);
  const series = RATES.map(([key, name]) => [name, counterRates(key)]);
  const top = Math.max(1, ...series.flatMap(([, pts]) => pts.map(p => p[1])));
  const Y2 = axes(tl2, top, "per second at the focus sender, " + fmt(top) + " top");
  series.forEach(([name, pts], k) => {
    el("polyline", {points: pts.map(([t, v]) => X(t).toFixed(1) + "," + Y2(v).toFixed(1))
      .join(" "), class: "signal signal-" + k}, tl2);
    el("text", {x: TL_W - 320 + 80 * k, y: 14, class: "signal-label-" + k}, tl2, name);
  });
}

// ---- one sample on screen ------------------------------------------------------------------
function show(i) {
  const s = SAMPLES[i];
  if (!s) return;
  document.getElementById("time").textContent = "t = " + s.t.toFixed(2) + " s";
  for (const c of cursors) { c.setAttribute("x1", X(s.t)); c.setAttribute("x2", X(s.t)); }
  const down = new Set(s.down || []);
  const planeSum = {};
  for (const d of Object.values(drawn)) {
    let [ab, ba, trims, ecn, isDown] = [0, 0, 0, 0, false];
    for (const li of d.links) {
      const pps = (s.pps || [])[li] || [0, 0];
      const marks = (s.marks || {})[li] || [0, 0, 0, 0];
      ab += pps[0]; ba += pps[1]; trims += marks[0] + marks[1]; ecn += marks[2] + marks[3];
      isDown = isDown || down.has(LINKS[li].id);
    }
    const sum = planeSum[d.plane] = planeSum[d.plane] || [0, 0, 0];
    sum[0] += ab + ba; sum[1] += trims; sum[2] += isDown ? 1 : 0;
    d.line.setAttribute("class", isDown ? "link link-down" : trims > 0 ? "link link-trim"
      : ecn > 0 ? "link link-ecn" : "link");
    d.line.setAttribute("stroke-width", isDown ? 2 : 1 + Math.log10(1 + ab + ba) * 1.5);
    d.title.textContent = d.name + ": " + fmt(ab) + " / " + fmt(ba) + " packets/s"
      + (trims ? ", " + fmt(trims) + " trims/s" : "") + (ecn ? ", " + fmt(ecn) + " ECN marks/s" : "")
      + (isDown ? " (down)" : "");
  }
  for (const [plane, [pps, trims, nDown]] of Object.entries(planeSum)) {
    planeTitles[plane].textContent = "plane " + plane + ": " + fmt(pps) + " packets/s"
      + (trims ? ", " + fmt(trims) + " trims/s" : "") + (nDown ? ", " + nDown + " down" : "");
  }
  for (const [ev, [rect, title, route]] of Object.entries(evRects)) {
    const info = (s.evs || {})[ev];
    if (!info) continue;
    rect.setAttribute("class", "ev ev-" + info[0]);
    title.textContent = "EV " + ev + " route " + route + ": " + info[0] + ", " + info[1]
      + " packets";
  }
  const c = s.counters || {};
  document.getElementById("counters").textContent = s.missing ? "sample missing: " + s.missing
    : Object.entries(c).map(([k, v]) => k + " " + v).join(" · ")
      + (s.goodput_bps !== undefined ? " · goodput " + (s.goodput_bps / 1e6).toFixed(2)
        + " Mbit/s" : "");
}

const slider = document.getElementById("slider");
function refresh(index) {
  buildEvGrid();
  drawTimelines();
  document.getElementById("notes").textContent = [...notes].join(" ");
  slider.max = Math.max(0, SAMPLES.length - 1);
  slider.value = index;
  show(index);
}
slider.addEventListener("input", () => show(Number(slider.value)));
let timer = null;
document.getElementById("play").addEventListener("click", () => {
  if (timer) { clearInterval(timer); timer = null; return; }
  if (Number(slider.value) >= SAMPLES.length - 1) slider.value = 0;
  timer = setInterval(() => {
    const next = Number(slider.value) + 1;
    if (next >= SAMPLES.length) { clearInterval(timer); timer = null; return; }
    slider.value = next;
    show(next);
  }, 1000 * REC.period_s);
});

if (DATA.live) {
  // the live page: new samples of the run that served it, following the newest one; a new
  // run (the bench's next contender) reloads the page for its fabric
  document.getElementById("play").disabled = true;
  const poll = () => fetch("samples?token=" + encodeURIComponent(DATA.live.token)
      + "&run=" + DATA.live.run + "&since=" + SAMPLES.length, {cache: "no-store"})
    .then(r => r.ok ? r.json() : Promise.reject(r.status))
    .then(got => {
      if (got.run !== DATA.live.run) { window.location.reload(); return; }
      SAMPLES.push(...got.samples);
      REC.events = got.events;
      REC.evs = got.evs;  // the focus QP's EVs (a new QP replaces them)
      if (got.samples.length) refresh(SAMPLES.length - 1);
      document.getElementById("live").textContent = "live: " + SAMPLES.length + " samples";
    })
    .catch(err => { document.getElementById("live").textContent = "live: stopped (" + err + ")"; })
    .finally(() => setTimeout(poll, 1000 * REC.period_s));
  refresh(0);
  poll();
} else {
  refresh(Math.min(ASKED.sample || 0, Math.max(0, SAMPLES.length - 1)));
}
