// The board page: lanes per step, cards, the detail panel, moves by drag and drop, verdicts,
// messages, and live updates from the event stream. Plain DOM, no framework, no build step.
// Every text from the server goes in through textContent (never innerHTML).

import { ApiError, createApi } from "./api.js";

const TOKEN_KEY = "laneway.token";
const WORKFLOW_KEY = "laneway.workflow";

const state = {
  api: null,
  workflows: [],
  workflowId: null,
  board: null, // { workflow, tasks, profiles }
  openTaskId: null,
};

// -- small DOM helpers -----------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

function toast(message, kind = "error") {
  const el = h("div", { class: `toast ${kind}` }, message);
  $("toasts").append(el);
  setTimeout(() => el.classList.add("gone"), 4200);
  setTimeout(() => el.remove(), 4800);
}

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

// The last eight characters: ids are time-ordered (UUIDv7), so their heads are shared by
// every row made in the same minute while their tails are random.
function shortId(id) {
  return id ? id.slice(-8) : "";
}

function pretty(text) {
  return String(text || "").replaceAll("_", " ").toLowerCase();
}

// -- names, not ids ----------------------------------------------------------------------------

function steps() {
  return state.board ? [...state.board.workflow.steps].sort((a, b) => a.position - b.position) : [];
}

function stepName(id) {
  if (!id) return "—";
  const step = steps().find((s) => s.id === id);
  return step ? step.name : shortId(id);
}

function profileName(id) {
  const profile = state.board && state.board.profiles[id];
  return profile ? profile.name : shortId(id);
}

// -- loading -----------------------------------------------------------------------------------

async function loadWorkflows() {
  state.workflows = await state.api.get("/api/workflows");
  const select = $("workflow");
  select.replaceChildren(
    ...state.workflows.map((wf) => h("option", { value: wf.id }, wf.name)),
  );
  const remembered = sessionStorage.getItem(WORKFLOW_KEY);
  const withTasks = state.workflows.find((wf) => wf.id === remembered) || state.workflows[0];
  state.workflowId = withTasks ? withTasks.id : null;
  if (state.workflowId) select.value = state.workflowId;
}

async function loadBoard() {
  if (!state.workflowId) {
    $("board").replaceChildren(
      h("div", { class: "empty" }, "No workflow yet. Create one with ",
        h("code", {}, "laneway workflow create --template office-default"), "."),
    );
    return;
  }
  state.board = await state.api.get(`/api/board?workflow=${encodeURIComponent(state.workflowId)}`);
  renderBoard();
}

// Events can come faster than a board can be read: at most one read of each kind is in
// flight, and changes that arrive meanwhile are folded into one more read after it.
function throttled(load) {
  let timer = null;
  let running = false;
  let dirty = false;
  async function run() {
    timer = null;
    if (!dirty) return;
    dirty = false;
    running = true;
    try {
      await load();
    } catch (error) {
      showError(error);
    } finally {
      running = false;
      if (dirty && !timer) timer = setTimeout(run, 150);
    }
  }
  return (delay = 80) => {
    dirty = true;
    if (!timer && !running) timer = setTimeout(run, delay);
  };
}

const scheduleRefresh = throttled(() => loadBoard());
const detailRefresh = throttled(() => (state.openTaskId ? loadDetail(state.openTaskId) : null));

function scheduleDetail(delay = 80) {
  if (state.openTaskId) detailRefresh(delay);
}

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    askToken("That token was refused. Paste the one laneway serve printed.");
    return;
  }
  toast(error.message || String(error));
}

// -- the board ---------------------------------------------------------------------------------

function renderBoard() {
  const board = state.board;
  const tasks = board.tasks;
  const lanes = steps().map((step) => renderLane(step, tasks.filter((t) => t.workflow_step_id === step.id)));
  $("board").replaceChildren(...lanes);
  const running = tasks.filter((t) => t.badges.running).length;
  const waiting = tasks.filter((t) => t.badges.decisions.required > t.badges.decisions.approved && t.badges.decisions.required > 0).length;
  $("summary").replaceChildren(
    h("span", {}, h("b", {}, String(tasks.length)), tasks.length === 1 ? " task" : " tasks"),
    h("span", {}, h("b", {}, String(running)), " running"),
    h("span", {}, h("b", {}, String(waiting)), " awaiting decisions"),
  );
  for (const card of document.querySelectorAll(".card")) {
    card.classList.toggle("selected", card.dataset.taskId === state.openTaskId);
  }
}

