// tunedsl view: the page's script. It asks the server (/api/...) for its data, or, in a
// file written by `tunedsl view --out`, reads the data embedded in #tunedsl-data and
// filters it here by the same rules as tunedsl/view/query.py.
"use strict";

const EMBEDDED = (() => {
  const text = document.getElementById("tunedsl-data").textContent.trim();
  return text ? JSON.parse(text) : null;
})();
// The server's meta answer (the page size, the metric names) is the page's one source
// for what Python defines; it is read before any other request.
let meta = null;

// ---- data: the server's API, or the embedded copy -------------------------------------

function serverApi() {
  async function get(route, params) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) {
      if (value !== "" && value !== null && value !== undefined && value !== false) query.set(key, value);
    }
    const response = await fetch(`api/${route}?${query}`);
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }
  return {
    meta: () => get("meta"),
    rollouts: (params) => get("rollouts", params),
    rollout: (params) => get("rollout", params),
    compare: (params) => get("compare", params),
  };
}

function* strings(value) {
  if (typeof value === "string") yield value;
  else if (Array.isArray(value)) for (const item of value) yield* strings(item);
  else if (value && typeof value === "object") for (const item of Object.values(value)) yield* strings(item);
}

// The filters of query.py's Filters and mentions(), for the embedded rollouts.
function matches(record, params) {
  if (params.step !== "" && params.step !== undefined && record.step !== Number(params.step)) return false;
  if (params.errors && record.error === null) return false;
  const reward = typeof record.reward === "number" && isFinite(record.reward) ? record.reward : null;
  const low = params.min === "" || params.min === undefined ? null : Number(params.min);
  const high = params.max === "" || params.max === undefined ? null : Number(params.max);
  if (low !== null || high !== null) {
    if (reward === null) return false;
    if (low !== null && reward < low) return false;
    if (high !== null && reward > high) return false;
  }
  const needle = (params.q || "").trim().toLowerCase();
  if (needle) {
    for (const text of strings(record)) if (text.toLowerCase().includes(needle)) return true;
    return false;
  }
  return true;
}

function embeddedApi(data) {
  const slice = (list, params) => {
    const offset = Math.max(0, Math.min(Number(params.offset) || 0, list.length));
    return [offset, list.slice(offset, offset + (Number(params.limit) || data.meta.page_size))];
  };
  return {
    meta: async () => data.meta,
    rollouts: async (params) => {
      const chosen = data.records[Number(params.side) || 0].filter((r) => matches(r, params));
      const [offset, items] = slice(chosen, params);
      return { total: chosen.length, offset, items };
    },
    rollout: async (params) => {
      const found = data.records[Number(params.side) || 0].find((r) => r.id === Number(params.id));
      if (!found) throw new Error("this rollout was left out of the file");
      return found;
    },
    compare: async (params) => {
      const [offset, rows] = slice(data.rows, params);
      return { total: data.rows.length, offset, rows };
    },
  };
}

const api = EMBEDDED ? embeddedApi(EMBEDDED) : serverApi();

// ---- small DOM helpers ----------------------------------------------------------------

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const $ = (id) => document.getElementById(id);
const fmt = (value, digits = 4) =>
  typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "—";
const signed = (value) =>
  typeof value === "number" && isFinite(value) ? (value > 0 ? "+" : "") + value.toFixed(4) : "—";

function showProblem(error) {
  const box = $("problem");
  box.hidden = false;
  box.textContent = String(error.message || error);
}

// ---- charts: SVG drawn here, no chart library ------------------------------------------

const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#0a7ea4"];
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
  return node;
}

// At most `most` points of a curve, evenly spaced, the last one always kept.
function thin(points, most = 600) {
  if (points.length <= most) return points;
  const every = points.length / most;
  const kept = [];
  for (let i = 0; i < most; i++) kept.push(points[Math.floor(i * every)]);
  kept.push(points[points.length - 1]);
  return kept;
}

