// veri console: live logs (SSE, follow/pause), SVG plots from /api/.../metrics, the archive's facet form
// swapped in without a reload. No libraries, no build step.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#475569"];

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

// --- live logs ------------------------------------------------------------------------------------
function startLogs() {
  const box = document.getElementById("logs");
  if (!box) return;
  const button = document.getElementById("log-follow");
  const state = document.getElementById("log-state");
  let following = true;
  let held = [];
  const show = (lines) => {
    box.append(document.createTextNode(lines.join("\n") + "\n"));
    box.scrollTop = box.scrollHeight;
  };
  button.addEventListener("click", () => {
    following = !following;
    button.setAttribute("aria-pressed", String(following));
    button.textContent = following ? "following" : "paused";
    if (following && held.length) { show(held); held = []; }
  });
  const source = new EventSource(box.dataset.src);
  source.onmessage = (event) => {
    const lines = event.data.split("\n");
    if (following) show(lines);
    else { held.push(...lines); button.textContent = `paused (${held.length} new)`; }
  };
  source.addEventListener("end", () => { source.close(); state.textContent = "the job is not running: log complete"; });
  source.onerror = () => { state.textContent = "reconnecting..."; };
  source.onopen = () => { state.textContent = "live"; };
}

// --- plots ------------------------------------------------------------------------------------------
const W = 420, H = 190, PAD = {l: 44, r: 8, t: 8, b: 22};

function frame(box, xs, lo, hi, bands = false) {
  box.replaceChildren();
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img"}, box);
  if (!(hi > lo)) { hi = lo + 1; }
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const sx = (x) => PAD.l + (x - x0) * (W - PAD.l - PAD.r) / (x1 - x0);
  const sy = (y) => H - PAD.b - (y - lo) * (H - PAD.t - PAD.b) / (hi - lo);
  el("line", {x1: PAD.l, y1: H - PAD.b, x2: W - PAD.r, y2: H - PAD.b, class: "axis"}, svg);
  el("line", {x1: PAD.l, y1: PAD.t, x2: PAD.l, y2: H - PAD.b, class: "axis"}, svg);
  for (const value of [lo, (lo + hi) / 2, hi]) {
    el("text", {x: PAD.l - 4, y: sy(value) + 4, class: "tick", "text-anchor": "end"}, svg).textContent = +value.toPrecision(3);
  }
  const band = (W - PAD.l - PAD.r) / Math.max(xs.length, 1);  // bar plots: a step's label under its bar
  for (const [value, at] of [[xs[0], 0], [xs[xs.length - 1], xs.length - 1]]) {
    const x = bands ? PAD.l + (at + 0.5) * band : sx(value);
    el("text", {x, y: H - 6, class: "tick", "text-anchor": "middle"}, svg).textContent = value;
  }
  return {svg, sx, sy};
}

function legend(box, names, colors) {
  const list = document.createElement("div");
  list.className = "legend-row";
  names.forEach((name, i) => {
    const item = document.createElement("span");
    item.innerHTML = `<i style="background:${(colors || [])[i] || COLORS[i % COLORS.length]}"></i>`;
    item.append(document.createTextNode(name));
    list.append(item);
  });
  box.append(list);
}

