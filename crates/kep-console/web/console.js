// The kep console: a client of the operator API (/openapi/admin.json). The operator token
// lives in this tab's sessionStorage and goes out only as an Authorization header.
"use strict";

const SERVICES = document.body.dataset.services.split(",").filter(Boolean);
const TOKEN_KEY = "kep.operatorToken";
const MESSAGING_ZONE = document.body.dataset.messagingZone || "UTC";
const KEPT_EVENTS = 1000;

let token = sessionStorage.getItem(TOKEN_KEY);
let stream = null; // the activity stream's AbortController while signed in
const events = []; // the latest activity, oldest first
const listeners = new Set(); // called with each activity event

// ---- small helpers ----

/** An element: `attrs` are properties (`onclick`, `className`) or, with a dash or
 * `data`/`aria` prefix, attributes; children are nodes or text (never parsed as HTML). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.includes("-") || k === "for") el.setAttribute(k, v);
    else el[k] = v;
  }
  for (const c of children.flat(Infinity)) {
    if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const enc = encodeURIComponent;
const link = (href, text) => h("a", { href }, text);
const mib = (bytes) => (bytes / 1048576).toFixed(1) + " MiB";
const num = (v, digits = 0) => (v === undefined || v === null ? "–" : Number(v).toFixed(digits));
/** A figure to three significant digits (whole from 1000 up): `0.778`, `12.3`, `4521`. */
const sig = (v) => (v === undefined || v === null || Number.isNaN(Number(v)) ? "–"
  : Math.abs(v) >= 1000 ? String(Math.round(v)) : String(Number(Number(v).toPrecision(3))));

// ---- times: one rule for every time the console shows ----
// In the browser's time zone, with the zone's name: `2026-12-07 19:27:05 KST`. The APIs give
// unix milliseconds (activity), RFC 3339 (adapter, serving), or (messaging) a wall time of
// the messaging service's zone with no offset, read here in that zone.

const SHOWN_TIME = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "2-digit", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short" });
const zoneClocks = new Map();

/** How far `zone`'s wall clock is ahead of UTC at `ms`, in milliseconds. */
function offsetOf(zone, ms) {
  if (!zoneClocks.has(zone)) {
    zoneClocks.set(zone, new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric",
      day: "numeric", hour: "numeric", minute: "numeric", second: "numeric" }));
  }
  const p = Object.fromEntries(zoneClocks.get(zone).formatToParts(new Date(ms)).map((x) => [x.type, Number(x.value)]));
  return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) - Math.floor(ms / 1000) * 1000;
}

/** Unix milliseconds of a time as an API gives it; `zone` is that of a time without offset. */
function instant(value, zone) {
  if (typeof value === "number") return value;
  const w = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d+)?$/.exec(value);
  if (!w) return Date.parse(value);
  const wall = Date.UTC(w[1], w[2] - 1, w[3], w[4], w[5], w[6], w[7] ? Math.round(Number(w[7]) * 1000) : 0);
  return wall - offsetOf(zone, wall - offsetOf(zone, wall));
}

/** A time as the console shows every time: a `<time>` in the browser's zone, the zone named. */
function at(value, zone = "UTC") {
  if (value === undefined || value === null || value === "") return "–";
  const ms = instant(value, zone);
  if (Number.isNaN(ms)) return String(value);
  const p = Object.fromEntries(SHOWN_TIME.formatToParts(new Date(ms)).map((x) => [x.type, x.value]));
  return h("time", { dateTime: new Date(ms).toISOString(), title: String(value) },
    `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`);
}

// ---- secrets: never on screen whole ----

/** A field that holds a secret, by its name: `client_secret`, `password`, `token`; not one
 * that holds where to use it (`token_endpoint`). */
const secretField = (k) => /secret|password|token/i.test(k) && !/(endpoint|url|uri)$/i.test(k);
/** `••••` and the last 4 characters (of a secret longer than 8; of a shorter one, none). */
const mask = (v) => "••••" + (String(v).length > 8 ? String(v).slice(-4) : "");
/** A copy of JSON whose fields named like a secret hold it masked. */
const masked = (v) => (Array.isArray(v) ? v.map(masked)
  : v && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, secretField(k) && typeof x === "string" ? mask(x) : masked(x)]))
    : v);

function table(headers, rows, empty = "none") {
  if (!rows.length) return h("p", { className: "empty" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((r) => (r instanceof Node ? r : h("tr", {}, r.map((c) => h("td", {}, c)))))));
}