function renderLane(step, tasks) {
  const admitted = tasks.filter((t) => t.wip_admitted);
  const queued = tasks.filter((t) => !t.wip_admitted);
  const limit = step.wip_limit > 0 ? step.wip_limit : null;
  const full = limit !== null && admitted.length >= limit;
  const wip = h("span", { class: `wip${full ? " full" : ""}`, title: limit ? "in progress / WIP limit" : "tasks here (no WIP limit)" },
    limit ? `${admitted.length} / ${limit}` : String(admitted.length));
  const lane = h("section", {
    class: `lane${step.allow_manual_move ? "" : " locked"}`,
    dataset: { stepId: step.id, stepName: step.name },
    "aria-label": step.name,
  },
  h("header", { class: "lane-head" },
    h("div", { class: "lane-title" },
      h("span", { class: `stage stage-${step.stage_type}` }),
      h("h3", {}, step.name),
    ),
    wip,
  ),
  h("div", { class: "lane-cards" },
    admitted.length ? admitted.map(renderCard) : h("div", { class: "lane-empty" }, "No tasks"),
  ),
  queued.length ? h("div", { class: "queued" },
    h("div", { class: "queued-head" }, `Queued · ${queued.length}`),
    queued.map(renderCard),
  ) : null,
  );
  lane.addEventListener("dragover", (event) => {
    if (!event.dataTransfer.types.includes("text/laneway-task")) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "move";
    lane.classList.add("drop");
  });
  lane.addEventListener("dragleave", (event) => {
    if (!lane.contains(event.relatedTarget)) lane.classList.remove("drop");
  });
  lane.addEventListener("drop", (event) => {
    event.preventDefault();
    lane.classList.remove("drop");
    const taskId = event.dataTransfer.getData("text/laneway-task");
    if (taskId) moveTask(taskId, step);
  });
  return lane;
}

function renderCard(task) {
  const b = task.badges;
  const badges = [];
  if (b.running) badges.push(h("span", { class: "badge running", title: "an agent is working" }, h("i"), "running"));
  if (b.decisions.required > 0) {
    const done = b.decisions.approved >= b.decisions.required;
    badges.push(h("span", { class: `badge decisions${done ? " met" : ""}`, title: "approved / required decisions" },
      `✓ ${b.decisions.approved}/${b.decisions.required}`));
  }
  if (b.open_entry) badges.push(h("span", { class: "badge entry", title: "an entry sequence has not finished" }, "entry open"));
  if (b.failed_marker) badges.push(h("span", { class: "badge failed", title: "an entry action failed" }, "action failed"));
  if (b.dead_run) badges.push(h("span", { class: "badge dead", title: "a run's worker died on every attempt; it is not retried" }, "run dead"));
  if (b.dead_session) badges.push(h("span", { class: "badge dead", title: "the agent's last session failed" }, "agent failed"));
  if (!task.wip_admitted) badges.push(h("span", { class: "badge queued", title: "waiting for room in this step" }, "queued"));
  const card = h("article", {
    class: `card state-${task.state.toLowerCase()}`,
    draggable: "true",
    tabindex: "0",
    dataset: { taskId: task.id, title: task.title },
    onclick: () => openDetail(task.id),
    onkeydown: (event) => { if (event.key === "Enter") openDetail(task.id); },
  },
  h("div", { class: "card-top" },
    h("span", { class: "card-title" }, task.title),
  ),
  h("div", { class: "card-meta" },
    h("span", { class: `pill state` }, pretty(task.state)),
    task.priority && task.priority !== "none" ? h("span", { class: `pill prio prio-${task.priority}` }, task.priority) : null,
    h("span", { class: "muted" }, ago(task.updated_at)),
  ),
  badges.length ? h("div", { class: "badges" }, badges) : null,
  );
  card.addEventListener("dragstart", (event) => {
    event.dataTransfer.setData("text/laneway-task", task.id);
    event.dataTransfer.effectAllowed = "move";
    card.classList.add("dragging");
  });
  card.addEventListener("dragend", () => card.classList.remove("dragging"));
  return card;
}

async function moveTask(taskId, step) {
  const task = state.board.tasks.find((t) => t.id === taskId);
  if (!task || task.workflow_step_id === step.id) return;
  try {
    await state.api.post(`/api/tasks/${taskId}/move`, { step: step.id });
    toast(`Moved “${task.title}” to ${step.name}`, "ok");
    await loadBoard();
    if (state.openTaskId === taskId) await loadDetail(taskId);
  } catch (error) {
    showError(error);
  }
}