function lineChart(container, series, onPick) {
  container.textContent = "";
  const width = 640, height = 240, left = 52, right = 12, top = 10, bottom = 28;
  const all = series.flatMap((s) => s.points);
  if (!all.length) {
    container.append(el("div", { class: "empty" }, "no values logged"));
    return;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.05;
  y0 -= pad; y1 += pad;
  const sx = (x) => left + ((x - x0) / (x1 - x0)) * (width - left - right);
  const sy = (y) => top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom);
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    chart.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: sy(y), y2: sy(y) }));
    const label = svg("text", { class: "axis", x: left - 6, y: sy(y) + 4, "text-anchor": "end" });
    label.textContent = Math.abs(y) >= 1000 || (Math.abs(y) < 0.01 && y !== 0) ? y.toExponential(1) : y.toFixed(3);
    chart.append(label);
  }
  for (const [x, anchor] of [[x0, "start"], [(x0 + x1) / 2, "middle"], [x1, "end"]]) {
    const label = svg("text", { class: "axis", x: sx(x), y: height - 8, "text-anchor": anchor });
    label.textContent = `step ${Math.round(x)}`;
    chart.append(label);
  }
  series.forEach((s, n) => {
    const color = COLORS[n % COLORS.length];
    const points = thin(s.points);
    chart.append(svg("polyline", { fill: "none", stroke: color, "stroke-width": 1.5,
      points: points.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" ") }));
    for (const [step, value] of points) {
      const dot = svg("circle", { class: "curve-point", cx: sx(step), cy: sy(value), r: 3, fill: color,
        "data-step": step, "data-series": s.name, "data-value": value });
      const tip = svg("title");
      tip.textContent = `${s.name}\nstep ${step}: ${value}`;
      dot.append(tip);
      if (onPick) dot.addEventListener("click", () => onPick(step));
      chart.append(dot);
    }
  });
  container.append(chart, el("div", { class: "legend" },
    series.map((s, n) => el("span", { style: `color:${COLORS[n % COLORS.length]}` }, `● ${s.name}`))));
}

// ---- transcripts ------------------------------------------------------------------------

function textOf(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => (part && typeof part === "object" ? part.text ?? `[${part.type}]` : String(part))).join("");
  }
  return JSON.stringify(content);
}

function toolCall(call) {
  const fn = call.function || call;
  return el("div", { class: "tool-call" }, `${fn.name}(${fn.arguments ?? ""})`, call.id ? `  #${call.id}` : "");
}

