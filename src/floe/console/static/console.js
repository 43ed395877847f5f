// Floe console: live refresh from the JSON admin API and the forms that change things.
// Vanilla JS, no build step, no CDN. Every page sets <body data-page="...">.
"use strict";

const REFRESH_MS = 3000;
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// With admin.authentication=basic the session cookie rides along; a state change also
// carries the session's CSRF token (from the page's <meta>), and a lapsed session
// (401) goes back to the login page.
const CSRF = document.querySelector('meta[name="csrf-token"]')?.content;

function toLogin() {
  location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
}

async function send(method, url, body) {
  const init = { method, headers: { "X-Floe-Console": "1" }, credentials: "same-origin" };
  if (CSRF && method !== "GET") init.headers["X-CSRF-Token"] = CSRF;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(url, init);
  if (res.status === 401) toLogin();
  return res;
}

async function api(method, path, body) {
  const res = await send(method, "/api/v1" + path, body);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.message || res.statusText);
  return data;
}

function flash(message, error = false) {
  const el = $("#flash");
  el.textContent = message;
  el.className = "flash" + (error ? " error" : "");
  el.hidden = false;
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function set(root, field, value) {
  const cell = root && $(`[data-f="${field}"]`, root);
  if (cell) cell.textContent = value;
}

function bytes(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB"];
  let v = n / 1024;
  for (const u of units) {
    if (v < 1024 || u === "GiB") return v.toFixed(1) + " " + u;
    v /= 1024;
  }
}

function ago(ms) {
  if (ms == null) return "–";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 90) return s.toFixed(0) + " s ago";
  if (s < 5400) return (s / 60).toFixed(0) + " min ago";
  return (s / 3600).toFixed(1) + " h ago";
}