// An empty plot says why (`empty`): no step has completed (`noStep`: "yet" while the job runs), or the steps
// have no value for it (`none`: the plot's own reason).
function linePlot(box, xs, series, empty, band = null) {
  const values = series.flatMap((s) => s.values).concat(band ? band.lo.concat(band.hi) : []).filter(Number.isFinite);
  if (!xs.length || !values.length) {
    box.textContent = xs.length ? empty.none || "no values in this job's steps" : empty.noStep;
    return;
  }
  const {svg, sx, sy} = frame(box, xs, Math.min(...values), Math.max(...values));
  if (band) {
    const top = xs.map((x, i) => [x, band.hi[i]]).filter((p) => Number.isFinite(p[1]));
    const bottom = xs.map((x, i) => [x, band.lo[i]]).filter((p) => Number.isFinite(p[1])).reverse();
    el("polygon", {points: top.concat(bottom).map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "), class: "band"}, svg);
  }
  series.forEach((s, i) => {
    const points = xs.map((x, j) => [x, s.values[j]]).filter((p) => Number.isFinite(p[1]));
    el("polyline", {points: points.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "), class: "line" + (s.dashed ? " dashed" : ""),
                    stroke: COLORS[i % COLORS.length]}, svg);
    for (const [x, y] of points.length <= 60 ? points : []) {
      el("circle", {cx: sx(x), cy: sy(y), r: 2, fill: COLORS[i % COLORS.length]}, svg);
    }
  });
  const names = series.map((s) => s.name);
  legend(box, band ? [...names, band.name] : names, band ? [...names.map((_, i) => COLORS[i % COLORS.length]), "rgba(37, 99, 235, 0.25)"] : null);
}

function barPlot(box, xs, stacks, empty) {
  const totals = xs.map((_, j) => stacks.reduce((sum, s) => sum + (Number.isFinite(s.values[j]) ? s.values[j] : 0), 0));
  if (!xs.length) { box.textContent = empty.noStep; return; }
  const {svg, sy} = frame(box, xs, 0, Math.max(...totals, 1), true);
  // One band per step inside the axes, so a bar never covers the tick labels.
  const band = (W - PAD.l - PAD.r) / xs.length;
  const width = Math.max(1, band * 0.8);
  xs.forEach((x, j) => {
    let base = 0;
    stacks.forEach((s, i) => {
      const value = Number.isFinite(s.values[j]) ? s.values[j] : 0;
      if (value > 0) {
        const rect = el("rect", {x: PAD.l + j * band + (band - width) / 2, y: sy(base + value), width, height: sy(base) - sy(base + value),
                                 fill: COLORS[i % COLORS.length]}, svg);
        el("title", {}, rect).textContent = `step ${x}: ${s.name} ${+value.toPrecision(4)}`;
      }
      base += value;
    });
  });
  legend(box, stacks.map((s) => s.name));
}

function drawPlots(metrics, running) {
  const noStep = running ? "no completed step yet" : "no step completed in this job";
  const empty = (none) => ({noStep, none});
  const xs = metrics.map((m) => m.step);
  const col = (key) => metrics.map((m) => (m[key] === null || m[key] === undefined ? NaN : m[key]));
  const keys = new Set(metrics.flatMap((m) => Object.keys(m)));
  const mean = col("reward/mean"), std = col("reward/std");
  linePlot(document.getElementById("plot-reward"), xs,
    [{name: "mean", values: mean}, {name: "min", values: col("reward/min"), dashed: true},
     {name: "max", values: col("reward/max"), dashed: true},
     // eval_every: the held-out reward next to the training reward (the gap is the first thing to look at)
     ...(keys.has("eval/reward/mean") ? [{name: "held-out mean (eval)", values: col("eval/reward/mean")}] : [])],
    empty("no rollout of this job's steps has a reward"),
    {name: "mean ± std", lo: mean.map((m, i) => m - std[i]), hi: mean.map((m, i) => m + std[i])});
  const prefixed = (prefix) => [...keys].filter((k) => k.startsWith(prefix)).sort();
  barPlot(document.getElementById("plot-status"), xs, prefixed("status/").map((k) => ({name: k.slice(7), values: col(k)})),
    empty());
  const rules = prefixed("rule/").filter((k) => col(k).some((v) => v > 0));
  barPlot(document.getElementById("plot-rules"), xs, rules.length ? rules.map((k) => ({name: k.slice(5), values: col(k)}))
    : [{name: "no rule fired", values: xs.map(() => 0)}], empty());
  const perRollout = (key) => metrics.map((m) => (m.rollouts ? (m[key] ?? NaN) / m.rollouts : NaN));
  linePlot(document.getElementById("plot-tokens"), xs,
    [{name: "prompt", values: perRollout("tokens/prompt")}, {name: "sampled", values: perRollout("tokens/completion")},
     {name: "environment", values: perRollout("tokens/environment")}], empty("no rollouts in this job's steps"));
  linePlot(document.getElementById("plot-turns"), xs, [{name: "mean", values: col("turns/mean")}, {name: "max", values: col("turns/max")}],
    empty("no rollouts in this job's steps"));
  barPlot(document.getElementById("plot-time"), xs, ["rollout", "reward", "train", "weight_sync",
                                                     ...(keys.has("time/eval_s") ? ["eval"] : [])]
    .map((name) => ({name, values: col(`time/${name}_s`)})), empty());
  linePlot(document.getElementById("plot-parse-failures"), xs,
    [{name: "parse failure rate", values: col("tool_calls/parse_failure_rate")}], empty("no tool calls in this job's steps"));
  if (keys.has("staleness/max")) {  // max_staleness >= 1: how far back each step trained, what it dropped
    const box = document.getElementById("plot-staleness");
    box.closest("figure").hidden = false;
    linePlot(box, xs, [{name: "staleness max", values: col("staleness/max")},
      {name: "staleness mean", values: col("staleness/mean"), dashed: true},
      {name: "stale rollouts dropped", values: col("rollouts/stale_dropped")}], empty());
    // the work those cost: their share of the step's sampled tokens, and their sandboxes' seconds
    const waste = document.getElementById("plot-stale-waste");
    waste.closest("figure").hidden = false;
    linePlot(waste, xs, [{name: "% of sampled tokens", values: col("tokens/stale_dropped_fraction").map((v) => 100 * v)},
      {name: "sandbox-seconds", values: col("sandbox_s/stale_dropped"), dashed: true}], empty());
  }
  const replicas = prefixed("replica/").filter((k) => k.endsWith("/prefix_cache_hit_rate"));
  if (replicas.length) {
    const box = document.getElementById("plot-replicas");
    box.closest("figure").hidden = false;
    linePlot(box, xs, replicas.map((k) => ({name: k.split("/").slice(0, 2).join(" "), values: col(k)})), empty());
  }
}

function startPlots() {
  const section = document.getElementById("plots");
  if (!section) return;
  const head = document.getElementById("job-head");
  const refresh = async () => {
    const answer = await fetch(section.dataset.src);
    if (!answer.ok) return;
    const data = await answer.json();
    drawPlots(data.metrics, data.status === "running");
    document.getElementById("steps-done").textContent = data.steps_done;
    const status = document.getElementById("job-status");
    status.textContent = data.status;
    status.className = `status ${data.status}`;
    head.dataset.status = data.status;
    if (data.status === "running") setTimeout(refresh, 5000);
  };
  refresh();
}

// --- the step timeline: a row per rollout, the trainer, the sync, each policy replica --------------------
const TL = {w: 900, label: 92, row: 14, gap: 4, top: 6, axis: 22};
const TL_KINDS = ["sandbox_start", "model", "harness", "reward", "forward_backward", "optimizer", "weight_sync", "idle"];

function drawTimeline(box, line) {
  box.replaceChildren();
  const rows = [
    ...line.rollouts.map((bar) => ({label: `task ${bar.task} #${bar.rollout}${bar.dropped ? " (dropped)" : ""}`,
                                    cls: "timeline-rollout" + (bar.dropped ? " tl-dropped" : ""), id: bar.rollout_id,
                                    segments: bar.segments, dropped: bar.dropped})),
    {label: "trainer", cls: "timeline-trainer", segments: line.trainer,
     idle: line.trainer_idle},
    {label: "sync", cls: "timeline-sync", segments: line.sync},
    ...Object.entries(line.policy).map(([replica, use]) => ({label: `policy ${replica}`, cls: "timeline-policy",
      segments: use.busy.map((at) => ({kind: "busy", at})), idle: use.idle})),
  ];
  const times = rows.flatMap((r) => r.segments.flatMap((s) => s.at));
  const t0 = Math.min(0, ...times), t1 = Math.max(line.wall_s, ...times, t0 + 1e-3);
  const height = TL.top + rows.length * (TL.row + TL.gap) + TL.axis;
  const svg = el("svg", {viewBox: `0 0 ${TL.w} ${height}`, class: "chart timeline", role: "img"}, box);
  const pattern = el("pattern", {id: "tl-hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse",
                                 patternTransform: "rotate(45)"}, el("defs", {}, svg));
  el("rect", {width: 6, height: 6, fill: "#f3f4f6"}, pattern);
  el("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#d1d5db", "stroke-width": 3}, pattern);
  const sx = (t) => TL.label + (t - t0) * (TL.w - TL.label - 8) / (t1 - t0);
  const rect = (group, at, cls, y, title) => {
    const node = el("rect", {x: sx(at[0]), y, width: Math.max(0.5, sx(at[1]) - sx(at[0])), height: TL.row, class: cls}, group);
    el("title", {}, node).textContent = `${title} ${+at[0].toFixed(2)}s - ${+at[1].toFixed(2)}s (${+(at[1] - at[0]).toFixed(2)}s)`;
  };
  rows.forEach((row, i) => {
    const y = TL.top + i * (TL.row + TL.gap);
    const group = el("g", {class: row.cls, ...(row.id ? {"data-rollout-id": row.id} : {})}, svg);
    el("text", {x: TL.label - 4, y: y + TL.row - 3, class: "tick", "text-anchor": "end"}, group).textContent = row.label;
    for (const at of row.idle || []) rect(group, at, "tl-idle", y, "idle");
    const why = row.dropped ? "dropped as stale, never trained: " : "";  // its bar is faded, outlined (console.css)
    for (const s of row.segments) rect(group, s.at, `tl-${s.kind}`, y, why + (s.replica === undefined ? s.kind : `${s.kind} (replica ${s.replica})`));
  });
  const base = height - TL.axis + 4;
  el("line", {x1: TL.label, y1: base, x2: TL.w - 8, y2: base, class: "axis"}, svg);
  if (t0 < 0) {  // bars sampled while an earlier step trained: mark where this step began
    el("line", {x1: sx(0), y1: TL.top, x2: sx(0), y2: base, class: "axis tl-step-begin", "stroke-dasharray": "3 3"}, svg);
  }
  for (const t of [t0, 0, line.wall_s].filter((v, i, all) => all.indexOf(v) === i)) {
    el("text", {x: sx(t), y: base + 14, class: "tick", "text-anchor": "middle"}, svg).textContent = `${+t.toFixed(1)}s`;
  }
  legend(box, TL_KINDS.map((k) => k.replace("_", " ")),
         ["#9ca3af", "#2563eb", "#fcd34d", "#16a34a", "#7c3aed", "#db2777", "#0891b2", "#e5e7eb"]);
}

function startTimeline() {
  const box = document.getElementById("plot-timeline");
  if (!box) return;
  const select = document.getElementById("timeline-step");
  const figures = document.getElementById("timeline-figures");
  let chosen = null;  // null: follow the latest step
  const load = async () => {
    const answer = await fetch(box.dataset.src + (chosen === null ? "" : `?step=${chosen}`));
    if (!answer.ok) return;
    const data = await answer.json();
    const shown = data.timeline ? data.timeline.step : null;
    select.replaceChildren(...data.steps.map((step) => new Option(step, step, false, step === shown)));
    if (!data.timeline) {
      box.textContent = document.getElementById("job-head").dataset.status === "running" ? "no completed step yet"
        : "no step of this job has a timeline";
      return;
    }
    drawTimeline(box, data.timeline);
    figures.textContent = "utilisation: " + Object.entries(data.timeline.utilisation)
      .map(([name, value]) => `${name.replace("_", " ")} ${(100 * value).toFixed(0)}%`).join(", ");
  };
  select.addEventListener("change", () => { chosen = Number(select.value); load(); });
  load();
  const again = () => { if (document.getElementById("job-head").dataset.status === "running") { if (chosen === null) load(); setTimeout(again, 5000); } };
  setTimeout(again, 5000);
}

// --- the archive's facets -----------------------------------------------------------------------------
function startFacets() {
  const section = document.getElementById("archive");
  if (!section) return;
  const load = async (params) => {
    const form = document.getElementById("facets");
    const answer = await fetch(`${form.dataset.fragment}?${params}`);
    const body = await answer.text();
    const holder = document.createElement("div");
    holder.innerHTML = body;
    const fresh = holder.querySelector("#archive-body");
    if (fresh) document.getElementById("archive-body").replaceWith(fresh);
    else document.getElementById("archive-count").textContent = holder.querySelector("#error-message")?.textContent || "error";
    history.replaceState(null, "", `${form.getAttribute("action")}?${params}#archive`);
  };
  section.addEventListener("submit", (event) => {
    if (event.target.id !== "facets") return;
    event.preventDefault();
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(event.target)) if (value !== "") params.append(key, value);
    load(params.toString());
  });
  section.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-page]");
    if (!link) return;
    event.preventDefault();
    load(new URL(link.href).search.slice(1));
  });
}

// --- the token view: hover titles from the data attributes the server sends -------------------------
function startTokens() {
  const strip = document.getElementById("tokens");
  if (!strip) return;
  let position = 0, span = null;
  for (const node of strip.children) {
    if (node.classList.contains("span-start")) { span = node.textContent; continue; }
    const kind = node.classList.contains("prompt") ? "prompt"
      : `${node.classList.contains("sampled") ? "sampled" : "environment"}, ${node.classList.contains("trained") ? "trained" : "masked"}`;
    const logprob = node.dataset.lp !== undefined ? ` logprob ${node.dataset.lp}` : "";
    const info = `#${position} id ${node.dataset.id}${logprob} ${kind}${span ? ` (${span})` : ""}`;
    node.title = node.title ? `${info} | ${node.title}` : info;
    position += 1;
  }
}

document.addEventListener("DOMContentLoaded", () => { startLogs(); startPlots(); startTimeline(); startFacets(); startTokens(); });