function message(msg, extra) {
  const role = msg.role || "unknown";
  const reasoning = msg.reasoning_content || msg.reasoning;
  const label = [role, msg.name, msg.tool_call_id ? `for #${msg.tool_call_id}` : null].filter(Boolean).join(" · ");
  return el("div", { class: `message role-${role}${extra ? " reply" : ""}` },
    el("div", { class: "role" }, extra ? `${label} · reply` : label),
    reasoning ? el("div", { class: "reasoning" }, el("strong", {}, "reasoning: "), reasoning) : null,
    el("div", { class: "content" }, textOf(msg.content)),
    (msg.tool_calls || []).map(toolCall),
    extra ? el("div", { class: "call-foot" }, extra) : null);
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function transcript(calls) {
  const out = [];
  let previous = null;
  calls.forEach((call, n) => {
    let messages = call.messages || [];
    let skipped = 0;
    if (previous) {  // a later call repeats the earlier conversation: show what is new
      const before = previous.messages || [];
      while (skipped < before.length && skipped < messages.length && same(before[skipped], messages[skipped])) skipped++;
      const next = messages[skipped];
      if (skipped === before.length && next && next.role === "assistant" && textOf(next.content) === (previous.reply || "")) skipped++;
    }
    if (calls.length > 1) out.push(el("div", { class: "skipped" }, `call ${n + 1} of ${calls.length}` + (skipped ? ` · ${skipped} earlier messages not repeated` : "")));
    messages.slice(skipped).forEach((m) => out.push(message(m)));
    const foot = [`finish: ${call.finish_reason ?? "—"}`, `${call.prompt_tokens ?? 0} prompt / ${call.completion_tokens ?? 0} reply tokens`].join(" · ");
    out.push(message({ role: "assistant", content: call.reply, reasoning: call.reasoning, tool_calls: call.tool_calls }, foot));
    previous = call;
  });
  return out;
}

function rolloutView(record, open) {
  const first = record.advantages && record.advantages.length ? record.advantages[0] : null;
  // A call's advantage is one number, or one per reply token (distillation): then its mean.
  const perToken = Array.isArray(first);
  const advantage = perToken ? (first.length ? first.reduce((a, b) => a + b, 0) / first.length : null) : first;
  const head = [
    record.run !== null && record.run !== undefined ? `run ${record.run}` : null,
    el("span", { class: `reward ${record.error !== null ? "bad" : ""}` }, `reward ${fmt(record.reward)}`),
    advantage !== null ? `${perToken ? "mean advantage" : "advantage"} ${signed(advantage)}` : null,
    `${(record.calls || []).length} call${(record.calls || []).length === 1 ? "" : "s"}`,
    record.seconds !== null && record.seconds !== undefined ? `${fmt(record.seconds, 2)} s` : null,
    record.error !== null ? el("span", { class: "bad" }, "error") : null,
  ].filter(Boolean);
  const parts = head.flatMap((part, n) => (n ? [" · ", part] : [part]));
  const metrics = Object.entries(record.metrics || {});
  const details = el("details", { class: "rollout", "data-id": record.id, open },
    el("summary", {}, parts),
    record.error !== null ? el("pre", { class: "error" }, record.error) : null,
    record.traceback ? el("pre", { class: "error traceback" }, record.traceback) : null,
    record.output ? el("details", { class: "output" }, el("summary", {}, "printed"),
                       el("pre", {}, record.output)) : null,
    transcript(record.calls || []),
    metrics.length ? el("div", { class: "metrics" }, "metrics: " + metrics.map(([k, v]) => `${k}=${v}`).join(", ")) : null);
  return details;
}

function groupView(records, withStep) {
  const first = records[0];
  const rewards = records.map((r) => r.reward).filter((r) => typeof r === "number");
  const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
  const title = [withStep && first.step !== null ? `step ${first.step}` : null,
    first.task_index !== null ? `task ${first.task_index}` : null,
    `${records.length} rollout${records.length === 1 ? "" : "s"}`, `mean reward ${fmt(mean)}`].filter(Boolean).join(" · ");
  return el("div", { class: "task-group", "data-step": first.step, "data-task": first.task_index },
    el("div", { class: "task-head" }, el("strong", {}, title),
      first.task === null || first.task === undefined ? null : el("pre", {}, JSON.stringify(first.task, null, 1))),
    records.map((r) => rolloutView(r, false)));
}

// ---- the page's state and sections ------------------------------------------------------

const state = { step: "", min: "", max: "", errors: false, q: "", offset: 0 };

function filterParams() {
  return { side: 0, step: state.step, min: state.min, max: state.max, errors: state.errors ? 1 : "",
    q: state.q, offset: state.offset, limit: meta.page_size };
}

let generation = 0;  // answers to an older request are dropped

async function showRollouts() {
  const mine = ++generation;
  let page;
  try {
    page = await api.rollouts(filterParams());
  } catch (error) {
    showProblem(error);
    return;
  }
  if (mine !== generation) return;
  const list = $("rollouts");
  list.textContent = "";
  const end = page.offset + page.items.length;
  $("page-info").textContent = page.total
    ? `${page.offset + 1}–${end} of ${page.total} rollouts` : "no rollouts match";
  $("prev").disabled = page.offset <= 0;
  $("next").disabled = end >= page.total;
  let group = [];
  const flush = () => { if (group.length) list.append(groupView(group, meta.mode !== "eval")); group = []; };
  for (const record of page.items) {
    if (group.length && (group[0].step !== record.step || group[0].task_index !== record.task_index)) flush();
    group.push(record);
  }
  flush();
  document.querySelectorAll(".curve-point").forEach((dot) =>
    dot.classList.toggle("selected", state.step !== "" && Number(dot.dataset.step) === Number(state.step)));
}

function pickStep(step) {
  state.step = String(step);
  state.offset = 0;
  $("step-select").value = state.step;
  showRollouts().then(() => $("rollouts-section").scrollIntoView());
}

function summaryBlock(source, heading) {
  return el("div", { class: "summary-block" }, heading ? el("h2", {}, heading) : null,
    el("table", { class: "summary-table" }, source.summary.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v)))));
}

function showCharts(source) {
  const names = Object.keys(source.curves);
  if (!names.length) return;
  $("charts").hidden = false;
  const rewardNames = source.reward_curves;  // named by the server, the training reward first
  lineChart($("reward-chart"), rewardNames.map((name) => ({ name, points: source.curves[name] })), pickStep);
  const select = $("metric-select");
  const others = names.filter((n) => !rewardNames.includes(n));
  select.replaceChildren(...others.map((n) => el("option", { value: n }, n)));
  const draw = () => lineChart($("metric-chart"), [{ name: select.value, points: source.curves[select.value] || [] }], pickStep);
  if (others.includes(meta.first_metric)) select.value = meta.first_metric;
  select.addEventListener("change", draw);
  if (others.length) draw(); else select.hidden = true;
}