// -- the detail panel --------------------------------------------------------------------------

async function openDetail(taskId) {
  state.openTaskId = taskId;
  $("detail").hidden = false;
  document.body.classList.add("with-detail");
  renderBoard();
  await loadDetail(taskId).catch(showError);
}

function closeDetail() {
  state.openTaskId = null;
  $("detail").hidden = true;
  document.body.classList.remove("with-detail");
  if (state.board) renderBoard();
}

async function loadDetail(taskId) {
  const api = state.api;
  const id = encodeURIComponent(taskId);
  let task;
  try {
    task = await api.get(`/api/tasks/${id}`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      closeDetail();
      return;
    }
    throw error;
  }
  const [entries, runs, sessions, decisions, diff] = await Promise.all([
    api.get(`/api/tasks/${id}/entries`),
    api.get(`/api/runs?task=${id}`),
    api.get(`/api/sessions?task=${id}`),
    api.get(`/api/tasks/${id}/decisions`),
    // a task has a diff once its first turn made its worktree
    task.workspace ? api.get(`/api/tasks/${id}/diff`).catch((error) => ({ error: error.message })) : null,
  ]);
  if (state.openTaskId !== taskId) return;
  renderDetail(task, entries, runs, sessions, decisions, diff);
}

function section(title, count, ...body) {
  return h("section", { class: "panel-section" },
    h("h4", {}, title, count !== null ? h("span", { class: "count" }, String(count)) : null),
    ...body,
  );
}

function renderDetail(task, entries, runs, sessions, decisions, diff) {
  $("detail-title").textContent = task.title;
  $("detail-step").textContent = task.wip_admitted ? stepName(task.workflow_step_id) : `${stepName(task.workflow_step_id)} · queued`;
  $("detail-meta").replaceChildren(...[
    h("span", { class: "pill state" }, pretty(task.state)),
    h("span", { class: "muted mono", title: task.id }, shortId(task.id)),
    task.archived_at ? h("span", { class: "pill" }, "archived") : null,
  ].filter(Boolean));
  const body = [];
  if (task.description) body.push(h("p", { class: "description" }, task.description));
  body.push(renderActions(task, decisions, sessions));
  if (diff) body.push(section("Changes", diff.files ? diff.files.length : null, renderChanges(task, diff)));
  body.push(section("Entries", entries.length,
    entries.length ? [...entries].reverse().map(renderEntry) : h("p", { class: "muted" }, "No entries yet: the task has not arrived at a step with durable actions.")));
  body.push(section("Decisions", decisions.decisions.length, renderDecisions(decisions)));
  body.push(section("Runs", runs.length,
    runs.length ? h("ul", { class: "rows" }, [...runs].reverse().map(renderRun)) : h("p", { class: "muted" }, "No runs.")));
  body.push(section("Sessions", sessions.length,
    sessions.length ? h("ul", { class: "rows" }, [...sessions].reverse().map(renderSession)) : h("p", { class: "muted" }, "No sessions.")));
  $("detail-body").replaceChildren(...body);
}

function renderActions(task, decisions, sessions) {
  const select = h("select", { "aria-label": "Move to step", id: "move-step" },
    steps().map((s) => h("option", { value: s.id, selected: s.id === task.workflow_step_id }, s.name)));
  const move = h("div", { class: "action-row" },
    select,
    h("button", {
      class: "primary",
      onclick: () => {
        const step = steps().find((s) => s.id === select.value);
        if (step) moveTask(task.id, step);
      },
    }, "Move"),
  );
  const waiting = decisions.seats.filter((s) => s.decision_required && s.verdict !== "approved");
  const seats = waiting.length ? h("div", { class: "seats" }, waiting.map((seat) => h("div", { class: "seat" },
    h("div", {},
      h("b", {}, profileName(seat.agent_profile_id)),
      h("span", { class: "muted" }, ` · ${seat.role}`),
      seat.verdict ? h("span", { class: `pill verdict-${seat.verdict}` }, pretty(seat.verdict)) : h("span", { class: "pill waiting" }, "waiting"),
    ),
    h("div", { class: "seat-buttons" },
      h("button", { class: "approve", onclick: () => verdict(task, decisions, seat, "approved") }, "Approve"),
      h("button", { class: "reject", onclick: () => verdict(task, decisions, seat, "rejected") }, "Reject"),
    ),
  ))) : null;
  const live = [...sessions].reverse().find((s) => ["CREATED", "STARTING", "RUNNING", "WAITING_FOR_INPUT"].includes(s.state));
  let message = null;
  if (live) {
    const text = h("textarea", { rows: "2", placeholder: `Message to ${live.agent_profile_id ? profileName(live.agent_profile_id) : "the agent"}…`, "aria-label": "Message" });
    message = h("form", {
      class: "message",
      onsubmit: async (event) => {
        event.preventDefault();
        if (!text.value.trim()) return;
        try {
          await state.api.post(`/api/sessions/${live.id}/send`, { text: text.value });
          text.value = "";
          toast("Message sent", "ok");
          scheduleDetail(0);
        } catch (error) {
          showError(error);
        }
      },
    }, text, h("button", { type: "submit" }, "Send"));
  }
  return h("div", { class: "actions" }, move, seats, message);
}

