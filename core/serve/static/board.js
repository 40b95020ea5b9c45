// The board page: lanes per step, cards that say who or what they wait for, the task panel
// (the running turn's transcript live, permission requests, Cancel / Retry, comments, verdicts
// with a reason, messages), moves by drag (mouse, touch or pen) and drop, search and filters
// kept in the URL, and live updates from the event stream. Plain DOM, no framework, no build
// step. Renders patch what changed (dom.js), so typing and focus survive events.

import { ApiError, createApi } from "./api.js";
import { h as element, patch } from "./dom.js";

const TOKEN_KEY = "laneway.token";
const WORKFLOW_KEY = "laneway.workflow";
const UNDO_MS = 6000;
/* Cards per lane per read: the first page of every lane comes first, the rest on scroll. */
const PAGE = 100;
const MAX_PAGE = 1000; // the server's cap on ?limit=
const FINISHED_STATES = new Set(["COMPLETED", "CANCELLED", "DONE", "ARCHIVED"]);
const LIVE_RUN = new Set(["queued", "claimed"]);
const RETRYABLE = new Set(["failed", "dead", "cancelled"]);

const state = {
  api: null,
  workflows: [],
  workflowId: null,
  board: null, // { workflow, tasks (every lane's loaded cards), profiles, counts, step_agents }
  lanes: new Map(), // step id -> { tasks, cursor, loading }: what of the lane is loaded
  boardGen: 0, // a whole-board read bumps it: a lane's page read before it is dropped
  visibleEnds: new Set(), // step ids whose lane end is in view (load on)
  focusTask: null, // a card to focus once a board read draws it (an undone archive's)
  pending: new Map(), // task id -> its pending permission requests
  personWaits: new Map(), // task id -> Set of reasons it waits for a person (task.needs_person)
  agentsByTask: null, // task id -> Set of profile ids with a run on it (read for the agent filter)
  openTaskId: null,
  cameFrom: null, // the task whose card opened the panel: focus goes back to it
  detail: null,
  transcript: null, // { runId, sessionId, pinned, items: Map seq -> item, lastSeq }
  runSessions: new Map(), // run id -> the session its items were kept in (from agent.item)
  confirmArchive: false,
  editing: false, // the panel shows the title/description form
  lineComment: null, // { taskId, file, line }: the diff line a person clicked to comment on
  filters: { q: "", step: "", state: "", agent: "", person: false },
  me: null, // { name, role, actor }: who the token is (GET /api/me)
};

const $ = (id) => document.getElementById(id);

// -- who is signed in, and what their role may do (issue 44) --------------------------------

const RANK = { viewer: 0, operator: 1, admin: 2 };

function allows(needed) {
  const me = state.me;
  return !me || (RANK[me.role] ?? -1) >= RANK[needed];
}

function refusal(needed) {
  return `Needs the ${needed} role: you are signed in as ${state.me.name}, a ${state.me.role}`;
}

// Every element of the page is built here: one with `needs: ROLE` is drawn disabled, saying
// why on hover, when the signed-in person's role is below it (the server refuses it anyway).
function h(tag, attrs = {}, ...children) {
  if (!attrs || !("needs" in attrs)) return element(tag, attrs, ...children);
  const { needs, ...rest } = attrs;
  if (allows(needs)) return element(tag, rest, ...children);
  return element(tag, { ...rest, disabled: true, title: refusal(needs), dataset: { ...(rest.dataset || {}), needs } }, ...children);
}

// -- telling the person ----------------------------------------------------------------------

// One polite live region for the whole page: what changed, said once.
function announce(message) {
  const line = $("status");
  line.textContent = "";
  requestAnimationFrame(() => { line.textContent = message; });
}

function toast(message, kind = "error", action = null) {
  const el = h("div", { class: `toast ${kind}` }, h("span", {}, message),
    action ? h("button", { type: "button", class: "toast-action", onclick: () => { action.run(); el.remove(); } }, action.label) : null);
  $("toasts").append(el);
  const life = action ? UNDO_MS : 4200;
  setTimeout(() => el.classList.add("gone"), life);
  setTimeout(() => el.remove(), life + 600);
  announce(message);
  return el;
}

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    askToken("That token was refused. Paste the one laneway serve printed.");
    return;
  }
  toast(error.message || String(error));
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

function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/* A task's state in words that no step is named: REVIEW is "its agent failed, have a look",
   not the Review step (issue 38). The pill says "state: …" and its title the stored value. */
const STATE_WORDS = {
  TODO: "to do",
  CREATED: "new",
  SCHEDULING: "scheduling",
  IN_PROGRESS: "started",
  REVIEW: "needs a look",
  BLOCKED: "blocked",
  WAITING_FOR_INPUT: "waits for input",
  COMPLETED: "finished",
  FAILED: "failed",
  CANCELLED: "cancelled",
};

function stateWords(value) {
  return STATE_WORDS[value] || pretty(value);
}

function statePill(value) {
  return h("span", { class: `pill state state-${String(value).toLowerCase()}`, title: `Task state ${value} (not a step)` },
    `state: ${stateWords(value)}`);
}

// The worktree's path, and what an agent's tool call or permission request says of it,
// relative to it: `/…/worktrees/0194…/src/app.py` reads `src/app.py`.
function relativePaths(text, workspace) {
  const root = workspace && workspace.path ? String(workspace.path).replace(/\/+$/, "") : "";
  if (!text || !root) return text;
  return String(text).split(`${root}/`).join("").split(root).join(".");
}

// -- names, not ids --------------------------------------------------------------------------

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

// -- who or what a task waits for --------------------------------------------------------------

function needsPerson(task) {
  return Boolean(task.badges.waiting_for_person) || (state.pending.get(task.id) || []).length > 0;
}

function blockersOf(task) {
  return (task.badges && task.badges.blockers) || [];
}

function atReviewStep(task) {
  const step = steps().find((s) => s.id === task.workflow_step_id);
  if (!step) return false;
  return step.stage_type === "review" || step.stage_type === "approval" || /review|approv/i.test(step.name);
}

function waitsFor(task) {
  const b = task.badges;
  if (needsPerson(task)) {
    const asks = b.questions ? "its agent asks a question" : "its agent asks for permission";
    return { kind: "person", text: `Waits for a person: ${asks}` };
  }
  if (b.running) return { kind: "agent", text: "An agent is working on it" };
  if (b.last_error) return { kind: "failed", text: `Failed: ${b.last_error}` };
  const forWorker = b.waits_for_host
    ? `waits for a worker on ${b.waits_for_host} (its worktree is there: start \`laneway worker\` there)`
    : "waits for a worker (start one with `laneway worker`)";
  if (b.queued_behind) return { kind: "queued", text: `Queued behind ${plural(b.queued_behind, "run")} of its agent; ${forWorker}` };
  if (!task.wip_admitted) return { kind: "queued", text: "Waits for room in this step" };
  const left = b.decisions.required - b.decisions.approved;
  if (b.decisions.required > 0 && left > 0) {
    const how = b.queued ? " (its reviewers' runs wait for a worker: `laneway worker`)" : "";
    return { kind: "decision", text: `Waits for ${plural(left, "verdict")}${how}` };
  }
  if (b.queued) return { kind: "queued", text: `Queued: ${forWorker}` };
  if (b.dead_run) return { kind: "failed", text: "Its run died on every attempt" };
  if (b.dead_session) return { kind: "failed", text: "Its agent's last session failed" };
  if (FINISHED_STATES.has(task.state)) return null;
  const blockers = blockersOf(task);
  if (blockers.length) {
    const more = blockers.length > 1 ? ` and ${plural(blockers.length - 1, "other")}` : "";
    return { kind: "blocked", text: `Blocked by “${blockers[0].title}”${more}: it can start once that is finished` };
  }
  if (b.last_run === "cancelled") return { kind: "nobody", text: "Cancelled: nothing runs now; Start it again from its panel" };
  if (atReviewStep(task)) return { kind: "decision", text: "Waits for a person to review it: move it on, or send its agent a message" };
  if (stepAgent(task.workflow_step_id)) return { kind: "nobody", text: "Not started: press Start in its panel (or `laneway task start`)" };
  return { kind: "nobody", text: "Nobody is on it yet: Start it, or move it to a step with an agent" };
}

// A line's `command` parts drawn as code.
function withCode(text) {
  return String(text).split("`").map((part, n) => (n % 2 ? h("code", {}, part) : part));
}

function stepAgent(stepId) {
  return ((state.board && state.board.step_agents) || {})[stepId] || null;
}

// -- loading ---------------------------------------------------------------------------------

async function loadWorkflows() {
  state.workflows = await state.api.get("/api/workflows");
  const select = $("workflow");
  patch(select, state.workflows.map((wf) => h("option", { value: wf.id, key: wf.id }, wf.name)));
  const wanted = new URLSearchParams(location.search).get("workflow") || sessionStorage.getItem(WORKFLOW_KEY);
  const picked = state.workflows.find((wf) => wf.id === wanted || wf.name === wanted) || state.workflows[0];
  state.workflowId = picked ? picked.id : null;
  if (state.workflowId) select.value = state.workflowId;
}

// A lane's page without the lane counts (`counts=0`): they count the whole workflow, so the
// page reads them once per load (`countsUrl`), not once per lane and page.
function boardUrl(stepId, limit, cursor) {
  const q = new URLSearchParams({ workflow: state.workflowId, step: stepId, limit: String(limit), counts: "0" });
  if (state.filters.q) q.set("q", state.filters.q);
  if (cursor) q.set("cursor", cursor);
  return `/api/board?${q}`;
}

// The lane counts (and the workflow, when no lane is known yet), beside the lanes' first pages.
function countsUrl() {
  const q = new URLSearchParams({ workflow: state.workflowId, limit: "1" });
  if (state.filters.q) q.set("q", state.filters.q);
  return `/api/board?${q}`;
}