function setUpFilters(source) {
  $("rollouts-section").hidden = false;
  const select = $("step-select");
  // A --out file lists the steps whose rollouts it holds.
  const held = EMBEDDED ? new Set(EMBEDDED.records[0].map((r) => r.step)) : null;
  const steps = held ? source.steps.filter(([step]) => held.has(step)) : source.steps;
  if (meta.mode === "eval" || !steps.length) {
    $("step-label").hidden = true;
  } else {
    select.replaceChildren(el("option", { value: "" }, "all steps"),
      ...steps.slice().reverse().map(([step, count]) => el("option", { value: step }, `${step} (${count})`)));
    state.step = String(steps[steps.length - 1][0]);  // the newest step first
    select.value = state.step;
  }
  let timer = null;
  const changed = () => {
    clearTimeout(timer);  // a typed filter's pending re-query would put the page back at 1
    state.step = select.value;
    state.min = $("reward-min").value;
    state.max = $("reward-max").value;
    state.errors = $("errors-only").checked;
    state.q = $("search").value;
    state.offset = 0;
    showRollouts();
  };
  // Typing re-queries once the typist pauses; a select or checkbox re-queries on "change" alone.
  $("filters").addEventListener("input", (event) => {
    if (event.target.tagName === "SELECT" || event.target.type === "checkbox") return;
    clearTimeout(timer);
    timer = setTimeout(changed, 250);
  });
  $("filters").addEventListener("change", changed);
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); changed(); });
  $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - meta.page_size); showRollouts(); });
  $("next").addEventListener("click", () => { state.offset += meta.page_size; showRollouts(); });
}

// ---- compare: two evals, task by task ----------------------------------------------------

let compareOffset = 0;

async function showCompare() {
  const page = await api.compare({ offset: compareOffset, limit: meta.page_size });
  const body = $("compare-table").querySelector("tbody");
  body.textContent = "";
  for (const row of page.rows) {
    const change = row.delta;
    body.append(el("tr", { class: "compare-row", "data-task": row.task_index, "data-delta": change ?? "", onclick: (event) => showPair(row, event.currentTarget) },
      el("td", {}, row.task_index), el("td", {}, row.task),
      el("td", {}, `${fmt(row.before_mean)} (${row.before.length})`), el("td", {}, `${fmt(row.after_mean)} (${row.after.length})`),
      el("td", { class: change < 0 ? "bad" : change > 0 ? "good" : "" }, signed(change))));
  }
  const end = page.offset + page.rows.length;
  $("compare-info").textContent = page.total ? `${page.offset + 1}–${end} of ${page.total} tasks` : "no tasks";
  $("compare-prev").disabled = page.offset <= 0;
  $("compare-next").disabled = end >= page.total;
}

async function showPair(row, tr) {
  document.querySelectorAll(".compare-row.selected").forEach((r) => r.classList.remove("selected"));
  tr.classList.add("selected");
  const columns = [];
  for (const [side, name] of [[0, "before"], [1, "after"]]) {
    const records = await Promise.all(row[name].map((id) => api.rollout({ side, id })));
    columns.push(el("div", { class: `side side-${name}` }, el("h2", {}, `${name}: ${meta.sources[side].title}`),
      records.length ? records.map((r) => rolloutView(r, true)) : el("div", { class: "empty" }, "not run on this side")));
  }
  $("compare-detail").replaceChildren(el("h2", {}, `task ${row.task_index}`), el("div", { class: "side-by-side" }, columns));
}

// ---- start -------------------------------------------------------------------------------

async function main() {
  meta = await api.meta();
  const sources = meta.sources;
  $("title").textContent = meta.mode === "compare"
    ? `compare: ${sources[0].title} → ${sources[1].title}` : `${meta.mode}: ${sources[0].title}`;
  $("subtitle").textContent = sources.map((s) => s.path).join("  →  ");
  document.title = `tunedsl view · ${$("title").textContent}`;
  if (EMBEDDED && EMBEDDED.left_out) {
    $("left-out").hidden = false;
    $("left-out").textContent = `This file holds ${sources.reduce((n, s) => n + s.rollouts, 0) - EMBEDDED.left_out} of ${sources.reduce((n, s) => n + s.rollouts, 0)} rollouts: ${EMBEDDED.left_out} left out (tunedsl view --max-rollouts sets how many a file keeps).`;
  }
  if (meta.mode === "compare") {
    $("summary").replaceChildren(summaryBlock(sources[0], `before: ${sources[0].title}`), summaryBlock(sources[1], `after: ${sources[1].title}`));
    $("compare").hidden = false;
    $("compare-prev").addEventListener("click", () => { compareOffset = Math.max(0, compareOffset - meta.page_size); showCompare(); });
    $("compare-next").addEventListener("click", () => { compareOffset += meta.page_size; showCompare(); });
    await showCompare();
    return;
  }
  $("summary").replaceChildren(summaryBlock(sources[0]));
  showCharts(sources[0]);
  setUpFilters(sources[0]);
  await showRollouts();
}

main().catch(showProblem);