function cellText(v) {
  if (v === null || v === undefined) return "NULL";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

// A results grid: header row + rows, each cell a <td> with the value as text.
function grid(columns, rows, id) {
  const table = el("table", { class: "grid", id: id || "" });
  const head = el("tr");
  columns.forEach((c) => head.appendChild(el("th", {}, c)));
  table.appendChild(el("thead")).appendChild(head);
  const body = table.appendChild(el("tbody"));
  rows.forEach((r) => {
    const tr = body.appendChild(el("tr"));
    r.forEach((v) => tr.appendChild(el("td", v === null ? { class: "null" } : {}, cellText(v))));
  });
  return table;
}

function poll(fn) {
  const live = $("#live");
  const tick = async () => {
    try {
      await fn();
      live.className = "ok";
    } catch (e) {
      live.className = "bad";
      live.title = String(e);
    }
  };
  tick();
  setInterval(tick, REFRESH_MS);
}

const sumLag = (t) =>
  t.partitions.some((p) => p.lag_records === null)
    ? "–"
    : t.partitions.reduce((a, p) => a + p.lag_records, 0);

// -- pages ------------------------------------------------------------------------

// -- charts: the last 15 minutes (GET /history), drawn as inline SVG ------------------
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

function short(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
}

// lines: [{label, points: [[epoch ms, value], ...]}]; draws into the .chart box
function chart(box, lines) {
  if (!box) return;
  lines = lines.filter((l) => l.points && l.points.length).slice(0, COLORS.length);
  const title = el("div", { class: "chart-title" }, box.dataset.title);
  const points = lines.flatMap((l) => l.points);
  if (!points.length) {
    box.replaceChildren(title, el("p", { class: "muted" }, "no samples yet"));
    return;
  }
  const [w, h] = [320, 70];
  const t0 = Math.min(...points.map((p) => p[0]));
  const t1 = Math.max(t0 + 1, ...points.map((p) => p[0]));
  const top = Math.max(...points.map((p) => p[1])) || 1;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", box.dataset.title);
  lines.forEach((line, i) => {
    const path = document.createElementNS(SVG, "polyline");
    const xy = line.points.map(
      ([t, v]) => `${(((t - t0) / (t1 - t0)) * w).toFixed(1)},${(h - 2 - (v / top) * (h - 4)).toFixed(1)}`
    );
    path.setAttribute("points", xy.join(" "));
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", COLORS[i]);
    path.setAttribute("stroke-width", "1.5");
    path.dataset.series = line.label;
    svg.appendChild(path);
  });
  const legend = el("div", { class: "chart-legend" });
  lines.forEach((line, i) => {
    const item = el("span", {}, `${line.label} ${short(line.points[line.points.length - 1][1])}`);
    item.style.borderLeft = `3px solid ${COLORS[i]}`;
    legend.appendChild(item);
  });
  box.replaceChildren(title, svg, el("div", { class: "muted chart-max" }, `max ${short(top)}`), legend);
}

function series(byName, metric) {
  return Object.entries(byName).map(([label, m]) => ({ label, points: m[metric] || [] }));
}

function overviewPage() {
  let last = null;
  poll(async () => {
    const h = await api("GET", "/history");
    chart($("#ch-records"), series(h.topics, "records_in"));
    chart($("#ch-bytes-in"), series(h.topics, "bytes_in"));
    chart($("#ch-bytes-out"), series(h.topics, "bytes_out"));
    chart($("#ch-group-lag"), series(h.groups, "lag"));
    chart($("#ch-table-lag"), series(h.tables, "lag_records"));
    chart($("#ch-freshness"), series(h.tables, "freshness_s"));
  });
  poll(async () => {
    const o = await api("GET", "/overview");
    $("#ov-topics").textContent = o.topics;
    $("#ov-partitions").textContent = o.partitions;
    $("#ov-groups").textContent = o.groups;
    $("#ov-tables").textContent = o.tables.length;
    if (last && o.time_ms > last.time_ms) {
      const dt = (o.time_ms - last.time_ms) / 1000;
      $("#ov-in").textContent = Math.max(0, (o.produced - last.produced) / dt).toFixed(1);
      $("#ov-out").textContent = Math.max(0, (o.consumed - last.consumed) / dt).toFixed(1);
    }
    last = o;
    for (const t of o.tables) {
      const row = $(`#ov-table-list tr[data-topic="${CSS.escape(t.topic)}"]`);
      if (!row) continue;
      $('[data-f="status"]', row).textContent = t.status;
      $('[data-f="status"]', row).className = "badge s-" + t.status;
      set(row, "lag", t.lag_records === null ? "–" : t.lag_records);
    }
  });
}

function topicsPage() {
  // the forms and buttons a user may not use are not rendered (admin.authentication)
  $("#create-topic")?.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const configs = {};
    for (const item of f.configs.value.split(",")) {
      if (!item.trim()) continue;
      const [k, ...rest] = item.split("=");
      configs[k.trim()] = rest.join("=").trim();
    }
    try {
      await api("POST", "/topics", {
        name: f.name.value.trim(),
        partitions: Number(f.partitions.value),
        configs,
      });
      location.reload();
    } catch (e) {
      flash(e.message, true);
    }
  });
  for (const row of $$("#topic-list tr[data-topic]")) {
    const topic = row.dataset.topic;
    for (const button of $$("button[data-enable]", row)) {
      button.addEventListener("click", async () => {
        const enabled = button.dataset.enable === "true";
        const settings = enabled
          ? {
              "convert.value.type": $('select[name="mode"]', row).value,
              "commit.interval.ms": $('input[name="interval"]', row).value,
            }
          : {};
        try {
          await api("PUT", `/topics/${encodeURIComponent(topic)}/table`, { enabled, settings });
          location.reload();
        } catch (e) {
          flash(e.message, true);
        }
      });
    }
    $("button.delete", row)?.addEventListener("click", async () => {
      if (!confirm(`Delete topic ${topic}? Its records are gone for good.`)) return;
      try {
        await api("DELETE", `/topics/${encodeURIComponent(topic)}`);
        location.reload();
      } catch (e) {
        flash(e.message, true);
      }
    });
  }
  poll(async () => {
    const { topics } = await api("GET", "/topics");
    for (const t of topics) {
      const row = $(`#topic-list tr[data-topic="${CSS.escape(t.topic)}"]`);
      set(row, "messages", t.messages);
      set(row, "size", bytes(t.size_bytes));
    }
  });
}

function renderMessages(messages) {
  const rows = messages.map((m) => [
    m.partition,
    m.offset,
    new Date(m.timestamp).toISOString(),
    m.key,
    m.value,
    [m.value_format, m.value_schema_id !== null ? "#" + m.value_schema_id : ""].join(" ").trim(),
  ]);
  const box = $("#messages");
  box.replaceChildren(
    rows.length
      ? grid(["partition", "offset", "timestamp", "key", "value", "format"], rows, "message-grid")
      : el("p", { class: "muted" }, "No messages.")
  );
}