function toast(text, bad) {
  const t = h("div", { className: bad ? "toast bad" : "toast", role: "status" }, text);
  document.body.append(t);
  setTimeout(() => t.remove(), 4000);
}

/** A call of the operator API; a refused token signs out, other errors throw the
 * operator error shape's message. */
async function api(path, { method = "GET", body, text } = {}) {
  const headers = { Authorization: "Bearer " + token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 401) {
    signOut("The operator token was refused.");
    throw new Error("signed out");
  }
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try {
      message = (await res.json()).error.message || message;
    } catch { /* not the error shape: keep the status */ }
    throw new Error(message);
  }
  if (res.status === 204) return null;
  return text ? res.text() : res.json();
}

/** A button that acts on the second click within four seconds, so a stray click kicks
 * nobody (no modal dialog: it would block the page). */
function action(label, run) {
  const b = h("button", { type: "button", className: "danger" }, label);
  let armed = null;
  b.onclick = async () => {
    if (!armed) {
      b.textContent = "Confirm " + label.toLowerCase();
      b.classList.add("armed");
      armed = setTimeout(() => {
        armed = null;
        b.textContent = label;
        b.classList.remove("armed");
      }, 4000);
      return;
    }
    clearTimeout(armed);
    b.classList.remove("armed");
    b.disabled = true;
    try {
      await run();
      toast(label + ": done");
    } catch (e) {
      toast(label + ": " + e.message, true);
      b.disabled = false;
    }
  };
  return b;
}

// ---- views ----

/** What a view holds while shown: its timers and activity hooks, dropped when it goes. */
class Shown {
  constructor() {
    this.live = true;
    this.stops = [];
  }
  every(ms, fn) {
    const id = setInterval(fn, ms);
    this.stops.push(() => clearInterval(id));
  }
  /** Runs `fn` (at most every 250 ms) after activity of `service`. */
  on(service, fn) {
    let due = null;
    const hook = (e) => {
      if (e.service === service && !due) due = setTimeout(() => { due = null; fn(); }, 250);
    };
    listeners.add(hook);
    this.stops.push(() => { listeners.delete(hook); clearTimeout(due); });
  }
  stop() {
    this.live = false;
    this.stops.forEach((s) => s());
  }
}

/** A titled section whose body `load` fills, again at each `refresh()`. */
function panel(shown, title, load) {
  const body = h("div", { className: "body" });
  const section = h("section", { className: "panel", "data-panel": title }, h("h2", {}, title), body);
  let running = null;
  const refresh = () => {
    // A button waiting for its confirming click keeps the table as it is: a refresh would
    // put a fresh button in its place and lose the first click. One already loading when
    // the button was armed is dropped too.
    const armed = () => body.querySelector("button.armed");
    if (armed()) return Promise.resolve();
    running ??= (async () => {
      try {
        const content = await load();
        if (shown.live && !armed()) body.replaceChildren(...[content].flat());
      } catch (e) {
        if (shown.live && !armed() && e.message !== "signed out") body.replaceChildren(h("p", { className: "error" }, e.message));
      } finally {
        running = null;
      }
    })();
    return running;
  };
  refresh();
  return [section, refresh];
}

const VIEWS = {};

VIEWS[""] = async (view, shown) => {
  view.append(h("h1", {}, "Overview"));
  const [glance, refresh] = panel(shown, "At a glance", async () => {
    const s = samples(await (await fetch("/metrics")).text());
    const cards = [];
    const card = (title, href, lines) => cards.push(h("a", { className: "card", href }, h("h3", {}, title), lines.map((l) => h("p", {}, l))));
    if (SERVICES.includes("live")) {
      card("Live", "#/live", [`${num(sum(s, "kep_live_rooms"))} rooms`, `${num(sum(s, "kep_live_participants"))} participants`, `${num(sum(s, "kep_live_streams"))} streams`]);
    }
    if (SERVICES.includes("messaging")) {
      const finished = by(s, "kep_messaging_finished_total", "status");
      card("Messaging", "#/messaging", [`${num(sum(s, "kep_messaging_accepted_total"))} accepted`, `${num(sum(s, "kep_messaging_queue_depth"))} queued`,
        Object.entries(finished).map(([k, v]) => `${num(v)} × ${k}`).join(", ") || "none finished"]);
    }
    if (SERVICES.includes("adapter")) {
      const sessions = by(s, "kep_adapter_drm_sessions", "status");
      card("Adapter", "#/adapter", [Object.entries(sessions).filter(([, v]) => v).map(([k, v]) => `${num(v)} ${k}`).join(", ") || "no DRM session",
        `${mib(sum(s, "kep_adapter_released_bytes_total") || 0)} released`]);
    }
    if (SERVICES.includes("serving")) {
      const available = s.filter((x) => x.name === "kep_serving_deployment_available");
      card("Serving", "#/serving", [`${available.filter((x) => x.value === 1).length} of ${available.length} deployments available`]);
    }
    card("Process", "/metrics", [`${num(sum(s, "process_cpu_seconds_total"), 1)} s CPU`, mib(sum(s, "process_resident_memory_bytes") || 0) + " resident",
      `${num(sum(s, "process_open_fds"))} open descriptors`]);
    return h("div", { className: "cards" }, cards);
  });
  const [latest, again] = panel(shown, "Latest activity", async () => activityTable(events.slice(-15).reverse()));
  view.append(glance, latest);
  shown.every(2000, refresh);
  listeners.add(again);
  shown.stops.push(() => listeners.delete(again));
};