async function verdict(task, decisions, seat, value) {
  try {
    const result = await state.api.post("/api/decisions", {
      task: task.id, step: decisions.step_id, participant: seat.id, verdict: value,
    });
    const moved = result.transitioned ? ` — moved to ${stepName(result.to_step_id)}` : "";
    toast(`${profileName(seat.agent_profile_id)}: ${pretty(value)}${moved}`, "ok");
    await loadBoard();
    await loadDetail(task.id);
  } catch (error) {
    showError(error);
  }
}

const PATCH_LINES = 2000;
/* Lines of patch the page draws; the rest is cut, with a note (`task diff` has it all). */

function renderChanges(task, diff) {
  if (diff.error) return h("p", { class: "muted" }, diff.error);
  const where = h("p", { class: "muted mono" }, `${diff.branch} against ${diff.base.slice(0, 10)}`);
  if (!diff.files.length) return h("div", { class: "changes" }, where, h("p", { class: "muted" }, "No changes yet."));
  const files = h("ul", { class: "rows changed-files" }, diff.files.map((f) => h("li", { class: `changed ${f.status}` },
    h("span", { class: "mono path" }, f.path),
    h("span", { class: "status" }, f.status),
    h("span", { class: "add" }, `+${f.additions}`),
    h("span", { class: "del" }, `\u2212${f.deletions}`),
  )));
  const lines = diff.patch.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const shown = lines.slice(0, PATCH_LINES).map((line) => {
    let kind = "ctx";
    if (line.startsWith("diff --git") || line.startsWith("index ") || line.startsWith("+++") || line.startsWith("---")
      || line.startsWith("new file") || line.startsWith("deleted file")) kind = "meta";
    else if (line.startsWith("@@")) kind = "hunk";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    return h("span", { class: `line ${kind}` }, line + "\n");
  });
  const notes = [];
  if (lines.length > PATCH_LINES || diff.truncated) {
    notes.push(h("p", { class: "muted cut" },
      `Large diff: cut here; \`laneway task diff ${task.id}\` shows it whole.`));
  }
  return h("div", { class: "changes" }, where, files, h("pre", { class: "patch" }, ...shown), ...notes);
}

function renderEntry(entry) {
  const markers = entry.markers.length
    ? h("table", { class: "markers" },
      h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "action"), h("th", {}, "state"), h("th", {}, "why"))),
      h("tbody", {}, entry.markers.map((m) => h("tr", { class: `marker marker-${m.state}` },
        h("td", { class: "mono" }, String(m.position)),
        h("td", {}, m.kind),
        h("td", {}, h("span", { class: `pill m-${m.state}` }, pretty(m.state))),
        h("td", { class: "cause" }, [m.reason ? pretty(m.reason) : null, m.cause !== null && m.cause !== undefined ? h("code", {}, typeof m.cause === "string" ? m.cause : JSON.stringify(m.cause)) : null].filter(Boolean)),
      ))))
    : h("p", { class: "muted" }, "No markers yet.");
  return h("div", { class: `entry${entry.terminal ? "" : " open"}` },
    h("div", { class: "entry-head" },
      h("b", {}, stepName(entry.step_id)),
      h("span", { class: "muted" }, ` #${entry.entry_seq} · ${entry.entry_path}`),
      h("span", { class: `pill ${entry.terminal ? "m-done" : "m-in_progress"}` }, entry.terminal ? "finished" : "open"),
    ),
    markers,
  );
}

