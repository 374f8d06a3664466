// MRC run view: replays a recording (topologies/runview.py) embedded in the page as JSON, or,
// on the live page (topologies/liveview.py), polls the run's new samples twice a second.
// No libraries and no network beyond that loopback poll: the report is one file.
"use strict";
const DATA = JSON.parse(document.getElementById("run-data").textContent);
const REC = DATA.recording;
const SAMPLES = REC.samples;
const NS = "http://www.w3.org/2000/svg";

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

// ---- fabric: one column per plane, T1 on top, T0 in the middle, hosts below -------------
const PLANE_W = 60 + 70 * Math.max(...REC.fabric.planes.map(p => Math.max(p.t1.length,
  p.t0.length, REC.fabric.hosts.length / Math.max(1, p.t0.length))));
const FAB_H = 230;
const fabricSvg = el("svg", {width: PLANE_W * REC.fabric.planes.length, height: FAB_H},
  document.getElementById("fabric"));
const pos = {};  // "plane:name" -> [x, y]
function rowPositions(names, plane, y) {
  const step = (PLANE_W - 40) / Math.max(1, names.length);
  names.forEach((n, i) => { pos[plane + ":" + n] = [plane * PLANE_W + 20 + step * (i + 0.5), y]; });
}
for (const p of REC.fabric.planes) {
  rowPositions(p.t1, p.plane, 30);
  rowPositions(p.t0, p.plane, 110);
  rowPositions(REC.fabric.hosts, p.plane, 190);
  el("text", {x: p.plane * PLANE_W + 20, y: 12}, fabricSvg, "plane " + p.plane);
}
function planeOf(link) {
  const sw = /^p(\d+)/.exec(link.a) || /^p(\d+)/.exec(link.b);
  return sw ? Number(sw[1]) : 0;
}
const linkLines = {};
for (const link of REC.fabric.links) {
  const plane = planeOf(link);
  const a = pos[plane + ":" + link.a], b = pos[plane + ":" + link.b];
  if (!a || !b) continue;
  const line = el("line", {x1: a[0], y1: a[1], x2: b[0], y2: b[1], class: "link"}, fabricSvg);
  linkLines[link.id] = [line, el("title", {}, line, link.a + " - " + link.b)];
}
for (const key of Object.keys(pos)) {
  const [, name] = key.split(":");
  const role = name.startsWith("h") ? "host" : /s\d+$/.test(name) ? "t1" : "t0";
  const [x, y] = pos[key];
  el("rect", {x: x - 16, y: y - 9, width: 32, height: 18, rx: 3, class: "node-" + role},
    fabricSvg);
  el("text", {x: x - 13, y: y + 4}, fabricSvg, name);
}

// ---- EV grid: one square per EV of the sender's QP, a row per plane (built when the first
// sample with EVs is there) -----------------------------------------------------------------
const evRects = {};
let evBuilt = false;
function buildEvGrid() {
  const first = SAMPLES.find(s => s.evs && Object.keys(s.evs).length);
  if (evBuilt) return;
  if (!first) {
    document.getElementById("evs").textContent = DATA.live ? "waiting for the sender's EVs"
      : "no MRC QP in this run";
    return;
  }
  evBuilt = true;
  const ids = Object.keys(first.evs);
  const holder = document.getElementById("evs");
  holder.textContent = "";
  const svg = el("svg", {width: 16 * Math.max(8, Math.ceil(ids.length / REC.fabric.planes.length))
    + 60, height: 20 * REC.fabric.planes.length + 10}, holder);
  const perPlane = {};
  for (const ev of ids) {
    const plane = first.evs[ev][0];
    const col = perPlane[plane] = (perPlane[plane] || 0) + 1;
    const rect = el("rect", {x: 50 + 16 * (col - 1), y: 5 + 20 * plane, width: 14, height: 14,
      class: "ev"}, svg);
    evRects[ev] = [rect, el("title", {}, rect, "")];
  }
  REC.fabric.planes.forEach(p => el("text", {x: 0, y: 16 + 20 * p.plane}, svg, "plane " + p.plane));
}