VIEWS.live = async (view, shown) => {
  view.append(h("h1", {}, "Live"));
  const services = await api("/admin/v1/live/services");
  if (!services.length) view.append(h("p", { className: "empty" }, "No live service yet: POST /admin/v1/live/services."));
  for (const id of services) {
    const base = `/admin/v1/live/services/${enc(id)}/rooms`;
    const [section, refresh] = panel(shown, `Service ${id}`, async () => {
      const [{ rooms }, hook] = await Promise.all([api(base), api(`/admin/v1/live/services/${enc(id)}/webhook`).catch(() => null)]);
      const webhook = h("p", { className: "webhook" }, "Webhook: ", hook
        ? [h("code", {}, hook.url), hook.enabled ? " on" : ` off${hook.disabledReason ? ` (${hook.disabledReason})` : ""}`]
        : "none (kep live webhook set)");
      return [webhook, table(["Room", "Participant", "Streams", ""], rooms.flatMap((r) => {
        const path = `${base}/${enc(r.roomId)}`;
        const destroy = action("Destroy", async () => { await api(path, { method: "DELETE" }); refresh(); });
        if (!r.participants.length) return [[r.roomId, "–", "–", destroy]];
        return r.participants.map((p, i) => h("tr", { "data-participant": p.participantId },
          h("td", {}, i === 0 ? r.roomId : ""),
          h("td", {}, p.participantId),
          h("td", {}, p.streams.map((st) => h("span", { className: "stream-chip" },
            `#${st.streamId}${st.tracks && st.tracks.length ? " " + st.tracks.map((t) => t.kind).join("+") : ""}`,
            action("Inactivate", async () => {
              await api(`${path}/inactivate`, { method: "POST", body: { targets: [{ participantId: p.participantId, streamId: st.streamId }] } });
              refresh();
            })))),
          h("td", { className: "actions" },
            action("Kick", async () => {
              await api(`${path}/kick`, { method: "POST", body: { targets: [{ participantId: p.participantId }] } });
              refresh();
            }),
            i === 0 ? destroy : "")));
      }), "No room is open.")];
    });
    view.append(section);
    shown.on("live", refresh);
    shown.every(5000, refresh);
  }
};