function renderTimeline(snapshots) {
  const list = $("#tb-timeline");
  list.replaceChildren();
  if (!snapshots.length) list.appendChild(el("li", { class: "muted" }, "No snapshots yet."));
  const max = Math.max(1, ...snapshots.map((s) => s.added_records || 0));
  for (const s of snapshots.slice(0, 30)) {
    const li = el("li");
    li.appendChild(el("span", { class: "when" }, s.time.replace("T", " ").replace("+00:00", "Z")));
    const bar = el("span", { class: "bar" });
    bar.style.width = Math.max(2, (120 * (s.added_records || 0)) / max) + "px";
    li.appendChild(bar);
    li.appendChild(
      el(
        "span",
        {},
        `${s.operation} +${s.added_records ?? 0} rows, ${s.added_files ?? 0} files, total ${s.total_records ?? "?"}`
      )
    );
    list.appendChild(li);
  }
}

function topicPage() {
  const data = $("#topic-data");
  const topic = data.dataset.topic;
  const path = "/topics/" + encodeURIComponent(topic);
  const table = data.dataset.table === "yes";
  const readable = data.dataset.read === "yes";
  let sampledAt = null;
  poll(async () => {
    const h = await api("GET", "/history");
    const mine = h.topics[topic] || {};
    chart($("#ch-records"), [{ label: "records in", points: mine.records_in }]);
    chart($("#ch-bytes"), [
      { label: "in", points: mine.bytes_in },
      { label: "out", points: mine.bytes_out },
    ]);
    const t = h.tables[topic] || {};
    chart($("#ch-table-lag"), [{ label: "lag", points: t.lag_records }]);
    chart($("#ch-freshness"), [{ label: "since commit", points: t.freshness_s }]);
    chart($("#ch-round"), [{ label: "round", points: t.round_s }]);
  });
  poll(async () => {
    const [detail, msgs] = await Promise.all([
      api("GET", path),
      readable ? api("GET", path + "/messages?limit=20") : null,
    ]);
    for (const p of detail.partitions) {
      const row = $(`#partitions tr[data-p="${p.partition}"]`);
      set(row, "start", p.log_start_offset);
      set(row, "hw", p.high_watermark);
      set(row, "lso", p.last_stable_offset);
      set(row, "end", p.log_end_offset);
      set(row, "size", bytes(p.size_bytes));
    }
    if (msgs) renderMessages(msgs.messages);
    if (!table) return;
    const t = await api("GET", "/tables/" + encodeURIComponent(topic));
    $("#tb-status").replaceChildren(el("span", { class: "badge s-" + t.status }, t.status));
    const committed = t.partitions.some((p) => p.committed_offset === null)
      ? "–"
      : t.partitions.reduce((a, p) => a + p.committed_offset, 0);
    $("#tb-committed").textContent = committed;
    $("#tb-lag").textContent = sumLag(t);
    $("#tb-fresh").textContent = ago(t.last_commit_ms);
    $("#tb-snapshots").textContent = t.snapshots ?? "–";
    $("#tb-error").hidden = !t.last_error;
    $("#tb-error").textContent = t.last_error || "";
    const perrors = t.partitions.filter((p) => p.error).map((p) => `partition ${p.partition}: ${p.error}`);
    $("#tb-perror").hidden = !perrors.length;
    $("#tb-perror").textContent = perrors.join(" ");
    $("#tb-note").hidden = !t.note;
    $("#tb-note").textContent = t.note || "";
    $("#tb-warning").hidden = !t.warning;
    $("#tb-warning").textContent = t.warning || "";
    $("#tb-lost").textContent = `${t.lost_records} / ${t.skipped_records}`;
    $("#tb-held").textContent = bytes(t.partitions.reduce((a, p) => a + p.retention_held_bytes, 0));
    if (t.last_commit_id !== sampledAt) {
      sampledAt = t.last_commit_id;
      const [history, sample] = await Promise.all([
        api("GET", "/tables/" + encodeURIComponent(topic) + "/snapshots?limit=30"),
        readable ? api("GET", "/tables/" + encodeURIComponent(topic) + "/sample?limit=10") : null,
      ]);
      renderTimeline(history.snapshots);
      if (sample) $("#tb-sample").replaceChildren(
        sample.rows.length
          ? grid(sample.columns, sample.rows, "sample-grid")
          : el("p", { class: "muted" }, "No rows yet.")
      );
    }
  });
}