// A lane's first `want` cards (at least a page), read page after page from the cursor.
async function readLane(stepId, want) {
  let tasks = [];
  let cursor = null;
  let answer;
  do {
    const limit = Math.min(Math.max(want - tasks.length, PAGE), MAX_PAGE);
    answer = await state.api.get(boardUrl(stepId, limit, cursor));
    tasks = tasks.concat(answer.tasks);
    cursor = answer.next_cursor;
  } while (cursor && tasks.length < want);
  return { answer, lane: { tasks, cursor, loading: false } };
}

function loadedTasks() {
  return [...state.lanes.values()].flatMap((lane) => lane.tasks);
}

async function loadBoard() {
  if (!state.workflowId) {
    patch($("board"), h("div", { class: "empty" }, "No workflow yet. Create one with ",
      h("code", {}, "laneway workflow create --template office-default"), "."));
    return;
  }
  // A board read that says which tasks wait for a person (badges.waiting_for_person) makes the
  // read of pending permission requests unneeded; an older one does not say it.
  const sayer = state.board && state.board.tasks.find((t) => "waiting_for_person" in t.badges);
  const known = state.board && state.board.workflow.id === state.workflowId
    ? state.board.workflow : state.workflows.find((wf) => wf.id === state.workflowId);
  const stepIds = known ? known.steps.map((s) => s.id) : [];
  const gen = ++state.boardGen;
  // every lane's first page (or as much as was loaded of it) at once: the lanes in view first
  const [lanes, whole, pending, runs] = await Promise.all([
    Promise.all(stepIds.map((id) => readLane(id, Math.max(PAGE, state.lanes.get(id)?.tasks.length || 0)))),
    state.api.get(countsUrl()),
    sayer ? [] : state.api.get("/api/permissions?state=pending"),
    state.filters.agent ? state.api.get("/api/runs") : null,
  ]);
  if (gen !== state.boardGen) return;
  const answer = lanes.length ? lanes[0].answer : whole;
  state.lanes = new Map(stepIds.map((id, n) => [id, lanes[n].lane]));
  state.board = {
    workflow: answer.workflow,
    profiles: answer.profiles,
    counts: whole.counts || {},
    step_agents: answer.step_agents || {},
    tasks: loadedTasks(),
  };
  state.pending = new Map();
  for (const p of pending) state.pending.set(p.task_id, [...(state.pending.get(p.task_id) || []), p]);
  if (runs) {
    state.agentsByTask = new Map();
    for (const r of runs) {
      if (!state.agentsByTask.has(r.task_id)) state.agentsByTask.set(r.task_id, new Set());
      state.agentsByTask.get(r.task_id).add(r.agent_profile_id);
    }
  }
  renderFilters();
  renderBoard();
  // the open panel's "waits for" line is drawn from this board read: a read landing after the
  // panel's own reload must redraw it (keyed patching keeps typing and focus)
  if (state.detail && state.openTaskId) renderDetail();
  // a step added since the last read has no lane read yet
  const now = answer.workflow.steps.map((s) => s.id);
  if (now.length !== stepIds.length || now.some((id) => !stepIds.includes(id))) scheduleRefresh(0);
}

// The next page of one lane, when its end comes into view; again while it stays in view.
async function loadMore(stepId) {
  const lane = state.lanes.get(stepId);
  if (!lane || !lane.cursor || lane.loading) return;
  lane.loading = true;
  const gen = state.boardGen;
  let more = false;
  try {
    const answer = await state.api.get(boardUrl(stepId, PAGE, lane.cursor));
    if (gen !== state.boardGen || state.lanes.get(stepId) !== lane) return;
    const had = new Set(lane.tasks.map((t) => t.id));
    lane.tasks.push(...answer.tasks.filter((t) => !had.has(t.id)));
    lane.cursor = answer.next_cursor;
    state.board.tasks = loadedTasks();
    renderBoard();
    more = Boolean(lane.cursor);
  } catch (error) {
    showError(error);
  } finally {
    lane.loading = false;
  }
  if (more && state.visibleEnds.has(stepId)) requestAnimationFrame(() => loadMore(stepId));
}

const laneEnds = typeof IntersectionObserver === "function" ? new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const id = entry.target.dataset.stepId;
    if (entry.isIntersecting) {
      state.visibleEnds.add(id);
      loadMore(id);
    } else {
      state.visibleEnds.delete(id);
    }
  }
}, { rootMargin: "600px 0px" }) : null;

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
const transcriptRefresh = throttled(() => loadTranscriptTail());

function scheduleDetail(delay = 80) {
  if (state.openTaskId) detailRefresh(delay);
}

// -- search and filters (kept in the URL, so a view can be shared) ---------------------------

function readFilters() {
  const q = new URLSearchParams(location.search);
  state.filters = {
    q: q.get("q") || "",
    step: q.get("step") || "",
    state: q.get("state") || "",
    agent: q.get("agent") || "",
    person: q.get("person") === "1",
  };
  $("search").value = state.filters.q;
  $("filter-person").checked = state.filters.person;
}

function writeFilters() {
  const q = new URLSearchParams();
  if (state.workflowId) q.set("workflow", state.workflowId);
  const f = state.filters;
  if (f.q) q.set("q", f.q);
  if (f.step) q.set("step", f.step);
  if (f.state) q.set("state", f.state);
  if (f.agent) q.set("agent", f.agent);
  if (f.person) q.set("person", "1");
  history.replaceState(null, "", `${location.pathname}?${q}`);
}

function renderFilters() {
  const f = state.filters;
  // a shared view's step or agent this board does not have narrows nothing
  if (f.step && !steps().some((s) => s.id === f.step)) f.step = "";
  if (f.agent && !(f.agent in state.board.profiles)) f.agent = "";
  const option = (value, label, selected) => h("option", { value, key: value || "any", selected: selected || null }, label);
  patch($("filter-step"), option("", "Any step", !f.step), steps().map((s) => option(s.id, s.name, f.step === s.id)));
  const states = [...new Set([...state.board.tasks.map((t) => t.state), f.state].filter(Boolean))].sort();
  patch($("filter-state"), option("", "Any state", !f.state), states.map((s) => option(s, `state: ${stateWords(s)}`, f.state === s)));
  const profiles = Object.entries(state.board.profiles).sort((a, b) => a[1].name.localeCompare(b[1].name));
  patch($("filter-agent"), option("", "Any agent", !f.agent), profiles.map(([id, p]) => option(id, p.name, f.agent === id)));
  $("filter-step").value = f.step;
  $("filter-state").value = f.state;
  $("filter-agent").value = f.agent;
}

function shown(task) {
  const f = state.filters;
  if (f.q) {
    const q = f.q.toLowerCase();
    const hay = `${task.title}\n${task.description || ""}`.toLowerCase();
    if (!hay.includes(q) && !task.id.toLowerCase().endsWith(q)) return false;
  }
  if (f.state && task.state !== f.state) return false;
  if (f.person && !needsPerson(task)) return false;
  if (f.agent && !(state.agentsByTask && (state.agentsByTask.get(task.id) || new Set()).has(f.agent))) return false;
  return true;
}

function onFilter() {
  const before = state.filters.q;
  state.filters = {
    q: $("search").value.trim(),
    step: $("filter-step").value,
    state: $("filter-state").value,
    agent: $("filter-agent").value,
    person: $("filter-person").checked,
  };
  writeFilters();
  if (state.filters.q !== before) {
    // the server searches every card, not just the loaded ones: lanes read again from the top
    state.lanes = new Map();
    scheduleRefresh(0);
  } else if (state.filters.agent && !state.agentsByTask) scheduleRefresh(0);
  if (state.board) renderBoard();
}

// -- the board -------------------------------------------------------------------------------

function renderBoard() {
  const board = state.board;
  const tasks = board.tasks.filter(shown);
  const lanes = steps().filter((s) => !state.filters.step || s.id === state.filters.step)
    .map((step) => renderLane(step, tasks.filter((t) => t.workflow_step_id === step.id)));
  patch($("board"), lanes);
  if (laneEnds) for (const end of document.querySelectorAll(".lane-more")) laneEnds.observe(end);
  if (state.focusTask) {
    const card = document.querySelector(`.card[data-task-id="${CSS.escape(state.focusTask)}"]`);
    if (card) {
      state.focusTask = null;
      card.focus();
    }
  }
  const all = board.tasks;
  const running = all.filter((t) => t.badges.running).length;
  const waiting = all.filter((t) => t.badges.decisions.required > t.badges.decisions.approved && t.badges.decisions.required > 0).length;
  const person = all.filter(needsPerson).length;
  const total = Math.max(all.length,
    Object.values(board.counts || {}).reduce((n, c) => n + c.admitted + c.queued, 0));
  const narrowed = tasks.length !== all.length;
  patch($("summary"),
    h("span", { key: "tasks" }, h("b", {}, narrowed ? `${tasks.length}/${total}` : String(total)), total === 1 ? " task" : " tasks"),
    h("span", { key: "running" }, h("b", {}, String(running)), " running"),
    h("span", { key: "waiting" }, h("b", {}, String(waiting)), " awaiting decisions"),
    person ? h("span", { key: "person", class: "needs" }, h("b", {}, String(person)), " need a person") : null,
  );
  showWaitingCount();
}