VIEWS.messaging = async (view, shown, [kind, uid]) => {
  if (kind === "message") return message(view, shown, uid);
  view.append(h("h1", {}, "Messaging"));
  const clients = await api("/admin/v1/messaging/clients");
  view.append(h("section", { className: "panel" }, h("h2", {}, "API clients"),
    table(["Client ID", "Name"], clients.map((c) => [c.client_id, c.name || ""]), "No API client yet.")));

  const form = h("form", { className: "filters" },
    h("select", { name: "client_id" }, h("option", { value: "" }, "every client"), clients.map((c) => h("option", { value: c.client_id }, c.client_id))),
    h("input", { name: "phone_number", placeholder: "phone number" }),
    h("select", { name: "channel" }, ["", "XMS", "RCS"].map((c) => h("option", { value: c }, c || "every channel"))),
    h("select", { name: "status" }, ["", "100", "200", "510", "520"].map((c) => h("option", { value: c }, c || "every status"))),
    h("button", { type: "submit" }, "Search"));
  let shownMessages = [];
  const query = (before) => {
    const q = new URLSearchParams([...new FormData(form)].filter(([, v]) => v));
    if (before) q.set("before", before);
    q.set("limit", "50");
    return api("/admin/v1/messaging/messages?" + q);
  };
  const render = (more) => h("div", {},
    table(["UID", "Client", "Channel", "Type", "Phone number", "Status", "Attempts", "Accepted"],
      shownMessages.map((m) => [link(`#/messaging/message/${enc(m.uid)}`, m.uid), m.client_id, m.channel, m.message_type, m.phone_number,
        h("span", { className: "status s" + m.status }, m.status), m.attempts, at(m.reg_date, MESSAGING_ZONE)]), "No message matches."),
    more ? h("button", { type: "button", onclick: async () => {
      const next = await query(shownMessages[shownMessages.length - 1].uid);
      shownMessages = shownMessages.concat(next.messages);
      body.replaceChildren(render(next.messages.length === 50));
    } }, "Older") : "");
  const body = h("div", { className: "body" });
  const outbox = [h("section", { className: "panel", "data-panel": "Outbox" }, h("h2", {}, "Outbox, across clients"), form, body), async () => {
    const { messages } = await query();
    shownMessages = messages;
    if (shown.live) body.replaceChildren(render(messages.length === 50));
  }];
  form.onsubmit = (e) => { e.preventDefault(); outbox[1]().catch((err) => toast(err.message, true)); };
  view.append(outbox[0]);
  await outbox[1]();
  shown.on("messaging", () => outbox[1]().catch(() => {}));

  const [groups, refreshGroups] = panel(shown, "RCS result groups", async () => {
    const { report_groups } = await api("/admin/v1/messaging/report-groups?limit=20");
    return table(["Report group", "Client", "Results", "Handed out", "Lease until", "Completed"],
      report_groups.map((g) => [g.report_group_id, g.client_id, g.results, at(g.created_at, MESSAGING_ZONE), at(g.lease_until, MESSAGING_ZONE),
        at(g.completed_at, MESSAGING_ZONE)]), "No result group yet.");
  });
  view.append(groups);
  shown.on("messaging", refreshGroups);
};

async function message(view, shown, uid) {
  view.append(h("p", {}, link("#/messaging", "← Messaging")), h("h1", {}, "Message ", h("code", {}, uid)));
  const [section, refresh] = panel(shown, "Timeline", async () => {
    const m = await api(`/admin/v1/messaging/messages/${enc(uid)}`);
    const { message: s } = m;
    const facts = [["Client", s.client_id], ["CID", s.cid], ["Channel", s.channel], ["Type", s.message_type], ["Phone number", s.phone_number],
      ["Status", s.status], ["Attempts", s.attempts], ["RCS status", m.rcs_status], ["Fallback status", m.fallback_status],
      ["SMS status code", m.sms_status_code], ["Error", m.error_message], ["Report group", m.report_group_id]].filter(([, v]) => v !== undefined && v !== null);
    return [
      h("dl", { className: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : String(v))])),
      h("ol", { className: "timeline" }, m.timeline.map((t) => h("li", { "data-event": t.event, "data-status": t.status || "" },
        at(t.at, MESSAGING_ZONE), " ", h("strong", {}, t.event.replace("_", " ")),
        t.status ? h("span", { className: "status s" + t.status }, t.status) : "",
        " ", [t.carrier && `carrier ${t.carrier}`, t.route && `route ${t.route}`, t.outcome && `outcome ${t.outcome}`].filter(Boolean).join(" · ")))),
      h("details", {}, h("summary", {}, "Request as accepted"), h("pre", {}, JSON.stringify(masked(m.request), null, 2))),
    ];
  });
  view.append(section);
  shown.on("messaging", refresh);
  shown.every(3000, refresh);
}

VIEWS.adapter = async (view, shown, [kind, id]) => {
  if (kind === "session") return drmSession(view, shown, id);
  view.append(h("h1", {}, "Adapter"));
  const orgs = await api("/admin/v1/adapter/org-login-types");
  view.append(h("section", { className: "panel", "data-panel": "Organisation login types" }, h("h2", {}, "Organisation login types"),
    table(["ID", "Method", "Agent", "Data model"], orgs.map((o) => [o.id, o.method, o.adapter_agent,
      o.data_model ? h("pre", { className: "model" }, JSON.stringify(masked(o.data_model), null, 1)) : "–"]), "No organisation yet.")));
  const filter = h("form", { className: "filters" },
    h("select", { name: "org_login_type_id" }, h("option", { value: "" }, "every organisation"), orgs.map((o) => h("option", { value: o.id }, `${o.id} ${o.method}`))),
    h("select", { name: "status" }, ["", "PENDING", "GRANTED", "DENIED", "RELEASED", "EXPIRED"].map((s) => h("option", { value: s }, s || "every status"))),
    h("button", { type: "submit" }, "Filter"));
  const [sessions, refresh] = panel(shown, "DRM sessions", async () => {
    const q = new URLSearchParams([...new FormData(filter)].filter(([, v]) => v));
    q.set("limit", "50");
    const list = await api("/admin/v1/adapter/drm-requests?" + q);
    return table(["Session", "Organisation", "File", "Type", "User", "Status", "Created", "Expires", "Notified"],
      list.sessions.map((s) => [link(`#/adapter/session/${enc(s.session_id)}`, s.session_id), s.org_login_type_id, s.file_id, s.file_type, s.user || "–",
        h("span", { className: "status " + s.status }, s.status), at(s.created_at), at(s.expires_at), s.notifications.length]), "No DRM session matches.");
  });
  filter.onsubmit = (e) => { e.preventDefault(); refresh(); };
  sessions.querySelector("h2").after(filter);
  view.append(sessions);
  shown.on("adapter", refresh);
};

