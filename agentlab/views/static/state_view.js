// StateView front end: the agent's state as a collapsible tree, editable through the kernel.
// Plain ESM for anywidget (no bundler). The view never writes the "value" trait itself: an edit
// is a request, and whatever the kernel stores (or refuses) comes back through the traits.

function requester(model) {
  const pending = new Map();
  const onMessage = (msg) => {
    if (!msg || msg.kind !== "response" || !pending.has(msg.id)) return;
    const resolve = pending.get(msg.id);
    pending.delete(msg.id);
    resolve(msg);
  };
  model.on("msg:custom", onMessage);
  let counter = 0;
  function request(method, params) {
    counter += 1;
    const id = `${Date.now().toString(36)}-${counter}-${Math.random().toString(36).slice(2)}`;
    return new Promise((resolve) => {
      pending.set(id, resolve);
      model.send({ kind: "request", id, method, params });
    });
  }
  return { request, dispose: () => model.off("msg:custom", onMessage) };
}

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function formatStamp(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;
}

function setIn(root, path, leaf) {
  if (path.length === 0) return leaf;
  const copy = structuredClone(root);
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key];
  node[path[path.length - 1]] = leaf;
  return copy;
}

function parseLoose(text) {
  // A researcher types 42, true, null, [1,2] or plain words: plain words become a string.
  try { return JSON.parse(text); } catch { return text; }
}

const MAX_CHILDREN = 200;

function render({ model, el }) {
  const { request, dispose } = requester(model);
  const collapsed = new Set(); // JSON paths the user folded
  const expanded = new Set(); // deep JSON paths the user opened
  let editingPath = null;
  // An error found in the page itself ("Not JSON"): shown until Cancel, the next edit, or an accepted one.
  // The kernel's refusals travel in the "error" trait and are shown when there is no local error.
  let localError = "";

  const title = h("span", { class: "al-title" });
  const meta = h("span", { class: "al-meta", "data-role": "state-meta" });
  const rawButton = h("button", { class: "al-button", type: "button" }, "Edit JSON");
  const error = h("div", { class: "al-error", "data-role": "state-error", hidden: "" });
  const tree = h("div", { class: "al-tree", "data-role": "state-tree" });
  const textarea = h("textarea", { class: "al-textarea", spellcheck: "false" });
  const save = h("button", { class: "al-button al-primary", type: "button" }, "Save");
  const cancel = h("button", { class: "al-button", type: "button" }, "Cancel");
  const editor = h("div", { class: "al-editor", hidden: "" }, textarea, h("div", {}, save, cancel));
  const root = h("div", { class: "agentlab-state" },
    h("div", { class: "al-head" }, title, meta, rawButton), error, tree, editor);
  el.append(root);

  function showError() {
    const message = localError || model.get("error");
    error.textContent = message || "";
    error.hidden = !message;
  }

  async function submit(next) {
    localError = "";
    const reply = await request("set_state", { state: next });
    if (reply.error) localError = reply.error;
    showError();
    return reply;
  }

  function leaf(value, path) {
    const type = value === null ? "null" : typeof value;
    const shown = type === "string" ? JSON.stringify(value) : String(value);
    const span = h("span", { class: `al-value al-type-${type}`, title: model.get("readonly") ? "" : "click to edit" }, shown);
    if (!model.get("readonly")) {
      span.addEventListener("click", () => { editingPath = JSON.stringify(path); localError = ""; draw(); });
    }
    if (editingPath === JSON.stringify(path)) {
      const input = h("input", { class: "al-input", value: type === "string" ? value : JSON.stringify(value) });
      input.addEventListener("keydown", async (event) => {
        if (event.key === "Escape") { editingPath = null; draw(); }
        if (event.key !== "Enter") return;
        editingPath = null;
        await submit(setIn(model.get("value"), path, parseLoose(input.value)));
        draw();
      });
      setTimeout(() => input.focus(), 0);
      return input;
    }
    return span;
  }

  function node(key, value, path, depth) {
    const label = key === null ? null : h("span", { class: "al-key" }, `${key}`);
    if (value === null || typeof value !== "object") {
      return h("div", { class: "al-row", "data-path": JSON.stringify(path) }, label, label ? ": " : null, leaf(value, path));
    }
    const isArray = Array.isArray(value);
    const entries = isArray ? value.map((v, i) => [i, v]) : Object.entries(value);
    const id = JSON.stringify(path);
    const open = depth < 2 ? !collapsed.has(id) : expanded.has(id);
    const summary = h("summary", {}, label, label ? " " : null,
      h("span", { class: "al-count" }, isArray ? `[${entries.length}]` : `{${entries.length}}`));
    const details = h("details", { class: "al-branch", "data-path": id });
    if (open) details.setAttribute("open", "");
    details.addEventListener("toggle", () => {
      const set = depth < 2 ? collapsed : expanded;
      if ((depth < 2) !== details.open) set.add(id); else set.delete(id);
    });
    details.append(summary);
    const children = h("div", { class: "al-children" });
    for (const [childKey, child] of entries.slice(0, MAX_CHILDREN)) {
      children.append(node(childKey, child, [...path, childKey], depth + 1));
    }
    if (entries.length > MAX_CHILDREN) {
      children.append(h("div", { class: "al-more" }, `… ${entries.length - MAX_CHILDREN} more (use Edit JSON)`));
    }
    details.append(children);
    return details;
  }

  function draw() {
    const readonly = model.get("readonly");
    title.textContent = `State · ${model.get("agent_name")}${readonly ? " (readonly)" : ""}`;
    meta.textContent = model.get("has_state")
      ? `changed ${formatStamp(model.get("updated_at"))} by ${model.get("source")}`
      : "no state set";
    rawButton.hidden = readonly;
    showError();
    tree.replaceChildren(model.get("has_state") ? node(null, model.get("value"), [], 0) : h("div", { class: "al-empty" }, "—"));
  }

  rawButton.addEventListener("click", () => {
    textarea.value = JSON.stringify(model.get("value"), null, 2);
    localError = "";
    showError();
    editor.hidden = false;
    tree.hidden = true;
  });
  cancel.addEventListener("click", () => {
    localError = "";
    showError();
    editor.hidden = true;
    tree.hidden = false;
  });
  save.addEventListener("click", async () => {
    let next;
    try { next = JSON.parse(textarea.value); } catch (exc) {
      localError = `Not JSON: ${exc.message}`;
      showError();
      return;
    }
    await submit(next);
    // Accepted or refused, the tree now shows what is stored (a refusal keeps its message above).
    editor.hidden = true;
    tree.hidden = false;
  });

  const redraw = () => draw();
  for (const name of ["value", "has_state", "updated_at", "source", "readonly", "revision", "error"]) {
    model.on(`change:${name}`, redraw);
  }
  draw();
  return () => {
    dispose();
    for (const name of ["value", "has_state", "updated_at", "source", "readonly", "revision", "error"]) {
      model.off(`change:${name}`, redraw);
    }
  };
}

export default { render };