function renderLane(step, tasks) {
  const admitted = tasks.filter((t) => t.wip_admitted);
  const queued = tasks.filter((t) => !t.wip_admitted);
  const limit = step.wip_limit > 0 ? step.wip_limit : null;
  const counted = (state.board.counts || {})[step.id];
  const count = counted ? counted.admitted
    : state.board.tasks.filter((t) => t.workflow_step_id === step.id && t.wip_admitted).length;
  const lane = state.lanes.get(step.id);
  const total = counted ? counted.admitted + counted.queued : tasks.length;
  const full = limit !== null && count >= limit;
  const wip = h("span", { class: `wip${full ? " full" : ""}`, title: limit ? "in progress / WIP limit" : "tasks here (no WIP limit)" },
    limit ? `${count} / ${limit}` : String(count));
  return h("section", {
    key: `lane:${step.id}`,
    class: `lane${step.allow_manual_move ? "" : " locked"}`,
    dataset: { stepId: step.id, stepName: step.name },
    "aria-label": step.name,
    ondragover: (event) => {
      if (!event.dataTransfer.types.includes("text/laneway-task")) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "move";
      event.currentTarget.classList.add("drop");
    },
    ondragleave: (event) => {
      if (!event.currentTarget.contains(event.relatedTarget)) event.currentTarget.classList.remove("drop");
    },
    ondrop: (event) => {
      event.preventDefault();
      event.currentTarget.classList.remove("drop");
      const taskId = event.dataTransfer.getData("text/laneway-task");
      if (taskId) moveTask(taskId, step);
    },
  },
  h("header", { class: "lane-head" },
    h("div", { class: "lane-title" },
      h("span", { class: `stage stage-${step.stage_type}` }),
      h("h2", {}, step.name),
    ),
    wip,
  ),
  h("div", { class: "lane-cards" },
    admitted.length ? admitted.map(renderCard) : h("div", { class: "lane-empty" }, "No tasks"),
  ),
  queued.length ? h("div", { class: "queued" },
    h("div", { class: "queued-head" }, `Queued · ${counted ? counted.queued : queued.length}`),
    queued.map(renderCard),
  ) : null,
  lane && lane.cursor ? h("div", { class: "lane-more", key: `more:${step.id}`, dataset: { stepId: step.id } },
    `Showing ${lane.tasks.length} of ${total}; more load as you scroll`) : null,
  );
}

function renderBadges(task) {
  const b = task.badges;
  const badges = [];
  if (needsPerson(task)) badges.push(h("span", { class: "badge person", title: task.badges.questions ? "a question waits for an answer" : "a permission request waits for an answer" }, "needs you"));
  if (b.running) badges.push(h("span", { class: "badge running", title: "an agent is working" }, h("i"), "running"));
  if (b.decisions.required > 0) {
    const done = b.decisions.approved >= b.decisions.required;
    badges.push(h("span", { class: `badge decisions${done ? " met" : ""}`, title: "approved / required decisions" },
      `✓ ${b.decisions.approved}/${b.decisions.required}`));
  }
  if (b.queued_behind) badges.push(h("span", { class: "badge queued", title: "runs of its agent ahead of this one" }, `behind ${b.queued_behind}`));
  if (b.queued && b.waits_for_host) badges.push(h("span", { class: "badge queued", title: `only a worker on ${b.waits_for_host} may take its runs (its worktree is there)` }, `waits for ${b.waits_for_host}`));
  if (b.open_entry) badges.push(h("span", { class: "badge entry", title: "an entry sequence has not finished" }, "entry open"));
  if (b.failed_marker) badges.push(h("span", { class: "badge failed", title: "an entry action failed" }, "action failed"));
  if (b.last_error) badges.push(h("span", { class: "badge failed", title: b.last_error }, "error"));
  if (b.dead_run) badges.push(h("span", { class: "badge dead", title: "a run's worker died on every attempt; it is not retried" }, "run dead"));
  if (b.dead_session) badges.push(h("span", { class: "badge dead", title: "the agent's last session failed" }, "agent failed"));
  if (!task.wip_admitted) badges.push(h("span", { class: "badge queued", title: "waiting for room in this step" }, "queued"));
  if (task.over_budget) badges.push(h("span", { class: "badge failed over-budget", title: "its agents' reported costs passed a budget" }, "over budget"));
  const blockers = blockersOf(task);
  if (blockers.length) {
    badges.push(h("span", { class: "badge blocked", title: `blocked by ${blockers.map((x) => `“${x.title}”`).join(", ")}` },
      `blocked by ${blockers.length}`));
  }
  if (task.parent_id) {
    const parent = state.board.tasks.find((t) => t.id === task.parent_id);
    badges.push(h("span", { class: "badge relation parent", title: parent ? `a subtask of “${parent.title}”` : `a subtask of ${task.parent_id}` },
      `subtask of ${parent ? parent.title : shortId(task.parent_id)}`));
  }
  const sub = b.subtasks || { done: 0, total: 0 };
  if (sub.total) badges.push(h("span", { class: "badge relation subtasks", title: "finished / all subtasks" }, `subtasks ${sub.done}/${sub.total}`));
  return badges;
}

function renderCard(task) {
  const badges = renderBadges(task);
  const waits = waitsFor(task);
  return h("article", {
    key: task.id,
    class: `card state-${task.state.toLowerCase()}${task.id === state.openTaskId ? " selected" : ""}${waits && waits.kind === "person" ? " needs-person" : ""}`,
    draggable: allows("operator") ? "true" : "false",
    tabindex: "0",
    "aria-label": task.title,
    dataset: { taskId: task.id, title: task.title },
    onclick: (event) => { if (!event.target.closest(".grip")) openDetail(task.id); },
    onkeydown: (event) => {
      if ((event.key === "Enter" || event.key === " ") && event.target === event.currentTarget) {
        event.preventDefault();
        openDetail(task.id);
      }
    },
    ondragstart: (event) => {
      event.dataTransfer.setData("text/laneway-task", task.id);
      event.dataTransfer.effectAllowed = "move";
      event.currentTarget.classList.add("dragging");
    },
    ondragend: (event) => event.currentTarget.classList.remove("dragging"),
  },
  h("div", { class: "card-top" },
    h("span", { class: "card-title" }, task.title),
    h("button", {
      type: "button", class: "grip", "aria-label": `Move ${task.title}`, title: "Drag to another lane (or press to choose a step)", needs: "operator",
      onpointerdown: (event) => startPointerDrag(event, task),
      // a press by keyboard (no pointer): the panel, at its Move
      onclick: (event) => { if (event.detail === 0) openDetail(task.id, { focus: "move-step" }); },
    }, "⠿"),
  ),
  h("div", { class: "card-meta" },
    statePill(task.state),
    task.priority && task.priority !== "none" ? h("span", { class: `pill prio prio-${task.priority}` }, task.priority) : null,
    h("span", { class: "muted" }, ago(task.updated_at)),
  ),
  badges.length ? h("div", { class: "badges" }, badges) : null,
  waits ? h("div", { class: `waits waits-${waits.kind}` }, withCode(waits.text)) : null,
  );
}

// A drag by pointer events, so touch and pen move cards too (HTML5 drag and drop is mouse
// only): from a card's grip, the lane under the pointer takes it; a press with no drag opens
// the panel at its Move.
function startPointerDrag(event, task) {
  if (event.button !== undefined && event.button > 0) return;
  event.preventDefault();
  event.stopPropagation();
  const grip = event.currentTarget;
  const card = grip.closest(".card");
  const start = { x: event.clientX, y: event.clientY };
  let ghost = null;
  let over = null;
  const laneAt = (x, y) => {
    const el = document.elementFromPoint(x, y);
    return el ? el.closest(".lane") : null;
  };
  const move = (e) => {
    if (!ghost && Math.hypot(e.clientX - start.x, e.clientY - start.y) < 8) return;
    if (!ghost) {
      const box = card.getBoundingClientRect();
      ghost = card.cloneNode(true);
      ghost.classList.add("ghost");
      ghost.style.width = `${box.width}px`;
      document.body.append(ghost);
      card.classList.add("dragging");
    }
    ghost.style.transform = `translate(${e.clientX - 20}px, ${e.clientY - 20}px)`;
    const lane = laneAt(e.clientX, e.clientY);
    if (lane !== over) {
      if (over) over.classList.remove("drop");
      over = lane;
      if (over) over.classList.add("drop");
    }
  };
  const end = (e) => {
    document.removeEventListener("pointermove", move);
    document.removeEventListener("pointerup", end);
    document.removeEventListener("pointercancel", end);
    if (over) over.classList.remove("drop");
    card.classList.remove("dragging");
    if (!ghost) {
      if (e.type === "pointerup") openDetail(task.id, { focus: "move-step" });
      return;
    }
    ghost.remove();
    const lane = e.type === "pointerup" ? laneAt(e.clientX, e.clientY) : null;
    const step = lane && steps().find((s) => s.id === lane.dataset.stepId);
    if (step) moveTask(task.id, step);
  };
  document.addEventListener("pointermove", move);
  document.addEventListener("pointerup", end);
  document.addEventListener("pointercancel", end);
}

async function moveTask(taskId, step) {
  const task = state.board.tasks.find((t) => t.id === taskId);
  if (!task || task.workflow_step_id === step.id) return;
  try {
    await state.api.post(`/api/tasks/${taskId}/move`, { step: step.id });
    toast(`Moved “${task.title}” to ${step.name}`, "ok");
    await loadBoard();
    if (state.openTaskId === taskId) await loadDetail(taskId);
    await offerStart(taskId, step);
  } catch (error) {
    showError(error);
  }
}

// A card moved to a step with an agent that nothing started (no run queued or running: the
// step's entry did not start it itself) asks whether to do what `task start` does.
async function offerStart(taskId, step) {
  const agent = (state.board.step_agents || {})[step.id];
  if (!agent) return;
  // the card as it is now, read for itself (it may sit beyond the lane's loaded pages)
  const q = new URLSearchParams({ workflow: state.workflowId, step: step.id, q: taskId, limit: "1", counts: "0" });
  const moved = (await state.api.get(`/api/board?${q}`)).tasks.find((t) => t.id === taskId);
  if (!moved || moved.workflow_step_id !== step.id) return;
  if (moved.badges.running || moved.badges.queued || FINISHED_STATES.has(moved.state)) return;
  if (blockersOf(moved).length) return; // its agent does not start while it is blocked
  const name = profileName(agent);
  const el = h("div", { class: "toast ask", role: "group", "aria-label": `Start ${name}?` },
    h("span", {}, `Start ${name} on it?`),
    h("button", {
      type: "button", class: "toast-action", id: "start-yes", needs: "operator",
      onclick: async () => {
        el.remove();
        try {
          await state.api.post(`/api/tasks/${encodeURIComponent(taskId)}/start`, { step: step.id });
          toast(`Started ${name} on “${moved.title}”`, "ok");
          scheduleRefresh(0);
          scheduleDetail(0);
        } catch (error) {
          showError(error);
        }
      },
    }, "Start"),
    h("button", { type: "button", class: "toast-action", id: "start-no", onclick: () => el.remove() }, "Not now"),
  );
  $("toasts").append(el);
  announce(`Start ${name} on “${moved.title}”?`);
  el.querySelector("#start-yes").focus();
}