// ---- timeline: goodput against capacity, link events, a cursor (redrawn as samples come) --
const TL_W = 760, TL_H = 160, PAD = 40;
const tl = el("svg", {width: TL_W, height: TL_H}, document.getElementById("timeline"));
let X = t => PAD, cursor = null;
function drawTimeline() {
  while (tl.firstChild) tl.removeChild(tl.firstChild);
  const tEnd = Math.max(0.001, ...SAMPLES.map(s => s.t));
  const peak = Math.max(DATA.capacity_bps || 0, ...SAMPLES.map(s => s.goodput_bps || 0), 1);
  X = t => PAD + (TL_W - PAD - 10) * t / tEnd;
  const Y = v => TL_H - 20 - (TL_H - 30) * v / peak;
  el("line", {x1: PAD, y1: Y(0), x2: TL_W - 10, y2: Y(0), stroke: "#999"}, tl);
  if (DATA.capacity_bps) {
    el("line", {x1: PAD, y1: Y(DATA.capacity_bps), x2: TL_W - 10, y2: Y(DATA.capacity_bps),
      class: "capacity"}, tl);
    el("text", {x: 2, y: Y(DATA.capacity_bps) + 4}, tl, "capacity");
  }
  const points = SAMPLES.filter(s => s.goodput_bps !== undefined)
    .map(s => X(s.t).toFixed(1) + "," + Y(s.goodput_bps).toFixed(1)).join(" ");
  el("polyline", {points: points, class: "goodput"}, tl);
  for (const e of REC.events) {
    el("line", {x1: X(e.t), y1: 10, x2: X(e.t), y2: TL_H - 20,
      class: e.event === "up" ? "event-up" : "event-down"}, tl);
    el("text", {x: X(e.t) + 2, y: 20}, tl, e.event + " " + e.a + "-" + e.b);
  }
  el("text", {x: PAD, y: TL_H - 4}, tl, "0 s");
  el("text", {x: TL_W - 50, y: TL_H - 4}, tl, tEnd.toFixed(1) + " s");
  cursor = el("line", {x1: PAD, y1: 5, x2: PAD, y2: TL_H - 20, class: "cursor"}, tl);
}

// ---- one sample on screen ------------------------------------------------------------------
function show(i) {
  const s = SAMPLES[i];
  if (!s) return;
  document.getElementById("time").textContent = "t = " + s.t.toFixed(2) + " s";
  cursor.setAttribute("x1", X(s.t));
  cursor.setAttribute("x2", X(s.t));
  const down = new Set(s.down || []);
  for (const [id, [line, title]] of Object.entries(linkLines)) {
    const pps = (s.pps || {})[id] || [0, 0];
    const total = pps[0] + pps[1];
    line.setAttribute("class", down.has(id) ? "link link-down" : "link");
    line.setAttribute("stroke-width", down.has(id) ? 2 : 1 + Math.log10(1 + total) * 1.5);
    title.textContent = id.replace("|", " - ") + ": " + pps[0] + " / " + pps[1] + " packets/s"
      + (down.has(id) ? " (down)" : "");
  }
  for (const [ev, [rect, title]] of Object.entries(evRects)) {
    const info = (s.evs || {})[ev];
    if (!info) continue;
    rect.setAttribute("class", "ev ev-" + info[2]);
    title.textContent = "EV " + ev + " route " + info[1] + ": " + info[2] + ", "
      + info[3] + " packets";
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
  drawTimeline();
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
  // the live page: new samples from the run that served it, following the newest one
  document.getElementById("play").disabled = true;
  const poll = () => fetch("samples?token=" + encodeURIComponent(DATA.live.token)
      + "&since=" + SAMPLES.length, {cache: "no-store"})
    .then(r => r.ok ? r.json() : Promise.reject(r.status))
    .then(got => {
      SAMPLES.push(...got.samples);
      REC.events = got.events;
      if (got.samples.length) refresh(SAMPLES.length - 1);
      document.getElementById("live").textContent = "live: " + SAMPLES.length + " samples";
    })
    .catch(err => { document.getElementById("live").textContent = "live: stopped (" + err + ")"; })
    .finally(() => setTimeout(poll, 1000 * REC.period_s));
  refresh(0);
  poll();
} else {
  // #sample=N opens the report at sample N (a link to a moment of the run, and the tests' way)
  const asked = /^#sample=(\d+)$/.exec(window.location.hash);
  refresh(asked ? Math.min(Number(asked[1]), Math.max(0, SAMPLES.length - 1)) : 0);
}