function renderDecisions(decisions) {
  if (!decisions.seats.length && !decisions.decisions.length) {
    return h("p", { class: "muted" }, "No seats at this step.");
  }
  const seats = decisions.seats.map((seat) => h("li", {},
    h("span", {}, h("b", {}, profileName(seat.agent_profile_id)), h("span", { class: "muted" }, ` · ${seat.role}${seat.decision_required ? "" : " (no decision)"}`)),
    seat.verdict ? h("span", { class: `pill verdict-${seat.verdict}` }, pretty(seat.verdict)) : h("span", { class: "pill waiting" }, seat.decision_required ? "waiting" : "—"),
  ));
  const history = decisions.decisions.filter((d) => d.superseded_at).length;
  // The rounds a new entry cleared stay readable: the reasons a reviewer sent the task back.
  const earlier = (decisions.earlier || []).slice().reverse().map((d) => h("li", { class: "earlier-verdict" },
    h("span", {}, h("b", {}, `Round ${d.round}`), h("span", { class: "muted" }, ` · ${profileName(d.decider_id) || d.role}`),
      d.comment ? h("div", { class: "muted small" }, d.comment) : null),
    h("span", { class: `pill verdict-${d.decision}` }, pretty(d.decision)),
  ));
  return h("div", {},
    h("ul", { class: "rows" }, seats),
    history ? h("p", { class: "muted small" }, `${history} earlier verdict${history === 1 ? "" : "s"} superseded`) : null,
    earlier.length ? h("p", { class: "muted small" }, "Earlier rounds") : null,
    earlier.length ? h("ul", { class: "rows" }, earlier) : null,
  );
}

function renderRun(run) {
  return h("li", {},
    h("span", {}, h("b", {}, profileName(run.agent_profile_id)), h("span", { class: "muted" }, ` · ${pretty(run.reason)}`),
      run.error_message ? h("div", { class: "error-text" }, run.error_message) : null),
    h("span", { class: "right" }, h("span", { class: `pill run-${run.status}` }, run.status), h("span", { class: "muted small" }, ago(run.finished_at || run.claimed_at || run.requested_at))),
  );
}

function renderSession(session) {
  return h("li", {},
    h("span", {}, h("b", {}, session.agent_profile_id ? profileName(session.agent_profile_id) : "external agent"),
      h("span", { class: "muted mono" }, ` · ${shortId(session.id)}`),
      session.error_message ? h("div", { class: "error-text" }, session.error_message) : null),
    h("span", { class: `pill s-${session.state.toLowerCase()}` }, pretty(session.state)),
  );
}

// -- live updates ------------------------------------------------------------------------------

function onEvent(event) {
  const data = event.data;
  if (state.board) {
    const mine = data.workflow_id === undefined || data.workflow_id === state.workflowId
      || state.board.tasks.some((t) => t.id === data.task_id);
    if (mine) scheduleRefresh();
  }
  if (state.openTaskId && data.task_id === state.openTaskId) scheduleDetail();
  if (event.type === "task.deleted" && data.task_id === state.openTaskId) closeDetail();
}

function onStreamState(value) {
  const live = $("live");
  live.dataset.state = value;
  live.querySelector(".label").textContent = { live: "live", reconnecting: "reconnecting…", unauthorized: "token refused" }[value] || value;
  if (value === "live") scheduleRefresh(0); // catch up with anything missed while away
}

// -- start -------------------------------------------------------------------------------------

function readToken() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search); // out of the address bar
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function askToken(message) {
  const dialog = $("token-dialog");
  if (message) dialog.querySelector("p").textContent = message;
  if (!dialog.open) dialog.showModal();
}

async function start(token) {
  state.api = createApi(token);
  try {
    await loadWorkflows();
    await loadBoard();
  } catch (error) {
    showError(error);
    return;
  }
  state.api.stream(onEvent, onStreamState);
}

function init() {
  $("workflow").addEventListener("change", (event) => {
    state.workflowId = event.target.value;
    sessionStorage.setItem(WORKFLOW_KEY, state.workflowId);
    closeDetail();
    loadBoard().catch(showError);
  });
  $("detail-close").addEventListener("click", closeDetail);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.openTaskId) closeDetail();
  });
  $("token-form").addEventListener("submit", () => {
    const value = $("token-input").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    start(value);
  });
  const token = readToken();
  if (token) start(token);
  else askToken();
}

init();