// -- the task panel --------------------------------------------------------------------------

async function openDetail(taskId, { focus = "detail-title" } = {}) {
  const changed = state.openTaskId !== taskId;
  state.openTaskId = taskId;
  state.cameFrom = taskId;
  if (changed) {
    state.detail = null;
    state.transcript = null;
    state.confirmArchive = false;
    state.editing = false;
    patch($("detail-body"));
    // the title comes with the panel's content, so a title shown means the panel is read
    $("detail-title").textContent = "";
    $("detail-step").textContent = "";
    patch($("detail-meta"));
  }
  $("detail").hidden = false;
  document.body.classList.add("with-detail");
  renderBoard();
  $("detail-title").focus();
  await loadDetail(taskId).catch(showError);
  if (focus !== "detail-title" && $(focus)) $(focus).focus();
}

function closeDetail({ refocus = true } = {}) {
  const from = state.cameFrom;
  state.openTaskId = null;
  state.detail = null;
  state.transcript = null;
  $("detail").hidden = true;
  document.body.classList.remove("with-detail");
  if (state.board) renderBoard();
  if (refocus && from) {
    const card = document.querySelector(`.card[data-task-id="${CSS.escape(from)}"]`);
    if (card) card.focus();
  }
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
  const [entries, runs, sessions, decisions, permissions, questions, comments, diff, events] = await Promise.all([
    api.get(`/api/tasks/${id}/entries`),
    api.get(`/api/runs?task=${id}`),
    api.get(`/api/sessions?task=${id}`),
    api.get(`/api/tasks/${id}/decisions`),
    api.get(`/api/permissions?task=${id}&state=pending`),
    api.get(`/api/questions?task=${id}&state=pending`),
    api.get(`/api/tasks/${id}/comments`),
    // a task has a diff once its first turn made its worktree
    task.workspace ? api.get(`/api/tasks/${id}/diff`).catch((error) => ({ error: error.message })) : null,
    api.get(`/api/tasks/${id}/history`),
  ]);
  if (state.openTaskId !== taskId) return;
  state.detail = { task, entries, runs, sessions, decisions, permissions, questions, comments, diff, events };
  await followRun(runs);
  if (state.openTaskId !== taskId) return;
  renderDetail();
}

// The transcript shown: the run a person picked, else the task's running (or latest) run.
async function followRun(runs) {
  const current = state.transcript;
  let run = null;
  if (current && current.pinned) run = runs.find((r) => r.id === current.runId) || null;
  if (!run) {
    // a claimed run may not name its session yet: the items' events did
    const talked = runs.filter((r) => r.session_id || state.runSessions.has(r.id));
    run = [...runs].reverse().find((r) => r.status === "claimed") || talked[talked.length - 1] || null;
  }
  if (!run) {
    state.transcript = null;
    return;
  }
  if (current && current.runId === run.id) {
    await loadTranscriptTail();
    return;
  }
  await showRun(run.id, Boolean(current && current.pinned && current.runId === run.id));
}

async function showRun(runId, pinned) {
  const shownRun = await state.api.get(`/api/runs/${encodeURIComponent(runId)}`);
  const items = new Map();
  for (const item of shownRun.items) items.set(item.seq, item);
  state.transcript = {
    runId,
    sessionId: shownRun.run.session_id || state.runSessions.get(runId) || (shownRun.items[0] || {}).session_id || null,
    status: shownRun.run.status,
    pinned,
    items,
    lastSeq: Math.max(0, ...shownRun.items.map((i) => i.seq)),
  };
}

// What was kept after the last item drawn: `?after=SEQ`, so nothing is drawn twice.
async function loadTranscriptTail() {
  const t = state.transcript;
  if (!t) return;
  if (!t.sessionId) t.sessionId = state.runSessions.get(t.runId) || null;
  if (!t.sessionId) return;
  const q = `after=${t.lastSeq}&run=${encodeURIComponent(t.runId)}&limit=500`;
  const items = await state.api.get(`/api/sessions/${encodeURIComponent(t.sessionId)}/transcript?${q}`);
  if (state.transcript !== t) return;
  for (const item of items) {
    t.items.set(item.seq, item);
    t.lastSeq = Math.max(t.lastSeq, item.seq);
  }
  if (!items.length || !state.detail) return;
  // a reader at the end of the transcript stays at its end; one scrolled up stays put
  const list = document.querySelector("ol.transcript");
  const atEnd = !list || list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  renderDetail();
  const drawn = document.querySelector("ol.transcript");
  if (drawn && atEnd) drawn.scrollTop = drawn.scrollHeight;
}

function section(key, title, count, ...body) {
  return h("section", { class: "panel-section", key: `sec:${key}`, "aria-label": title },
    h("h3", {}, title, count !== null ? h("span", { class: "count" }, String(count)) : null),
    ...body,
  );
}

function renderDetail() {
  const { task, entries, runs, sessions, decisions, permissions, questions, comments, diff, events } = state.detail;
  const boardTask = state.board?.tasks.find((t) => t.id === task.id);
  $("detail-title").textContent = task.title;
  $("detail-step").textContent = task.wip_admitted ? stepName(task.workflow_step_id) : `${stepName(task.workflow_step_id)} · queued`;
  patch($("detail-meta"),
    statePill(task.state),
    h("span", { class: "muted mono", title: task.id }, shortId(task.id)),
    task.archived_at ? h("span", { class: "pill" }, "archived") : null,
  );
  const waits = boardTask ? waitsFor(boardTask) : null;
  patch($("detail-body"),
    waits ? h("p", { key: "waits", class: `waits waits-${waits.kind}` }, withCode(waits.text)) : null,
    state.editing ? renderEdit(task)
      : task.description ? h("p", { key: "description", class: "description" }, task.description) : null,
    renderRelations(task, boardTask),
    permissions.length ? renderPermissions(permissions, task) : null,
    questions.length ? renderQuestions(questions) : null,
    renderActions(task, runs, decisions, sessions, boardTask),
    renderTranscript(runs),
    diff ? section("changes", "Changes", diff.files ? diff.files.length : null, renderChanges(task, diff)) : null,
    section("comments", "Comments", comments.length, renderComments(task, comments)),
    section("entries", "Entries", entries.length,
      entries.length ? [...entries].reverse().map(renderEntry) : h("p", { class: "muted" }, "No entries yet: the task has not arrived at a step with durable actions.")),
    section("decisions", "Decisions", decisions.decisions.length, renderDecisions(decisions)),
    section("runs", "Runs", runs.length,
      runs.length ? h("ul", { class: "rows" }, [...runs].reverse().map(renderRun)) : h("p", { class: "muted" }, "No runs.")),
    section("sessions", "Sessions", sessions.length,
      sessions.length ? h("ul", { class: "rows" }, [...sessions].reverse().map(renderSession)) : h("p", { class: "muted" }, "No sessions.")),
    section("history", "Who did what", null, renderHistory(events)),
  );
}

// The task's retained events, newest first, each with who made it (`actor`): a person's
// moves, comments, verdicts and answers, an agent's tool calls, the engine's own work.
const HISTORY_SHOWN = 30;
const PERSON_TYPES = new Set(["task.moved", "comment.added", "decision.recorded", "permission.resolved",
  "question.answered", "run.cancelled", "task.merged", "task.pushed", "task.created", "task.archived", "task.updated"]);

function renderHistory(events) {
  const shown = [...events].reverse().filter((e) => PERSON_TYPES.has(e.type)).slice(0, HISTORY_SHOWN);
  if (!shown.length) return h("p", { class: "muted" }, "Nothing retained yet.");
  return h("ul", { class: "rows history" }, shown.map((e) =>
    h("li", { key: `ev:${e.id}`, class: "history-row" },
      h("span", { class: "actor mono" }, e.actor || "system"),
      " ", h("span", {}, historyWords(e)),
      " ", h("span", { class: "muted small", title: e.at }, ago(e.at)))));
}

function historyWords(e) {
  switch (e.type) {
    case "task.moved": return `moved it to ${stepName(e.to_step_id)}`;
    case "comment.added": return "commented";
    case "decision.recorded": return `gave the verdict ${String(e.verdict || "").replace("_", " ")}`;
    case "permission.resolved": return `answered a permission request: ${e.state}`;
    case "question.answered": return "answered a question";
    case "run.cancelled": return "cancelled a run";
    case "task.merged": return `merged it into ${e.into || "its base"}`;
    case "task.pushed": return "pushed its branch";
    case "task.created": return "created it";
    case "task.archived": return "archived it";
    case "task.updated": return "edited it";
    default: return e.type;
  }
}

