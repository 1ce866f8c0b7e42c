// BranchTree front end: an outline of the message tree (segments of linear runs, indented by
// branch depth), compaction brackets in a gutter, and the selected branch's path beside it.
// Plain ESM for anywidget. Rows are built as one HTML string: 10,000 rows draw in one pass.

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

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (text) => String(text ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
const LANES = 4;
const ROW_HEIGHT = 20; // px; every outline row (message or gap) has exactly this height
const OVERSCAN = 30; // rows drawn above and below the visible ones
const MAX_INDENT = 24;
const ROLE_LETTER = { user: "U", assistant: "A", system: "S", tool: "T" };

function markSet(marks) {
  // [[segment, upto], ...] -> Map(segment -> upto)
  const map = new Map();
  for (const [segment, upto] of marks || []) map.set(segment, upto);
  return map;
}

function laneCoverage(compactions) {
  // Map(segment -> [{lane, start, stop, first, last, c}]) for drawing brackets.
  const bySegment = new Map();
  compactions.forEach((c, k) => {
    const pieces = c.pieces || [];
    pieces.forEach((piece, p) => {
      const [segment, start, stop] = piece;
      const entry = { lane: k % LANES, start, stop, first: p === 0 ? start : -1, last: p === pieces.length - 1 ? stop - 1 : -1, c };
      if (!bySegment.has(segment)) bySegment.set(segment, []);
      bySegment.get(segment).push(entry);
    });
  });
  return bySegment;
}

function gutter(covers, from, to) {
  // Lanes for rows [from, to) of a segment: a bar where covered, caps at the overlay's ends.
  let html = '<span class="al-lanes">';
  for (let lane = 0; lane < LANES; lane++) {
    let cls = "";
    let title = "";
    for (const cover of covers) {
      if (cover.lane !== lane || cover.stop <= from || cover.start >= to) continue;
      cls = " al-on";
      if (cover.first >= from && cover.first < to) cls += " al-top";
      if (cover.last >= from && cover.last < to) cls += " al-bottom";
      title = `compaction of ${cover.c.count} messages: ${cover.c.summary}`;
    }
    html += `<span class="al-lane al-lane-${lane}${cls}"${title ? ` title="${esc(title)}"` : ""}></span>`;
  }
  return html + "</span>";
}

function render({ model, el }) {
  const started = performance.now();
  const { request, dispose } = requester(model);
  const root = document.createElement("div");
  root.className = "agentlab-tree";
  root.innerHTML = `
    <div class="al-head"><span class="al-title">Branch tree</span><span class="al-stats" data-role="tree-stats"></span>
      <span class="al-legend"><span class="al-swatch al-cur"></span>current branch <span class="al-swatch al-sel"></span>selected
      <span class="al-swatch al-cmp"></span>compaction</span></div>
    <div class="al-error" data-role="tree-error" hidden></div>
    <div class="al-body">
      <div class="al-outline" data-role="outline"></div>
      <div class="al-path" data-role="path"><div class="al-path-head"></div><div class="al-path-list"></div></div>
    </div>`;
  el.append(root);
  const outline = root.querySelector(".al-outline");
  const stats = root.querySelector(".al-stats");
  const error = root.querySelector(".al-error");
  const pathHead = root.querySelector(".al-path-head");
  const pathList = root.querySelector(".al-path-list");
  let pathFor = null;
  let firstDone = false;

  function showError(message) {
    error.textContent = message || "";
    error.hidden = !message;
  }

  // The outline is virtual: every row has the same height, and only the rows in view (plus a margin)
  // are in the DOM. A 10,000-row tree costs a flat array in memory and a few dozen elements.
  let rows = [];
  let context = null;
  let parsedFrom = null;
  let parsed = [];

  function parsedSegments() {
    // Parsed once per plan (selection changes redraw without re-parsing).
    const text = model.get("segments_json") || "[]";
    if (text !== parsedFrom) { parsed = JSON.parse(text); parsedFrom = text; }
    return parsed;
  }

  function flatten() {
    const layout = parsedSegments();
    const marks = model.get("marks") || {};
    const current = markSet(marks.current);
    const selected = markSet(marks.selected);
    const covers = laneCoverage(model.get("compactions") || []);
    context = {
      currentLeaf: model.get("current_leaf"),
      selectedLeaf: model.get("selected_leaf"),
      selectedId: model.get("selected_id"),
    };
    rows = [];
    for (const seg of layout) {
      const shared = {
        s: seg.s, d: seg.d, covers: covers.get(seg.s) || [],
        onCurrent: current.get(seg.s) ?? 0, onSelected: selected.get(seg.s) ?? 0,
      };
      for (const item of seg.items) rows.push({ seg: shared, item });
    }
  }

  function rowHtml({ seg, item }) {
    const indent = `<span class="al-indent" style="width:${Math.min(seg.d, MAX_INDENT) * 14}px"></span>` +
      (seg.d > MAX_INDENT ? `<span class="al-deep">↳${seg.d}</span>` : "");
    if (item.gap) {
      const [start, stop] = item.gap;
      const cls = `al-gap${start < seg.onCurrent ? " al-on-current" : ""}${start < seg.onSelected ? " al-on-selected" : ""}`;
      return `<div class="${cls}" data-seg="${seg.s}" data-start="${start}" data-stop="${stop}">` +
        gutter(seg.covers, start, stop) + indent +
        `<span class="al-dots">⋯ ${(stop - start).toLocaleString()} messages</span>` +
        `<button class="al-expand" type="button">show ${Math.min(stop - start, 500)}</button></div>`;
    }
    const i = item.i;
    let cls = "al-row";
    if (i < seg.onCurrent) cls += " al-on-current";
    if (i < seg.onSelected) cls += " al-on-selected";
    if (item.id === context.selectedLeaf) cls += " al-selected-leaf";
    if (item.id === context.selectedId) cls += " al-selected";
    const role = ROLE_LETTER[item.r] || (item.r || "?").slice(0, 1).toUpperCase();
    let chips = "";
    if (item.k > 1) chips += `<span class="al-chip al-fork" title="the conversation branches here">${item.k} branches</span>`;
    if (item.id === context.currentLeaf) chips += '<span class="al-chip al-current">● current</span>';
    for (const cover of seg.covers) {
      if (cover.first === i) chips += `<span class="al-chip al-compact" title="${esc(cover.c.summary)}">⟦ compacted ×${cover.c.count}</span>`;
    }
    return `<div class="${cls}" data-id="${esc(item.id)}" data-seg="${seg.s}" data-i="${i}">` +
      gutter(seg.covers, i, i + 1) + indent +
      `<span class="al-role al-role-${esc(item.r)}" title="${esc(item.r)}">${esc(role)}</span>` +
      `<span class="al-text">${esc(item.t) || "<i>(no text)</i>"}</span>${chips}</div>`;
  }

  const spacer = document.createElement("div");
  spacer.className = "al-spacer";
  const windowEl = document.createElement("div");
  windowEl.className = "al-window";
  spacer.append(windowEl);
  outline.append(spacer);
  let painted = [-1, -1];

  function paintWindow(force) {
    const height = outline.clientHeight || 420;
    const first = Math.max(0, Math.floor(outline.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(rows.length, Math.ceil((outline.scrollTop + height) / ROW_HEIGHT) + OVERSCAN);
    if (!force && first === painted[0] && last === painted[1]) return;
    painted = [first, last];
    spacer.style.height = `${rows.length * ROW_HEIGHT}px`;
    windowEl.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
    windowEl.innerHTML = rows.slice(first, last).map(rowHtml).join("");
  }

  let scrollQueued = false;
  outline.addEventListener("scroll", () => {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => { scrollQueued = false; paintWindow(false); });
  });

  function drawOutline() {
    flatten();
    paintWindow(true);
    root.dataset.rows = String(rows.length);
    const s = model.get("stats") || {};
    stats.textContent = ` · session "${s.session ?? ""}" · ${(s.messages || 0).toLocaleString()} messages · ` +
      `${s.branch_points || 0} branch points · ${s.leaves || 0} leaves · ${s.compactions || 0} compactions`;
  }

  async function drawPath() {
    const leaf = model.get("selected_leaf");
    if (!leaf) { pathHead.textContent = "No messages yet."; pathList.replaceChildren(); return; }
    if (leaf === pathFor) return;
    pathFor = leaf;
    const reply = await request("path", { leaf, limit: 80 });
    if (reply.error) { showError(reply.error); return; }
    if (pathFor !== leaf) return; // a newer selection is on its way
    const { total, messages } = reply.result;
    pathHead.innerHTML = `<b>Selected branch</b> → <code>${esc(leaf.slice(0, 12))}</code> · ${total} messages` +
      (total > messages.length ? ` (last ${messages.length} shown)` : "") + " · overlays applied";
    pathList.innerHTML = messages.map((m) =>
      `<div class="al-msg${m.compaction ? " al-msg-compaction" : ""}" data-id="${esc(m.id)}">` +
      `<span class="al-role al-role-${esc(m.role)}">${esc(ROLE_LETTER[m.role] || m.role.slice(0, 1).toUpperCase())}</span>` +
      `<span class="al-msg-text">${m.compaction ? "<b>summary:</b> " : ""}${esc(m.text)}</span></div>`).join("");
    pathList.scrollTop = pathList.scrollHeight;
  }

  function draw() {
    drawOutline();
    showError(model.get("error"));
    pathFor = null; // contents of the branch may have changed
    drawPath();
  }

  outline.addEventListener("click", async (event) => {
    const button = event.target.closest(".al-expand");
    if (button) {
      const gap = button.closest(".al-gap");
      const reply = await request("expand", { segment: Number(gap.dataset.seg), start: Number(gap.dataset.start), stop: Number(gap.dataset.stop) });
      if (reply.error) showError(reply.error);
      return;
    }
    const row = event.target.closest(".al-row");
    if (!row) return;
    const reply = await request("select", { id: row.dataset.id });
    if (reply.error) showError(reply.error);
  });

  // One traitlet update changes several traits at once: redraw once per tick, not once per trait.
  let queued = null;
  function schedule(full) {
    if (queued !== null) { queued = queued || full; return; }
    queued = full;
    Promise.resolve().then(() => {
      const wasFull = queued;
      queued = null;
      if (wasFull) draw(); else { drawOutline(); drawPath(); }
    });
  }
  const onLayout = () => schedule(true);
  const onSelection = () => schedule(false);
  const onError = () => showError(model.get("error"));
  model.on("change:segments_json", onLayout);
  model.on("change:compactions", onLayout);
  model.on("change:marks", onSelection);
  model.on("change:selected_leaf", onSelection);
  model.on("change:error", onError);
  draw();
  if (!firstDone) {
    firstDone = true;
    // Time to the first painted outline, read by the browser benchmark.
    requestAnimationFrame(() => setTimeout(() => {
      root.dataset.firstRenderMs = String(Math.round(performance.now() - started));
      root.dataset.paintedAt = String(Date.now()); // epoch ms: comparable with the kernel's time.time()
    }, 0));
  }
  return () => {
    dispose();
    model.off("change:segments_json", onLayout);
    model.off("change:compactions", onLayout);
    model.off("change:marks", onSelection);
    model.off("change:selected_leaf", onSelection);
    model.off("change:error", onError);
  };
}

export default { render };