async function drmSession(view, shown, id) {
  view.append(h("p", {}, link("#/adapter", "← Adapter")), h("h1", {}, "DRM session ", h("code", {}, id)));
  const [section, refresh] = panel(shown, "History", async () => {
    const s = await api(`/admin/v1/adapter/drm-requests/${enc(id)}`);
    const facts = [["Organisation", s.org_login_type_id], ["File", s.file_id], ["Type", s.file_type], ["User", s.user], ["Status", s.status],
      ["Result", s.result], ["Reason", s.reason], ["Created", at(s.created_at)], ["Expires", at(s.expires_at)],
      ["Released file", s.file && `${s.file.size} bytes, sha256 ${s.file.sha256}`]].filter(([, v]) => v !== undefined && v !== null);
    return [h("dl", { className: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v instanceof Node ? v : String(v))])),
      h("h3", {}, "Notifications of the agent"),
      table(["Attempt", "At", "Agent's status", "Error"], s.notifications.map((n) => [n.attempt, at(n.at), n.status ?? "–", n.error || ""]), "None yet.")];
  });
  view.append(section);
  shown.on("adapter", refresh);
}

VIEWS.serving = async (view, shown, [kind, name]) => {
  if (kind === "endpoint") return endpoint(view, shown, name);
  view.append(h("h1", {}, "Serving"));
  const [section, refresh] = panel(shown, "Endpoints", async () => {
    const endpoints = await api("/admin/v1/serving/endpoints");
    return table(["Endpoint", "Protocol", "Instances", "Deployments", "Traffic", "URL"], endpoints.map((e) => [
      link(`#/serving/endpoint/${enc(e.name)}`, e.name), e.protocol, `${e.instance_count} × ${e.instance_type}`, e.deployments.join(", ") || "–",
      Object.entries(e.traffic.percent).map(([d, p]) => `${d} ${num(p)} %`).join(", ") || "–", e.url]), "No endpoint yet.");
  });
  view.append(section);
  shown.on("serving", refresh);
  const [quota] = panel(shown, "Quota", async () => {
    const q = await api("/admin/v1/serving/quota");
    return table(["", "CPU", "Memory", "GPU"], [["used", q.used.cpu, `${q.used.memory_mb} MB`, q.used.gpu], ["total", q.total.cpu, `${q.total.memory_mb} MB`, q.total.gpu]]);
  });
  view.append(quota);
};

// ---- charts ----

/** Colours a series named after one is drawn in; other names take one of PALETTE. */
const NAMED = { blue: "#2f6fdf", orange: "#e67700", green: "#2b8a3e", red: "#c92a2a", purple: "#ae3ec9", violet: "#7048e8",
  teal: "#0b7285", cyan: "#1098ad", pink: "#d6336c", yellow: "#f59f00", brown: "#8d5524", gray: "#868e96", grey: "#868e96",
  black: "#1d2127", indigo: "#4263eb", lime: "#5c940d" };
const PALETTE = ["#2f6fdf", "#d9480f", "#2b8a3e", "#ae3ec9", "#0b7285", "#d6336c", "#5c940d", "#4263eb", "#f59f00", "#8d5524"];
/** The total's line: drawn last, dashed, in ink. */
const TOTAL = "#1d2127";

/** Each label's colour, the same for the same names on every page: a name with a colour's
 * name as a word (`blue`, `green-v2`) is drawn in it, any other in one of PALETTE chosen by
 * its name, one not taken in the chart while there is one. */