// Its parent, the blockers that still hold it and its subtasks, each a link to its panel.
function renderRelations(task, boardTask) {
  const open = (id, label) => h("button", { type: "button", class: "link relation-link", onclick: () => openDetail(id) }, label);
  const titleOf = (id) => {
    const known = state.board && state.board.tasks.find((t) => t.id === id);
    return known ? known.title : shortId(id);
  };
  const rows = [];
  if (task.parent_id) rows.push(h("li", { key: "parent", class: "relation-parent" }, "Subtask of ", open(task.parent_id, `“${titleOf(task.parent_id)}”`)));
  const holding = boardTask ? blockersOf(boardTask) : [];
  const heldBy = new Set(holding.map((b) => b.id));
  for (const id of task.blocked_by || []) {
    const blocker = holding.find((b) => b.id === id);
    rows.push(h("li", { key: `blocker:${id}`, class: `relation-blocker${heldBy.has(id) ? " holding" : ""}` },
      "Blocked by ", open(id, `“${blocker ? blocker.title : titleOf(id)}”`),
      h("span", { class: "muted" }, heldBy.has(id) ? ` · ${stateWords(blocker.state)}: its agent does not start until it is finished` : " · finished")));
  }
  const children = state.board ? state.board.tasks.filter((t) => t.parent_id === task.id) : [];
  for (const child of children) {
    rows.push(h("li", { key: `child:${child.id}`, class: "relation-child" }, "Subtask ", open(child.id, `“${child.title}”`),
      h("span", { class: "muted" }, ` · ${stateWords(child.state)}`)));
  }
  const counted = boardTask && boardTask.badges.subtasks ? boardTask.badges.subtasks.total : 0;
  if (counted > children.length) rows.push(h("li", { key: "more-children", class: "muted" }, `and ${plural(counted - children.length, "more subtask")} on other boards`));
  if (!rows.length) return null;
  return h("ul", { key: "relations", class: "relations", "aria-label": "Parent, blockers and subtasks" }, rows);
}

// The edit form keeps what is typed across the panel's re-renders (keyed, patched in place);
// its fields start from the task as it was when Edit was pressed.
function renderEdit(task) {
  return h("form", {
    key: "edit",
    class: "edit",
    "aria-label": "Edit the task",
    onsubmit: (event) => { event.preventDefault(); saveEdit(task); },
  },
  h("label", { class: "field" }, h("span", {}, "Title"),
    h("input", { id: "edit-title", type: "text", required: true, value: task.title })),
  h("label", { class: "field" }, h("span", {}, "Description"),
    h("textarea", { id: "edit-description", rows: "4" })),
  h("div", { class: "action-row" },
    h("button", { type: "submit", class: "primary", id: "edit-save" }, "Save"),
    h("button", { type: "button", id: "edit-cancel", onclick: () => { state.editing = false; renderDetail(); $("edit").focus(); } }, "Cancel")),
  );
}

function startEdit() {
  state.editing = true;
  renderDetail();
  const title = $("edit-title");
  title.value = state.detail.task.title;
  $("edit-description").value = state.detail.task.description || "";
  title.focus();
}

async function saveEdit(task) {
  const title = $("edit-title").value;
  const description = $("edit-description").value;
  if (!title.trim()) {
    showError(new Error("A task needs a title"));
    $("edit-title").focus();
    return;
  }
  try {
    const saved = await state.api.patch(`/api/tasks/${encodeURIComponent(task.id)}`, { title, description });
    state.editing = false;
    toast(`Saved “${saved.title}”`, "ok");
    scheduleRefresh(0);
    await loadDetail(task.id);
    if ($("edit")) $("edit").focus();
  } catch (error) {
    showError(error);
  }
}

function renderPermissions(permissions, task) {
  return h("section", { key: "permissions", class: "permissions", role: "group", "aria-label": "Permission requests" },
    h("h3", {}, "Waiting for you"),
    permissions.map((p) => {
      const call = p.tool_call || {};
      const session = state.detail.sessions.find((s) => s.id === p.session_id);
      const who = session && session.agent_profile_id ? profileName(session.agent_profile_id) : "The agent";
      return h("div", { class: "permission", key: p.id, dataset: { permissionId: p.id } },
        h("p", {}, h("b", {}, who), " asks to ", h("b", { class: "tool-title", title: call.title || "" }, relativePaths(call.title, task.workspace) || "use a tool"),
          call.kind ? h("span", { class: "muted" }, ` (${call.kind})`) : null),
        h("div", { class: "seat-buttons" },
          h("button", { type: "button", class: "approve", needs: "operator", onclick: () => answerPermission(p, "allow") }, "Allow"),
          h("button", { type: "button", class: "reject", needs: "operator", onclick: () => answerPermission(p, "deny") }, "Deny"),
        ),
      );
    }),
  );
}

// A question an agent asked (issue 41 item 6): a form of its fields. The server checks the
// answer against them and names a field that does not fit; the values are sent typed.
function renderQuestions(questions) {
  return h("section", { key: "questions", class: "permissions questions", role: "group", "aria-label": "Questions" },
    h("h3", {}, questions.length > 1 ? "Questions for you" : "A question for you"),
    questions.map((q) => {
      const session = state.detail.sessions.find((s) => s.id === q.session_id);
      const who = session && session.agent_profile_id ? profileName(session.agent_profile_id) : "The agent";
      // novalidate: the server checks the answer and its one line names the field
      return h("form", {
        class: "question", key: q.id, dataset: { questionId: q.id }, novalidate: true,
        // the live form (a re-render patches it in place; this render's element is not it)
        onsubmit: (event) => { event.preventDefault(); answerQuestion(q, event.currentTarget); },
      },
        h("p", {}, h("b", {}, who), " asks: ", h("span", { class: "question-message" }, q.message)),
        q.fields.map((f) => questionField(q, f)),
        h("div", { class: "seat-buttons" },
          h("button", { type: "submit", class: "approve" }, "Answer"),
          h("button", { type: "button", class: "reject", onclick: () => declineQuestion(q) }, "Decline"),
        ),
      );
    }),
  );
}

function questionField(q, f) {
  const id = `q-${q.id.slice(-8)}-${f.name}`;
  const label = `${f.title || f.name}${f.required ? "" : " (optional)"}`;
  let input;
  if (f.choices && f.choices.length) {
    input = h("select", { id, name: f.name, key: id },
      f.required ? null : h("option", { value: "" }, "—"),
      f.choices.map((c) => h("option", { value: String(c) }, String(c))));
  } else if (f.type === "boolean") {
    input = h("select", { id, name: f.name, key: id },
      f.required ? null : h("option", { value: "" }, "—"),
      h("option", { value: "true" }, "yes"), h("option", { value: "false" }, "no"));
  } else {
    const numeric = f.type === "number" || f.type === "integer";
    input = h("input", {
      id, name: f.name, key: id, type: numeric ? "number" : "text",
      step: f.type === "integer" ? "1" : numeric ? "any" : null, required: f.required ? true : null,
    });
  }
  return h("div", { class: "question-field", key: `${id}-row` }, h("label", { for: id }, label), input);
}

function questionValues(q, form) {
  const answer = {};
  for (const f of q.fields) {
    const el = form.querySelector(`[name="${CSS.escape(f.name)}"]`);
    const raw = el ? el.value : "";
    if (raw === "") continue;
    if (f.type === "boolean") answer[f.name] = raw === "true";
    else if (f.type === "integer" || f.type === "number") answer[f.name] = Number(raw);
    else answer[f.name] = raw;
  }
  return answer;
}

async function answerQuestion(q, form) {
  try {
    const answered = await state.api.post(`/api/questions/${encodeURIComponent(q.id)}`, { answer: questionValues(q, form) });
    toast(`Question ${answered.state}: ${q.message}`, "ok");
    scheduleRefresh(0);
    scheduleDetail(0);
  } catch (error) {
    showError(error);
  }
}

async function declineQuestion(q) {
  try {
    const answered = await state.api.post(`/api/questions/${encodeURIComponent(q.id)}`, { decline: true });
    toast(`Question ${answered.state}: ${q.message}`, "ok");
    scheduleRefresh(0);
    scheduleDetail(0);
  } catch (error) {
    showError(error);
  }
}

async function answerPermission(permission, outcome) {
  try {
    const answered = await state.api.post(`/api/permissions/${encodeURIComponent(permission.id)}`, { outcome });
    const said = relativePaths((permission.tool_call || {}).title, state.detail && state.detail.task.workspace);
    toast(`Permission ${answered.state}: ${said || "tool call"}`, "ok");
    scheduleRefresh(0);
    scheduleDetail(0);
  } catch (error) {
    showError(error);
  }
}

// Start: what `task start` does, at the card's step when an agent works there, else at the
// workflow's start step. Not while a run is live, nor for a finished or blocked task.
function renderStart(task, live, boardTask) {
  if (live.length || FINISHED_STATES.has(task.state) || task.archived_at) return null;
  const here = stepAgent(task.workflow_step_id);
  const first = steps().find((s) => s.is_start_step) || steps()[0];
  const there = first && first.id !== task.workflow_step_id ? stepAgent(first.id) : null;
  if (!here && !there) return null;
  const agent = here || there;
  const label = here ? `Start ${profileName(agent)}` : `Start ${profileName(agent)} at ${first.name}`;
  const blockers = boardTask ? blockersOf(boardTask) : [];
  const why = blockers.length ? `Blocked by “${blockers[0].title}”: it can start once that is finished` : null;
  return h("span", { class: "start-group", key: "start" },
    h("button", {
      type: "button", class: "primary", id: "start-task", disabled: blockers.length ? true : null, needs: "operator",
      "aria-describedby": why ? "start-why" : null,
      onclick: () => startTask(task, here ? task.workflow_step_id : first.id, agent),
    }, label),
    why ? h("span", { class: "muted small", id: "start-why" }, why) : null);
}

async function startTask(task, stepId, agent) {
  try {
    await state.api.post(`/api/tasks/${encodeURIComponent(task.id)}/start`, { step: stepId });
    toast(`Started ${profileName(agent)} on “${task.title}”`, "ok");
    scheduleRefresh(0);
    scheduleDetail(0);
  } catch (error) {
    showError(error);
  }
}

