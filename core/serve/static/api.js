// The board page's only way to the server: JSON calls and the event stream, both with the
// bearer token. EventSource cannot send an Authorization header, so the stream is read with
// fetch() and parsed here (Server-Sent Events: id / event / data lines, blank line ends one).

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function createApi(token) {
  const headers = { Authorization: `Bearer ${token}` };

  async function call(method, path, body) {
    const init = { method, headers: { ...headers } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let value = null;
    try {
      value = text ? JSON.parse(text) : null;
    } catch {
      value = null;
    }
    if (!response.ok) {
      const message = value && value.error ? value.error : `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, message);
    }
    return value;
  }

  return {
    get: (path) => call("GET", path),
    post: (path, body) => call("POST", path, body ?? {}),
    patch: (path, body) => call("PATCH", path, body),
    del: (path) => call("DELETE", path),
    stream: (onEvent, onState) => openStream(headers, onEvent, onState),
  };
}

// Reads /api/events for as long as the page lives: reconnects with Last-Event-ID after a drop
// (the server replays what was missed), reports "live" / "reconnecting" through onState.
function openStream(headers, onEvent, onState) {
  let lastId = null;
  let stopped = false;
  let controller = null;

  async function once() {
    controller = new AbortController();
    const h = { ...headers, Accept: "text/event-stream" };
    if (lastId !== null) h["Last-Event-ID"] = String(lastId);
    const response = await fetch("/api/events", { headers: h, signal: controller.signal });
    if (!response.ok || !response.body) throw new ApiError(response.status, "event stream refused");
    onState("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = parseBlock(block);
        if (event) {
          if (event.id !== null) lastId = event.id;
          onEvent(event);
        }
      }
    }
  }

  (async () => {
    let delay = 500;
    while (!stopped) {
      try {
        await once();
        delay = 500;
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.status === 401) {
          onState("unauthorized");
          return;
        }
      }
      if (stopped) return;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 5000);
    }
  })();

  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}

function parseBlock(block) {
  let id = null;
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") id = Number(value);
    else if (field === "event") type = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  try {
    return { id, type, data: JSON.parse(data.join("\n")) };
  } catch {
    return null;
  }
}