function colorsOf(labels) {
  const named = labels.map((l) => NAMED[String(l).toLowerCase().split(/[^a-z]+/).find((w) => NAMED[w])]);
  const taken = new Set(named.filter(Boolean));
  return labels.map((l, i) => {
    if (named[i]) return named[i];
    let hash = 0;
    for (const c of String(l)) hash = (hash * 31 + c.codePointAt(0)) >>> 0;
    for (let k = 0; k < PALETTE.length; k++) {
      const c = PALETTE[(hash + k) % PALETTE.length];
      if (!taken.has(c)) { taken.add(c); return c; }
    }
    return PALETTE[hash % PALETTE.length];
  });
}

/** A y axis's width: its longest label's, measured in the axis's font, and the ticks'. */
function axisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;
  const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
  u.ctx.font = axis.font[0];
  return Math.ceil(axis.ticks.size + axis.gap + u.ctx.measureText(longest).width / devicePixelRatio + 4);
}

/** A live chart of one figure per series, the last two minutes of it. A `total` (the index
 * of a series that sums the others) is drawn last, dashed, so that it shows where it lies on
 * one of them. Values are given in `labels`' order. */
function chart(host, key, title, unit, labels, { total } = {}) {
  const el = h("div", { className: "chart", "data-chart": key });
  host.append(el);
  const order = labels.map((_, i) => i).filter((i) => i !== total).concat(total === undefined ? [] : [total]);
  const colors = colorsOf(labels);
  const data = [[], ...labels.map(() => [])];
  const plot = new uPlot({
    title, width: 460, height: 200,
    scales: { x: { time: true } },
    series: [{}, ...order.map((i) => ({
      label: labels[i], stroke: i === total ? TOTAL : colors[i], width: i === total ? 2.5 : 2, dash: i === total ? [6, 4] : undefined,
      spanGaps: false, value: (_, v) => (v === undefined || v === null ? "–" : sig(v) + unit),
    }))],
    axes: [{}, { size: axisSize, values: (_, ticks) => ticks.map((t) => sig(t) + unit) }],
  }, data, el);
  el.plot = plot; // what a test reads: its series and axes as drawn
  return (t, values) => {
    data[0].push(t);
    order.forEach((i, k) => data[k + 1].push(values[i] ?? null));
    if (data[0].length > 120) data.forEach((s) => s.shift());
    plot.setData(data);
    el.dataset.last = JSON.stringify(values);
  };
}