function renderActions(task, runs, decisions, sessions, boardTask) {
  const select = h("select", { "aria-label": "Move to step", id: "move-step", needs: "operator" },
    steps().map((s) => h("option", { value: s.id, key: s.id, selected: s.id === task.workflow_step_id }, s.name)));
  const live = runs.filter((r) => LIVE_RUN.has(r.status));
  const move = h("div", { class: "action-row", key: "move" },
    select,
    h("button", {
      type: "button",
      class: "primary",
      id: "move-button",
      needs: "operator",
      onclick: () => {
        const step = steps().find((s) => s.id === $("move-step").value);
        if (step) moveTask(task.id, step);
      },
    }, "Move"),
  );
  const other = h("div", { class: "action-row wrap", key: "other" },
    renderStart(task, live, boardTask),
    live.length ? h("button", { type: "button", class: "reject", id: "cancel-task", needs: "operator", onclick: () => cancelTask(task) },
      `Cancel ${live.length === 1 ? "the run" : `${live.length} runs`}`) : null,
    state.editing ? null : h("button", { type: "button", id: "edit", needs: "operator", onclick: startEdit }, "Edit"),
    state.confirmArchive
      ? h("span", { class: "confirm", role: "group", "aria-label": "Confirm archive" },
        h("span", {}, "Archive this task?"),
        h("button", { type: "button", class: "reject", id: "archive-confirm", onclick: () => archiveTask(task) }, "Archive"),
        h("button", { type: "button", id: "archive-keep", onclick: () => { state.confirmArchive = false; renderDetail(); $("archive").focus(); } }, "Keep"))
      : h("button", { type: "button", id: "archive", needs: "operator", onclick: () => { state.confirmArchive = true; renderDetail(); $("archive-confirm").focus(); } }, "Archive…"),
  );
  const waiting = decisions.seats.filter((s) => s.decision_required && s.verdict !== "approved");
  const seats = waiting.length ? h("div", { class: "seats", key: "seats" },
    h("label", { class: "field" }, h("span", {}, "Reason (optional)"),
      h("textarea", { id: "verdict-comment", rows: "2", placeholder: "Why: goes with Approve or Reject" })),
    waiting.map((seat) => h("div", { class: "seat", key: seat.id },
      h("div", {},
        h("b", {}, profileName(seat.agent_profile_id)),
        h("span", { class: "muted" }, ` · ${seat.role}`),
        seat.verdict ? h("span", { class: `pill verdict-${seat.verdict}` }, pretty(seat.verdict)) : h("span", { class: "pill waiting" }, "waiting"),
      ),
      h("div", { class: "seat-buttons" },
        h("button", { type: "button", class: "approve", needs: "operator", "aria-label": `Approve as ${profileName(seat.agent_profile_id)}`, onclick: () => verdict(task, decisions, seat, "approved") }, "Approve"),
        h("button", { type: "button", class: "reject", needs: "operator", "aria-label": `Reject as ${profileName(seat.agent_profile_id)}`, onclick: () => verdict(task, decisions, seat, "rejected") }, "Reject"),
      ),
    ))) : null;
  const session = [...sessions].reverse().find((s) => ["CREATED", "STARTING", "RUNNING", "WAITING_FOR_INPUT"].includes(s.state));
  let message = null;
  if (session) {
    const to = session.agent_profile_id ? profileName(session.agent_profile_id) : "the agent";
    message = h("form", {
      class: "message",
      key: `message:${session.id}`,
      onsubmit: async (event) => {
        event.preventDefault();
        const text = event.currentTarget.querySelector("textarea");
        if (!text.value.trim()) return;
        try {
          await state.api.post(`/api/sessions/${session.id}/send`, { text: text.value });
          text.value = "";
          toast("Message sent", "ok");
          scheduleDetail(0);
        } catch (error) {
          showError(error);
        }
      },
    }, h("textarea", { id: "message-text", rows: "2", placeholder: `Message to ${to}…`, "aria-label": `Message to ${to}` }),
    h("button", { type: "submit", needs: "operator" }, "Send"));
  }
  return h("div", { class: "actions", key: "actions" }, move, other, seats, message);
}

async function cancelTask(task) {
  try {
    const done = await state.api.post(`/api/tasks/${encodeURIComponent(task.id)}/cancel`);
    toast(`Cancelled ${plural(done.cancelled.length, "run")} of “${task.title}”`, "ok");
    scheduleRefresh(0);
    scheduleDetail(0);
  } catch (error) {
    showError(error);
  }
}

async function runAction(run, action) {
  try {
    const done = await state.api.post(`/api/runs/${encodeURIComponent(run.id)}/${action}`);
    toast(action === "retry" ? `Retry queued (run ${shortId(done.id)})` : `Run ${shortId(run.id)} cancelled`, "ok");
    if (action === "retry" && state.transcript) state.transcript.pinned = false;
    scheduleRefresh(0);
    scheduleDetail(0);
  } catch (error) {
    showError(error);
  }
}

// Archive is sent at once; Undo unarchives (the task goes back to the step it left, with no
// entry work run and no agent started).
async function archiveTask(task) {
  state.confirmArchive = false;
  closeDetail({ refocus: false });
  const id = encodeURIComponent(task.id);
  try {
    await state.api.post(`/api/tasks/${id}/archive`);
  } catch (error) {
    showError(error);
    scheduleRefresh(0);
    return;
  }
  if (state.board) {
    state.board.tasks = state.board.tasks.filter((t) => t.id !== task.id);
    renderBoard();
  }
  scheduleRefresh(0);
  const undo = toast(`Archived “${task.title}”`, "ok", {
    label: "Undo",
    run: async () => {
      try {
        await state.api.post(`/api/tasks/${id}/unarchive`);
        // whichever board read draws the card first focuses it (an event's read may overtake ours)
        state.focusTask = task.id;
        await loadBoard();
        announce(`“${task.title}” is back`);
      } catch (error) {
        showError(error);
      }
    },
  });
  undo.querySelector("button").focus();
}

async function verdict(task, decisions, seat, value) {
  const box = $("verdict-comment");
  const comment = box ? box.value.trim() : "";
  try {
    const body = { task: task.id, step: decisions.step_id, participant: seat.id, verdict: value };
    if (comment) body.comment = comment;
    const result = await state.api.post("/api/decisions", body);
    if (box) box.value = "";
    const moved = result.transitioned ? ` — moved to ${stepName(result.to_step_id)}` : "";
    toast(`${profileName(seat.agent_profile_id)}: ${pretty(value)}${moved}`, "ok");
    await loadBoard();
    await loadDetail(task.id);
  } catch (error) {
    showError(error);
  }
}

// -- the transcript --------------------------------------------------------------------------


// Items in order, with a tool call's updates folded into its first row (its latest status
// shown) and only the latest plan drawn, where it was last sent.
function transcriptRows(items) {
  const rows = [];
  const tools = new Map();
  let plan = null;
  for (const item of [...items.values()].sort((a, b) => a.seq - b.seq)) {
    const data = item.data || {};
    if (item.kind === "usage") continue;
    if (item.kind === "tool_call") {
      const id = data.toolCallId || `seq${item.seq}`;
      const known = tools.get(id);
      if (known) {
        if (data.title) known.title = data.title;
        if (data.status) known.status = data.status;
        if (data.kind) known.toolKind = data.kind;
        continue;
      }
      const row = { key: `tool:${id}`, kind: "tool_call", title: data.title || item.text, status: data.status || "", toolKind: data.kind || "" };
      tools.set(id, row);
      rows.push(row);
      continue;
    }
    if (item.kind === "plan") {
      if (plan) rows.splice(rows.indexOf(plan), 1);
      plan = { key: "plan", kind: "plan", entries: data.entries || [], text: item.text };
      rows.push(plan);
      continue;
    }
    rows.push({ key: `seq:${item.seq}`, kind: item.kind, text: item.text, data });
  }
  return rows;
}

function renderTranscriptRow(row) {
  if (row.kind === "tool_call") {
    return h("li", { key: row.key, class: `item tool_call tool-${row.status || "pending"}` },
      h("span", { class: "tool-kind" }, row.toolKind || "tool"),
      h("span", { class: "tool-title", title: row.title || "" }, relativePaths(row.title, state.detail && state.detail.task.workspace) || "tool call"),
      h("span", { class: `pill tool-status status-${row.status || "pending"}` }, pretty(row.status || "pending")),
    );
  }
  if (row.kind === "plan") {
    const entries = row.entries.length ? row.entries : row.text.split("\n").map((line) => ({ content: line }));
    return h("li", { key: row.key, class: "item plan" },
      h("div", { class: "item-label" }, "Plan"),
      h("ol", {}, entries.map((e, i) => h("li", { key: `p${i}`, class: `plan-${e.status || "pending"}` },
        h("span", { class: "plan-status" }, e.status === "completed" ? "✓" : e.status === "in_progress" ? "▸" : "○"),
        " ", e.content || ""))),
    );
  }
  const label = { prompt: "Prompt", thought: "Thinking", permission: "Permission", log: "Log", output: "Output", stderr: "Stderr" }[row.kind];
  return h("li", { key: row.key, class: `item ${row.kind}` },
    label ? h("div", { class: "item-label" }, label) : null,
    h("div", { class: "item-text" }, row.kind === "permission" ? relativePaths(row.text, state.detail && state.detail.task.workspace) : row.text),
  );
}

function renderTranscript(runs) {
  const t = state.transcript;
  if (!t) return section("transcript", "Transcript", null, h("p", { class: "muted" }, "No turn yet."));
  const run = runs.find((r) => r.id === t.runId);
  const status = run ? run.status : t.status;
  const rows = transcriptRows(t.items);
  const head = h("p", { class: "muted small transcript-head" },
    `Run ${shortId(t.runId)} · `, h("span", { class: `pill run-${status}` }, status === "claimed" ? "running" : status),
    run ? ` · ${profileName(run.agent_profile_id)}` : null,
    t.pinned ? h("button", { type: "button", class: "link", onclick: () => { t.pinned = false; state.transcript = null; scheduleDetail(0); } }, "follow the latest") : null,
  );
  return section("transcript", "Transcript", null, head,
    rows.length ? h("ol", { class: "transcript", tabindex: "0", "aria-label": `Transcript of run ${shortId(t.runId)}` }, rows.map(renderTranscriptRow))
      : h("p", { class: "muted" }, status === "claimed" ? "The agent has said nothing yet." : "Nothing was kept for this run."));
}