function subjectPage() {
  const form = $("#diff-form");
  if (!form) return;
  const subject = $("#subject-data").dataset.subject;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const d = await api(
        "GET",
        `/schemas/subjects/${encodeURIComponent(subject)}/diff?from=${form.from.value}&to=${form.to.value}`
      );
      const pre = $("#diff");
      pre.replaceChildren();
      const lines = d.diff ? d.diff.split("\n") : ["(identical)"];
      for (const line of lines) {
        const head = line.startsWith("+++") || line.startsWith("---");
        const cls = head ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
        pre.appendChild(el("span", { class: cls }, line + "\n"));
      }
      pre.hidden = false;
    } catch (e) {
      flash(e.message, true);
    }
  });
  form.requestSubmit();
}

function groupsPage() {
  poll(async () => {
    const { groups } = await api("GET", "/groups");
    for (const g of groups) {
      const row = $(`#group-list tr[data-group="${CSS.escape(g.group)}"]`);
      set(row, "state", g.state);
      set(row, "members", g.members);
      set(row, "lag", g.lag);
    }
  });
}

function groupPage() {
  const group = $("#group-data").dataset.group;
  const form = $("#reset-form");
  if (form) {
    let dry = true;
    for (const b of $$("button", form)) b.addEventListener("click", () => (dry = b.dataset.dry === "yes"));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const to = form.to.value;
      const body = { topic: form.topic.value, to, dry_run: dry };
      if (to === "offset") body.value = Number(form.value.value);
      if (to === "timestamp") body.value = Date.parse(form.value.value);
      if (!dry && !confirm(`Reset ${group}'s offsets on ${body.topic} to ${to}?`)) return;
      try {
        const r = await api("POST", `/groups/${encodeURIComponent(group)}/offsets/reset`, body);
        const rows = r.partitions.map((p) => [p.partition, p.previous ?? "–", p.new]);
        $("#reset-result").replaceChildren(grid(["partition", "previous", dry ? "would be" : "new"], rows, "reset-grid"));
        flash(dry ? "Preview only: nothing changed." : `Reset ${r.partitions.length} partition(s).`);
      } catch (e) {
        flash(e.message, true);
      }
    });
  }
  poll(async () => {
    const g = await api("GET", "/groups/" + encodeURIComponent(group));
    $("#gr-state").textContent = g.state;
    $("#gr-lag").textContent = g.lag;
    for (const p of g.partitions) {
      const row = $(`#group-partitions tr[data-tp="${CSS.escape(p.topic + "-" + p.partition)}"]`);
      set(row, "committed", p.committed_offset ?? "–");
      set(row, "end", p.log_end_offset ?? "–");
      set(row, "lag", p.lag ?? "–");
    }
  });
}

function sqlPage() {
  const form = $("#sql-form");
  const status = $("#sql-status");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const button = $("#sql-run");
    button.disabled = true;
    status.textContent = "running…";
    const out = $("#sql-result");
    try {
      const r = await api("POST", "/sql", {
        statement: form.statement.value,
        limit: Number(form.limit.value),
        timeout_s: Number(form.timeout_s.value),
        fresh: form.fresh.checked,
      });
      out.replaceChildren(grid(r.columns, r.rows, "sql-grid"));
      status.textContent = `${r.rows.length} row(s)${r.truncated ? " (limit reached)" : ""} in ${r.elapsed_s} s`;
    } catch (e) {
      out.replaceChildren(el("p", { class: "error", id: "sql-error" }, e.message));
      status.textContent = "failed";
    } finally {
      button.disabled = false;
    }
  });
}

const PAGES = {
  overview: overviewPage,
  topics: topicsPage,
  topic: topicPage,
  subject: subjectPage,
  groups: groupsPage,
  group: groupPage,
  sql: sqlPage,
};

document.addEventListener("DOMContentLoaded", () => {
  const logout = $("#logout");
  if (logout) {
    logout.addEventListener("click", async () => {
      await send("POST", "/logout");
      location.assign("/login");
    });
  }
  const init = PAGES[document.body.dataset.page];
  if (init) init();
});