async function endpoint(view, shown, name) {
  const base = `/admin/v1/serving/endpoints/${enc(name)}`;
  view.append(h("p", {}, link("#/serving", "← Serving")), h("h1", {}, "Endpoint ", h("code", {}, name)));
  const charts = h("div", { className: "charts" });
  view.append(h("section", { className: "panel", "data-panel": "Monitor" }, h("h2", {}, "Monitor"), charts));
  let plots = null;
  let shape = "";
  const mirrored = new Map(); // deployment → [time, its mirrored calls so far, their rate] at the last sample
  const sample = async () => {
    const m = await api(`${base}/metrics`);
    const names = m.deployments.map((d) => d.name);
    // GPU use is read only where there is a GPU (the `nvml` build): no chart without it.
    const gpu = m.deployments.some((d) => d.instances.some((i) => i.gpu_percent !== undefined));
    if (names.join() + gpu !== shape || !plots) {
      shape = names.join() + gpu;
      charts.replaceChildren();
      plots = {
        qps: chart(charts, "qps", "Calls per second", "", ["endpoint", ...names], { total: 0 }),
        latency: chart(charts, "latency", "Latency", " ms", ["p50", "p99"]),
        cpu: chart(charts, "cpu", "CPU (of the limit)", " %", names),
        memory: chart(charts, "memory", "Memory", " MiB", names),
        gpu: gpu ? chart(charts, "gpu", "GPU", " %", names) : () => {},
      };
    }
    const t = Date.parse(m.at) / 1000;
    const avg = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
    const of = (d, f) => d.instances.map(f).filter((v) => v !== undefined && v !== null);
    // A mirror's copies of the calls are not its calls (the caller got another's answer):
    // the gateway counts them apart (kep_serving_mirror_requests_total, `mirror` here), and
    // they are its traffic all the same.
    const mirrorQps = m.deployments.map((d) => {
      const n = (d.mirror?.answered || 0) + (d.mirror?.failed || 0);
      const before = mirrored.get(d.name);
      if (before && t <= before[0]) return before[2]; // the same sample again
      const rate = before ? Math.max(0, n - before[1]) / (t - before[0]) : 0;
      mirrored.set(d.name, [t, n, rate]);
      return rate;
    });
    plots.qps(t, [m.calls.qps, ...m.deployments.map((d, i) => (d.calls.qps ?? 0) + mirrorQps[i])]);
    plots.latency(t, [m.calls.latency_ms?.p50, m.calls.latency_ms?.p99]);
    plots.cpu(t, m.deployments.map((d) => avg(of(d, (i) => i.cpu_percent))));
    plots.memory(t, m.deployments.map((d) => { const b = of(d, (i) => i.memory_bytes); return b.length ? b.reduce((a, x) => a + x, 0) / 1048576 : null; }));
    plots.gpu(t, m.deployments.map((d) => avg(of(d, (i) => i.gpu_percent))));
  };
  shown.every(1000, () => sample().catch(() => {}));
  sample().catch((e) => charts.replaceChildren(h("p", { className: "error" }, e.message)));

  const logs = h("div", { className: "logs" });
  const [deployments, refresh] = panel(shown, "Deployments", async () => {
    const [list, traffic, mirroring] = await Promise.all([api(`${base}/deployments`), api(`${base}/traffic`), api(`${base}/mirroring`)]);
    return [
      h("p", {}, "Traffic: ", Object.entries(traffic.percent).map(([d, p]) => `${d} ${num(p, 1)} % (weight ${traffic.weights[d]})`).join(", ") || "none",
        " · Mirroring: ", mirroring.enabled ? `on, ${mirroring.responder} answers` : "off"),
      table(["Deployment", "Type", "State", "Weight", "Instances", ""], list.map((d) => [d.name, d.type, h("span", { className: "state " + d.state }, d.state), d.weight,
        h("ul", { className: "instances" }, d.instances.map((i) => h("li", {}, `${i.id} ${i.state}${i.ready ? " ready" : ""}${i.restarts ? `, ${i.restarts} restarts` : ""}${i.reason ? ` (${i.reason})` : ""} `,
          h("button", { type: "button", onclick: () => showLog(d.name, i.id) }, "log")))),
        h("button", { type: "button", onclick: () => showHistory(d.name) }, "state history")]), "No deployment yet."),
      logs,
    ];
  });
  const showLog = async (deployment, instance) => {
    const text = await api(`${base}/deployments/${enc(deployment)}/instances/${enc(instance)}/logs?tail_bytes=16384`, { text: true });
    logs.replaceChildren(h("h3", {}, `Log of ${instance}`), h("pre", { className: "log" }, text || "(empty)"));
  };
  const showHistory = async (deployment) => {
    const history = await api(`${base}/deployments/${enc(deployment)}/events?limit=100`);
    logs.replaceChildren(h("h3", {}, `State history of ${deployment}`), table(["At", "Instance", "Kind", "From", "To", "Reason"],
      history.map((e) => [at(e.at), e.instance || "–", e.kind, e.from || "–", e.to || "–", e.reason || ""])));
  };
  view.append(deployments);
  shown.on("serving", refresh);

  const [alerts, refreshAlerts] = panel(shown, "Alert history", async () => {
    const { alerts } = await api(`${base}/alerts/history`);
    return table(["At", "Condition", "Deployment", "Text", "Status", "Attempts"],
      alerts.map((a) => [at(a.at), a.condition, a.deployment || "–", a.text, a.status + (a.error ? ` (${a.error})` : ""), a.attempts]), "No alert yet.");
  });
  view.append(alerts);
  shown.on("serving", refreshAlerts);
}

function activityTable(list) {
  return table(["At", "Service", "Event", "Object", "Detail"], list.map((e) => h("tr", { "data-event": e.event },
    h("td", {}, at(e.at)), h("td", {}, e.service), h("td", {}, e.event), h("td", {}, e.object),
    h("td", { className: "detail" }, Object.keys(e.detail || {}).length ? JSON.stringify(masked(e.detail)) : ""))), "Nothing has happened yet.");
}

VIEWS.activity = async (view, shown) => {
  view.append(h("h1", {}, "Activity"));
  const filter = h("form", { className: "filters" },
    h("select", { name: "service" }, h("option", { value: "" }, "every service"), SERVICES.map((s) => h("option", { value: s }, s))),
    h("input", { name: "object", placeholder: "object, e.g. demo/lobby" }));
  const body = h("div", { className: "body" });
  const render = () => {
    const f = Object.fromEntries(new FormData(filter));
    const admitted = events.filter((e) => (!f.service || e.service === f.service) && (!f.object || e.object === f.object || e.object.startsWith(f.object + "/")));
    body.replaceChildren(activityTable(admitted.slice(-200).reverse()));
  };
  filter.oninput = render;
  filter.onsubmit = (e) => e.preventDefault();
  view.append(h("section", { className: "panel", "data-panel": "Activity" }, h("h2", {}, "As it happens"), filter, body));
  render();
  listeners.add(render);
  shown.stops.push(() => listeners.delete(render));
};