// -- the other panel sections ----------------------------------------------------------------

function renderComments(task, comments) {
  const list = comments.length ? h("ul", { class: "rows comments" }, comments.map((c) => h("li", { key: c.id, class: "comment" },
    h("div", {}, h("b", {}, c.author || "someone"), h("span", { class: "muted small" }, ` · ${ago(c.created_at)}`),
      c.file ? h("code", { class: "comment-at" }, ` ${c.file}:${c.line}`) : null,
      h("div", { class: "comment-body" }, c.body)),
  ))) : h("p", { class: "muted" }, "No comments.");
  const form = h("form", {
    class: "comment-form", key: "comment-form",
    onsubmit: async (event) => {
      event.preventDefault();
      const box = $("comment-text");
      if (!box.value.trim()) return;
      try {
        await state.api.post(`/api/tasks/${encodeURIComponent(task.id)}/comments`, { body: box.value });
        box.value = "";
        toast("Comment added", "ok");
        scheduleDetail(0);
      } catch (error) {
        showError(error);
      }
    },
  }, h("textarea", { id: "comment-text", rows: "2", placeholder: "Add a comment…", "aria-label": "Comment" }),
  h("button", { type: "submit", needs: "operator" }, "Comment"));
  return [list, form];
}

const PATCH_LINES = 2000;
/* Lines of patch the page draws; the rest is cut, with a note (`task diff` has it all). */

// A patch line's place in the file it changes: the new side's number, for `+` and context
// lines (a `-` line has none there); what a click comments on (`task comment --file --line`).
function numberedPatch(lines) {
  let file = null;
  let next = 0;
  return lines.map((line) => {
    if (line.startsWith("diff --git")) {
      const m = / b\/(.*)$/.exec(line);
      file = m ? m[1] : null;
      return { line, kind: "meta" };
    }
    if (line.startsWith("index ") || line.startsWith("+++") || line.startsWith("---")
      || line.startsWith("new file") || line.startsWith("deleted file")) return { line, kind: "meta" };
    if (line.startsWith("@@")) {
      const m = /\+(\d+)/.exec(line);
      next = m ? Number(m[1]) : 0;
      return { line, kind: "hunk" };
    }
    if (line.startsWith("-")) return { line, kind: "del" };
    if (line.startsWith("\\")) return { line, kind: "meta" };
    const at = file && next ? next : null;
    if (next) next += 1;
    return { line, kind: line.startsWith("+") ? "add" : "ctx", file, at };
  });
}

function renderLanding(task) {
  const record = task.workspace || {};
  const merge = record.merge;
  const conflict = record.conflict;
  const workflow = state.board && state.board.workflow.id === task.workflow_id ? state.board.workflow : null;
  const out = [];
  if (merge) {
    out.push(h("p", { class: "landed", key: "landed" },
      h("span", { class: "pill m-done" }, "merged"),
      ` into ${merge.into} (${merge.strategy}) as `, h("code", {}, String(merge.commit).slice(0, 12)), ` · ${ago(merge.at)}`));
  }
  if (conflict) {
    out.push(h("p", { class: "conflict", key: "conflict", role: "status" },
      h("span", { class: "pill m-failed" }, "conflict"),
      ` merging into ${conflict.into}: `,
      ...conflict.paths.flatMap((p, i) => [i ? ", " : null, h("code", { class: "conflict-path" }, p)]).filter(Boolean)));
  }
  if (record.push) {
    out.push(h("p", { class: "muted small", key: "pushed" },
      `Pushed ${String(record.push.commit).slice(0, 12)} to ${record.push.remote} · ${ago(record.push.at)}`));
  }
  const id = encodeURIComponent(task.id);
  const run = async (what, path, body) => {
    try {
      const done = await state.api.post(path, body);
      toast(what === "merge" ? `Merged into ${done.into}` : `Pushed to ${done.remote}`, "ok");
      // the person's own checkout of the base was left as it was: say how to see the merge
      if (what === "merge" && done.notice) toast(done.notice, "ok");
    } catch (error) {
      showError(error);
    }
    scheduleDetail(0);
  };
  out.push(h("form", {
    class: "landing", key: "landing", "aria-label": "Land the change",
    onsubmit: (event) => {
      event.preventDefault();
      run("merge", `/api/tasks/${id}/merge`, { strategy: $("merge-strategy").value });
    },
  },
  h("label", { class: "field inline" }, h("span", {}, "Strategy"),
    h("select", { id: "merge-strategy" }, ["merge", "squash", "rebase"].map((s) => h("option", { value: s }, s)))),
  h("button", { type: "submit", id: "merge-button", needs: "admin" }, `Merge into ${record.base_branch || "base"}`),
  workflow && workflow.remote
    ? h("button", { type: "button", id: "push-button", needs: "admin", onclick: () => run("push", `/api/tasks/${id}/push`, {}) }, `Push to ${workflow.remote}`)
    : null));
  return out;
}

function renderLineForm(task) {
  const at = state.lineComment;
  if (!at || at.taskId !== task.id) return null;
  return h("form", {
    class: "comment-form line-comment", key: `line:${at.file}:${at.line}`, "aria-label": `Comment on ${at.file} line ${at.line}`,
    onsubmit: async (event) => {
      event.preventDefault();
      const box = $("line-comment-text");
      if (!box.value.trim()) return;
      try {
        await state.api.post(`/api/tasks/${encodeURIComponent(task.id)}/comments`, { body: box.value, file: at.file, line: at.line });
        state.lineComment = null;
        toast("Comment added", "ok");
        scheduleDetail(0);
      } catch (error) {
        showError(error);
      }
    },
  },
  h("p", { class: "muted small" }, "On ", h("code", {}, `${at.file}:${at.line}`)),
  h("textarea", { id: "line-comment-text", rows: "2", placeholder: "Comment on this line…", "aria-label": `Comment on ${at.file} line ${at.line}` }),
  h("button", { type: "submit", needs: "operator" }, "Comment"),
  h("button", { type: "button", class: "link", onclick: () => { state.lineComment = null; renderDetail(); } }, "Cancel"));
}

function renderChanges(task, diff) {
  if (diff.error) return h("p", { class: "muted" }, diff.error);
  const where = h("p", { class: "muted mono" }, `${diff.branch} against ${diff.base.slice(0, 10)}`);
  const landing = renderLanding(task);
  if (!diff.files.length) return h("div", { class: "changes" }, where, ...landing, h("p", { class: "muted" }, "No changes yet."));
  const files = h("ul", { class: "rows changed-files" }, diff.files.map((f) => h("li", { class: `changed ${f.status}`, key: f.path },
    h("span", { class: "mono path" }, f.path),
    h("span", { class: "status" }, f.status),
    h("span", { class: "add" }, `+${f.additions}`),
    h("span", { class: "del" }, `\u2212${f.deletions}`),
  )));
  const lines = diff.patch.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const pick = (file, line) => {
    state.lineComment = { taskId: task.id, file, line };
    renderDetail();
    const box = document.getElementById("line-comment-text");
    if (box) box.focus();
  };
  const drawn = numberedPatch(lines.slice(0, PATCH_LINES)).map((row) => {
    if (!row.at) return h("span", { class: `line ${row.kind}` }, row.line + "\n");
    return h("span", {
      class: `line ${row.kind} commentable`, role: "button", tabindex: "-1",
      "data-file": row.file, "data-line": String(row.at), title: `Comment on ${row.file} line ${row.at}`,
      onclick: () => pick(row.file, row.at),
      onkeydown: (event) => { if (event.key === "Enter") pick(row.file, row.at); },
    }, row.line + "\n");
  });
  const notes = [];
  if (lines.length > PATCH_LINES || diff.truncated) {
    notes.push(h("p", { class: "muted cut" },
      `Large diff: cut here; \`laneway task diff ${task.id}\` shows it whole.`));
  }
  return h("div", { class: "changes" }, where, ...landing, files,
    h("pre", { class: "patch", tabindex: "0", "aria-label": "Patch (click a line to comment on it)" }, ...drawn),
    renderLineForm(task), ...notes);
}

function renderEntry(entry) {
  const markers = entry.markers.length
    ? h("table", { class: "markers" },
      h("thead", {}, h("tr", {}, h("th", {}, "#"), h("th", {}, "action"), h("th", {}, "state"), h("th", {}, "why"))),
      h("tbody", {}, entry.markers.map((m) => h("tr", { class: `marker marker-${m.state}`, key: String(m.position) },
        h("td", { class: "mono" }, String(m.position)),
        h("td", {}, m.kind),
        h("td", {}, h("span", { class: `pill m-${m.state}` }, pretty(m.state))),
        h("td", { class: "cause" }, [m.reason ? pretty(m.reason) : null, m.cause !== null && m.cause !== undefined ? h("code", {}, typeof m.cause === "string" ? m.cause : JSON.stringify(m.cause)) : null].filter(Boolean)),
      ))))
    : h("p", { class: "muted" }, "No markers yet.");
  return h("div", { class: `entry${entry.terminal ? "" : " open"}`, key: entry.id },
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
  const standing = new Map(decisions.decisions.filter((d) => !d.superseded_at).map((d) => [d.participant_id, d]));
  const seats = decisions.seats.map((seat) => {
    const said = standing.get(seat.id);
    return h("li", { key: seat.id },
      h("span", {}, h("b", {}, profileName(seat.agent_profile_id)), h("span", { class: "muted" }, ` · ${seat.role}${seat.decision_required ? "" : " (no decision)"}`),
        said && said.comment ? h("div", { class: "muted small verdict-comment" }, said.comment) : null),
      seat.verdict ? h("span", { class: `pill verdict-${seat.verdict}` }, pretty(seat.verdict)) : h("span", { class: "pill waiting" }, seat.decision_required ? "waiting" : "—"),
    );
  });
  const history = decisions.decisions.filter((d) => d.superseded_at).length;
  // The rounds a new entry cleared stay readable: the reasons a reviewer sent the task back.
  const earlier = (decisions.earlier || []).slice().reverse().map((d) => h("li", { class: "earlier-verdict", key: d.id },
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
  const viewing = state.transcript && state.transcript.runId === run.id;
  const buttons = [];
  if (run.session_id && !viewing) {
    buttons.push(h("button", {
      type: "button", class: "small-button show-transcript", "aria-label": `Show the transcript of run ${shortId(run.id)}`,
      onclick: async () => {
        try {
          await showRun(run.id, true);
          renderDetail();
        } catch (error) {
          showError(error);
        }
      },
    }, "Transcript"));
  }
  if (LIVE_RUN.has(run.status)) {
    buttons.push(h("button", { type: "button", class: "small-button reject cancel-run", needs: "operator", "aria-label": `Cancel run ${shortId(run.id)}`, onclick: () => runAction(run, "cancel") }, "Cancel"));
  }
  if (RETRYABLE.has(run.status)) {
    buttons.push(h("button", { type: "button", class: "small-button retry-run", needs: "operator", "aria-label": `Retry run ${shortId(run.id)}`, onclick: () => runAction(run, "retry") }, "Retry"));
  }
  return h("li", { key: run.id, class: `run${viewing ? " viewing" : ""}`, dataset: { runId: run.id, status: run.status } },
    h("span", {}, h("b", {}, profileName(run.agent_profile_id)), h("span", { class: "muted" }, ` · ${pretty(run.reason)}`),
      run.error_message ? h("div", { class: "error-text" }, run.error_message) : null,
      buttons.length ? h("div", { class: "run-buttons" }, buttons) : null),
    h("span", { class: "right" }, h("span", { class: `pill run-${run.status}` }, run.status), h("span", { class: "muted small" }, ago(run.finished_at || run.claimed_at || run.requested_at))),
  );
}

function renderSession(session) {
  return h("li", { key: session.id },
    h("span", {}, h("b", {}, session.agent_profile_id ? profileName(session.agent_profile_id) : "external agent"),
      h("span", { class: "muted mono" }, ` · ${shortId(session.id)}`),
      session.error_message ? h("div", { class: "error-text" }, session.error_message) : null),
    h("span", { class: `pill s-${session.state.toLowerCase()}` }, pretty(session.state)),
  );
}

// -- creating a task -------------------------------------------------------------------------

function openCreate() {
  if (!state.board) return;
  const dialog = $("create-dialog");
  const first = steps().find((s) => s.is_start_step) || steps()[0];
  patch($("create-step"), steps().map((s) => h("option", { value: s.id, key: s.id }, s.is_start_step ? `${s.name} (start step)` : s.name)));
  $("create-form").reset();
  if (first) $("create-step").value = first.id;
  dialog.showModal();
  $("create-title").focus();
}

async function submitCreate(event) {
  event.preventDefault();
  const title = $("create-title").value.trim();
  if (!title) return;
  const body = { workflow: state.workflowId, title, step: $("create-step").value };
  const description = $("create-description").value.trim();
  if (description) body.description = description;
  try {
    const made = await state.api.post("/api/tasks", body);
    $("create-dialog").close();
    toast(`Created “${made.title}” in ${stepName(made.workflow_step_id)}`, "ok");
    await loadBoard();
    openDetail(made.id);
  } catch (error) {
    showError(error);
  }
}

// -- calling the person ----------------------------------------------------------------------

// While the page is open a person is told, by the browser, when a task starts waiting for them
// (`task.needs_person`); the tab's title counts the tasks that wait. The page asks for the
// permission once (remembered in localStorage), never again after an answer.
const NOTIFY_ASKED_KEY = "laneway.notifications.asked";
const PAGE_TITLE = "laneway board";
const WAITS_FOR = {
  permission: "its agent asks for permission",
  question: "its agent asks a question",
  verdict: "it waits for a verdict",
  failure: "its agent failed",
  blocked: "an unfinished task blocks it",
};

function canNotify() {
  return typeof window.Notification === "function";
}

function askToNotify() {
  if (!canNotify() || Notification.permission !== "default") return;
  if (localStorage.getItem(NOTIFY_ASKED_KEY)) return;
  localStorage.setItem(NOTIFY_ASKED_KEY, "1");
  Promise.resolve(Notification.requestPermission()).catch(() => {});
}

function trackWait(data, waiting) {
  const reasons = state.personWaits.get(data.task_id) || new Set();
  if (waiting) reasons.add(data.reason);
  else reasons.delete(data.reason);
  if (reasons.size) state.personWaits.set(data.task_id, reasons);
  else state.personWaits.delete(data.task_id);
  showWaitingCount();
}

function showWaitingCount() {
  const ids = new Set(state.personWaits.keys());
  if (state.board) {
    for (const task of state.board.tasks) {
      if (needsPerson(task) || (task.badges.needs_person || []).length) ids.add(task.id);
    }
  }
  document.title = ids.size ? `(${ids.size}) ${PAGE_TITLE}` : PAGE_TITLE;
}

async function callPerson(data) {
  if (!canNotify() || Notification.permission !== "granted") return;
  let title = taskTitle(data.task_id);
  if (!title) {
    try {
      title = (await state.api.get(`/api/tasks/${encodeURIComponent(data.task_id)}`)).title;
    } catch {
      title = shortId(data.task_id);
    }
  }
  const what = WAITS_FOR[data.reason] || "it waits for a person";
  const body = data.reason === "failure" && data.error ? `${what}: ${data.error}` : what;
  const note = new Notification(`“${title}” needs you`, { body, tag: `laneway-${data.task_id}-${data.reason}` });
  note.onclick = () => {
    window.focus();
    note.close();
    openDetail(data.task_id);
  };
}

// -- live updates ----------------------------------------------------------------------------

function taskTitle(taskId) {
  const task = state.board && state.board.tasks.find((t) => t.id === taskId);
  return task ? task.title : null;
}

function onEvent(event) {
  const data = event.data;
  const type = event.type;
  if (state.board) {
    const mine = data.workflow_id === undefined || data.workflow_id === state.workflowId
      || state.board.tasks.some((t) => t.id === data.task_id);
    // a transcript item changes nothing on the board; its run's start and end do
    if (mine && type !== "agent.item") scheduleRefresh();
    const title = taskTitle(data.task_id);
    if (title && (type === "permission.requested" || type === "question.asked")) announce(`“${title}”: its agent waits for a person`);
    if (title && type === "run.failed") announce(`“${title}”: a run failed`);
  }
  if (state.openTaskId && data.task_id === state.openTaskId) {
    const t = state.transcript;
    if (type === "agent.item") {
      state.runSessions.set(data.run_id, data.session_id);
      if (t && data.run_id === t.runId) transcriptRefresh(30);
      else if (!t || !t.pinned) scheduleDetail();
    } else {
      scheduleDetail();
    }
  }
  if (type === "task.deleted" && data.task_id === state.openTaskId) closeDetail();
  if (type === "task.needs_person") {
    trackWait(data, true);
    callPerson(data).catch(() => {});
  } else if (type === "task.needs_person_ended") {
    trackWait(data, false);
  }
}

function onStreamState(value) {
  const live = $("live");
  live.dataset.state = value;
  live.querySelector(".label").textContent = { live: "live", reconnecting: "reconnecting…", unauthorized: "token refused" }[value] || value;
  if (value === "live") {
    scheduleRefresh(0); // catch up with anything missed while away
    scheduleDetail(0);
  }
}

// -- start -----------------------------------------------------------------------------------

function readToken() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search); // out of the address bar
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

// Who is signed in, and a way out; what the role may not do is disabled and says why.
function showWho() {
  const me = state.me;
  $("who-name").textContent = `${me.name} · ${me.role}`;
  $("who").title = `Signed in as ${me.actor}`;
  $("who").hidden = false;
  const create = $("new-task");
  create.disabled = !allows("operator");
  create.title = allows("operator") ? "" : refusal("operator");
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
}

function askToken(message) {
  const dialog = $("token-dialog");
  if (message) dialog.querySelector("p").textContent = message;
  if (!dialog.open) dialog.showModal();
}

async function start(token) {
  state.api = createApi(token);
  try {
    state.me = await state.api.get("/api/me");
    showWho();
    await loadWorkflows();
    await loadBoard();
  } catch (error) {
    showError(error);
    return;
  }
  state.api.stream(onEvent, onStreamState);
  askToNotify();
}

// On a phone the panel is a full-width sheet: it ends above the toasts, so none covers it.
function fitToasts() {
  const box = $("toasts").getBoundingClientRect();
  const room = $("toasts").childElementCount ? Math.ceil(window.innerHeight - box.top) : 0;
  document.body.style.setProperty("--toast-space", `${Math.max(0, room)}px`);
}

function init() {
  readFilters();
  new MutationObserver(fitToasts).observe($("toasts"), { childList: true });
  window.addEventListener("resize", fitToasts);
  $("workflow").addEventListener("change", (event) => {
    state.workflowId = event.target.value;
    sessionStorage.setItem(WORKFLOW_KEY, state.workflowId);
    state.filters.step = "";
    writeFilters();
    closeDetail({ refocus: false });
    loadBoard().catch(showError);
  });
  $("search").addEventListener("input", onFilter);
  $("filters").addEventListener("submit", (event) => event.preventDefault());
  for (const id of ["filter-step", "filter-state", "filter-agent", "filter-person"]) $(id).addEventListener("change", onFilter);
  $("new-task").addEventListener("click", openCreate);
  $("create-form").addEventListener("submit", submitCreate);
  $("create-cancel").addEventListener("click", () => $("create-dialog").close());
  $("detail-close").addEventListener("click", () => closeDetail());
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !state.openTaskId) return;
    if (document.querySelector("dialog[open]")) return; // the dialog closes itself first
    closeDetail();
  });
  $("sign-out").addEventListener("click", signOut);
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