// ---- the activity stream: one per signed-in tab, resumed after a drop ----

async function follow(abort) {
  let last = 0;
  const state = document.getElementById("stream");
  while (!abort.signal.aborted) {
    try {
      const headers = { Authorization: "Bearer " + token };
      if (last) headers["Last-Event-ID"] = String(last);
      const res = await fetch("/admin/v1/events", { headers, signal: abort.signal });
      if (res.status === 401) return signOut("The operator token was refused.");
      if (!res.ok) throw new Error(String(res.status));
      state.textContent = "● live";
      state.className = "stream on";
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          const name = frame.split("\n").find((l) => l.startsWith("event: "));
          if (!data || name === "event: lagged") continue;
          const event = JSON.parse(data);
          last = event.id;
          events.push(event);
          if (events.length > KEPT_EVENTS) events.shift();
          listeners.forEach((l) => l(event));
        }
      }
    } catch {
      if (abort.signal.aborted) return;
    }
    state.textContent = "○ reconnecting";
    state.className = "stream off";
    await sleep(2000);
  }
}

// ---- signing in and out, and the router ----

const PAGES = [["", "Overview"], ["live", "Live"], ["messaging", "Messaging"], ["adapter", "Adapter"], ["serving", "Serving"], ["activity", "Activity"]]
  .filter(([k]) => !k || k === "activity" || SERVICES.includes(k));
let current = null;

async function route() {
  if (!token) return;
  current?.stop();
  const shown = (current = new Shown());
  const [section = "", ...rest] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = document.getElementById("view");
  view.replaceChildren();
  document.querySelectorAll(".toast").forEach((t) => t.remove());
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("here", a.dataset.page === section));
  const render = PAGES.some(([k]) => k === section) ? VIEWS[section] : VIEWS[""];
  try {
    await render(view, shown, rest);
  } catch (e) {
    if (shown.live && e.message !== "signed out") view.append(h("p", { className: "error" }, e.message));
  }
}

function signedIn() {
  document.getElementById("sign-in").hidden = true;
  const nav = document.getElementById("nav");
  nav.replaceChildren(...PAGES.map(([k, title]) => h("a", { href: "#/" + k, "data-page": k }, title)));
  nav.hidden = false;
  document.getElementById("sign-out").hidden = false;
  document.getElementById("stream").hidden = false;
  stream = new AbortController();
  follow(stream);
  route();
}

function signOut(why) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  stream?.abort();
  current?.stop();
  events.length = 0;
  document.getElementById("view").replaceChildren();
  for (const id of ["nav", "sign-out", "stream"]) document.getElementById(id).hidden = true;
  document.getElementById("sign-in").hidden = false;
  document.getElementById("sign-in-error").textContent = why || "";
  document.getElementById("token").focus();
}

document.getElementById("sign-in-form").onsubmit = async (e) => {
  e.preventDefault();
  const input = document.getElementById("token");
  const candidate = input.value.trim();
  // The activity stream is on every admin listener: its status is the token's verdict.
  const abort = new AbortController();
  const error = document.getElementById("sign-in-error");
  let res;
  try {
    res = await fetch("/admin/v1/events", { headers: { Authorization: "Bearer " + candidate }, signal: abort.signal });
  } catch (err) {
    error.textContent = "The admin listener did not answer: " + err.message;
    return;
  } finally {
    abort.abort();
  }
  if (!res.ok) {
    error.textContent = res.status === 401 ? "That is not the operator token." : `The admin listener answered ${res.status}.`;
    return;
  }
  input.value = "";
  token = candidate;
  sessionStorage.setItem(TOKEN_KEY, token);
  signedIn();
};
document.getElementById("sign-out").onclick = () => signOut();
window.addEventListener("hashchange", route);

// ---- Prometheus' text format, as /metrics serves it ----

function samples(text) {
  return text.split("\n").filter((l) => l && !l.startsWith("#")).map((l) => {
    const m = /^([^{ ]+)(?:\{(.*)\})? (\S+)$/.exec(l);
    if (!m) return null;
    const labels = Object.fromEntries([...(m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    return { name: m[1], labels, value: Number(m[3]) };
  }).filter(Boolean);
}
const sum = (s, name) => {
  const found = s.filter((x) => x.name === name);
  return found.length ? found.reduce((a, x) => a + x.value, 0) : undefined;
};
const by = (s, name, label) => Object.fromEntries(s.filter((x) => x.name === name).map((x) => [x.labels[label], x.value]));

if (token) signedIn();
else signOut();
