// BranchTree front end: a virtual outline of the message tree (rows fetched from the kernel a page at a time),
// a toolbar (search, jump to the current leaf or the selection) and a side panel with tabs: the selected branch,
// two branches compared from their fork point, the compactions, the search hits.
// Plain ESM for anywidget. Only the rows in view (plus a margin) are ever asked for or put in the DOM.

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
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString());
const LANES = 4;
const ROW_HEIGHT = 20; // px; every outline row (message or gap) has exactly this height
const OVERSCAN = 30; // rows drawn above and below the visible ones
const PAGE = 100; // rows per request; equals FIRST_PAGE in branch_tree.py (page 0 comes with the widget)
const MAX_INDENT = 24;
const ROLE_LETTER = { user: "U", assistant: "A", system: "S", tool: "T" };
const roleLetter = (role) => ROLE_LETTER[role] || String(role || "?").slice(0, 1).toUpperCase();

function gutter(lanes) {
  // Lanes of compaction brackets: a bar where covered, caps at an overlay's first and last rows.
  const byLane = new Map((lanes || []).map((l) => [l[0], l]));
  let html = '<span class="al-lanes">';
  for (let lane = 0; lane < LANES; lane++) {
    const entry = byLane.get(lane);
    const cls = entry ? ` al-on${entry[1] & 1 ? " al-top" : ""}${entry[1] & 2 ? " al-bottom" : ""}` : "";
    html += `<span class="al-lane al-lane-${lane}${cls}"${entry ? ` data-compaction="${entry[2]}"` : ""}></span>`;
  }
  return html + "</span>";
}

function highlight(text, words) {
  // Marks the query's words in a row's text (the search itself is the kernel's BM25; this only shows where).
  const escaped = esc(text);
  if (!words.length) return escaped;
  const pattern = new RegExp(`(${words.map((w) => esc(w).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`, "gi");
  return escaped.replace(pattern, "<mark>$1</mark>");
}

function partHtml(part) {
  const more = part.n > (part.k === "call" ? part.input.length : part.text.length);
  const tail = more ? `<span class="al-cut">… ${num(part.n)} characters</span>` : "";
  if (part.k === "text") return `<div class="al-part al-part-text">${esc(part.text)}${tail}</div>`;
  if (part.k === "thinking") {
    return `<details class="al-part al-part-thinking"><summary>thinking</summary>${esc(part.text)}${tail}</details>`;
  }
  if (part.k === "call") {
    return `<div class="al-part al-part-call"><span class="al-badge al-badge-call">tool call</span> ` +
      `<b>${esc(part.name)}</b>${part.id ? ` <code>${esc(part.id)}</code>` : ""}` +
      `<pre>${esc(part.input)}${tail}</pre></div>`;
  }
  if (part.k === "result") {
    const kind = part.error ? "error" : "result";
    return `<div class="al-part al-part-result${part.error ? " al-part-error" : ""}">` +
      `<span class="al-badge al-badge-${kind}">tool ${kind}</span>${part.name ? ` <b>${esc(part.name)}</b>` : ""}` +
      `${part.id ? ` <code>${esc(part.id)}</code>` : ""}<pre>${esc(part.text)}${tail}</pre></div>`;
  }
  return `<div class="al-part al-part-other"><span class="al-badge">${esc(part.kind)}</span> <code>${esc(part.text)}</code>${tail}</div>`;
}

function messageHtml(m) {
  const parts = m.parts.length ? m.parts.map(partHtml).join("") : '<div class="al-none">(no parts)</div>';
  const expand = m.cut ? `<button class="al-full" type="button" data-id="${esc(m.id)}">show all</button>` : "";
  const locate = m.compaction ? "" :
    `<button class="al-locate" type="button" data-id="${esc(m.id)}" title="scroll the outline to this message">locate</button>`;
  return `<div class="al-msg${m.compaction ? " al-msg-compaction" : ""}" data-id="${esc(m.id)}">` +
    `<div class="al-msg-head"><span class="al-role al-role-${esc(m.role)}" title="${esc(m.role)}">${esc(roleLetter(m.role))}</span>` +
    `${m.compaction ? '<b class="al-summary-label">compaction summary</b>' : `<code class="al-msg-id">${esc(m.id)}</code>`}` +
    `${locate}${expand}</div><div class="al-msg-body">${parts}</div></div>`;
}

function render({ model, el }) {
  const started = performance.now();
  const { request, dispose } = requester(model);
  const root = document.createElement("div");
  root.className = "agentlab-tree";
  root.innerHTML = `
    <div class="al-head"><span class="al-title">Branch tree</span><span class="al-stats" data-role="tree-stats"></span>
      <span class="al-legend"><span class="al-swatch al-cur"></span>current branch <span class="al-swatch al-sel"></span>selected
      <span class="al-swatch al-hit-swatch"></span>search hit <span class="al-swatch al-cmp"></span>compaction</span></div>
    <div class="al-toolbar">
      <input class="al-search" type="search" placeholder="Search messages (the session's BM25 search)" data-role="tree-search">
      <select class="al-mode" title="how the words must match"><option value="all">all words</option>
        <option value="any">any word</option><option value="phrase">phrase</option></select>
      <button class="al-prev" type="button" title="previous hit">↑</button><span class="al-hitcount" data-role="hit-count"></span>
      <button class="al-next" type="button" title="next hit">↓</button>
      <span class="al-spring"></span>
      <button class="al-jump-current" type="button" title="scroll to the current leaf">⤓ current leaf</button>
      <button class="al-jump-selected" type="button" title="scroll to the selected message">selected</button>
    </div>
    <div class="al-error" data-role="tree-error" hidden></div>
    <div class="al-body">
      <div class="al-outline" data-role="outline"></div>
      <div class="al-side">
        <div class="al-tabs">
          <button type="button" data-tab="branch" class="al-tab al-active">Selected branch</button>
          <button type="button" data-tab="compare" class="al-tab">Compare</button>
          <button type="button" data-tab="compactions" class="al-tab" data-role="compactions-tab">Compactions</button>
          <button type="button" data-tab="hits" class="al-tab" data-role="hits-tab">Hits</button>
        </div>
        <div class="al-panel" data-panel="branch" data-role="path"><div class="al-path-head"></div><div class="al-path-list"></div></div>
        <div class="al-panel" data-panel="compare" data-role="compare" hidden></div>
        <div class="al-panel" data-panel="compactions" data-role="compactions" hidden></div>
        <div class="al-panel" data-panel="hits" data-role="hits" hidden></div>
      </div>
    </div>`;
  el.append(root);
  const $ = (selector) => root.querySelector(selector);
  const outline = $(".al-outline");
  const body = $(".al-body");
  const stats = $(".al-stats");
  const error = $(".al-error");
  const pathHead = $(".al-path-head");
  const pathList = $(".al-path-list");
  const comparePanel = $("[data-panel=compare]");
  const compactionPanel = $("[data-panel=compactions]");
  const hitPanel = $("[data-panel=hits]");
  const searchBox = $(".al-search");
  const modeBox = $(".al-mode");
  const hitCount = $(".al-hitcount");
  let localError = "";
  let firstPainted = false;

  function showError(message) {
    if (message !== undefined) localError = message;
    const text = localError || model.get("error");
    error.textContent = text || "";
    error.hidden = !text;
  }
  async function call(method, params) {
    const reply = await request(method, params);
    if (reply.error) { showError(reply.error); return null; }
    return reply.result;
  }

  // -- the outline: fixed-height rows, fetched a page at a time for the current version ---------------------------
  let version = model.get("version");
  let pages = new Map();
  try { // the rows the widget was built with: the first paint needs no request while they are current
    const first = JSON.parse(model.get("first_page") || "null");
    if (first && first.version === version) pages.set(0, first.rows);
  } catch { /* a malformed first page only costs a request */ }
  let stalePages = new Map(); // the previous version's rows, drawn until the new ones arrive (no flicker)
  const pending = new Set();
  let searchWords = [];

  const spacer = document.createElement("div");
  spacer.className = "al-spacer";
  const windowEl = document.createElement("div");
  windowEl.className = "al-window";
  spacer.append(windowEl);
  outline.append(spacer);

  function rowAt(index) {
    const p = Math.floor(index / PAGE);
    const rows = pages.get(p) || stalePages.get(p);
    return rows ? rows[index - p * PAGE] : undefined;
  }

  function rowHtml(row, index) {
    if (!row) return `<div class="al-row al-loading" data-row="${index}"><span class="al-dots">…</span></div>`;
    const depth = Math.min(row.d, MAX_INDENT);
    const indent = `<span class="al-indent" style="width:${depth * 14}px"></span>` +
      (row.d > MAX_INDENT ? `<span class="al-deep">↳${row.d}</span>` : "");
    const onPaths = `${row.c ? " al-on-current" : ""}${row.v ? " al-on-selected" : ""}`;
    if (row.gap) {
      const [start, stop] = row.gap;
      return `<div class="al-gap${onPaths}" data-row="${index}" data-seg="${row.s}" data-start="${start}" data-stop="${stop}">` +
        gutter(row.g) + indent + `<span class="al-dots">⋯ ${num(stop - start)} messages</span>` +
        `<button class="al-expand" type="button">show ${Math.min(stop - start, 500)}</button></div>`;
    }
    let cls = `al-row${onPaths}`;
    if (row.sl) cls += " al-selected-leaf";
    if (row.si) cls += " al-selected";
    if (row.h) cls += " al-hit";
    if (row.x) cls += ` al-tool-${row.x}`;
    let chips = "";
    if (row.h) chips += `<span class="al-chip al-hit-chip" title="search rank">#${row.h}</span>`;
    if (row.k > 1) {
      chips += `<button type="button" class="al-chip al-fork" data-id="${esc(row.id)}" ` +
        `title="the conversation branches here: compare its branches side by side">${row.k} branches ⇄</button>`;
    }
    if (row.cl) chips += '<span class="al-chip al-current">● current</span>';
    for (const n of row.cs || []) {
      const c = (model.get("compactions") || [])[n];
      if (c) chips += `<span class="al-chip al-compact" title="${esc(c.summary)}">⟦ compacted ×${c.count}</span>`;
    }
    const icon = row.x === "call" ? '<span class="al-tool-icon" title="calls a tool">⚙</span>'
      : row.x === "result" ? '<span class="al-tool-icon" title="a tool result">↩</span>' : "";
    return `<div class="${cls}" data-row="${index}" data-id="${esc(row.id)}">` + gutter(row.g) + indent +
      `<span class="al-role al-role-${esc(row.r)}" title="${esc(row.r)}">${esc(roleLetter(row.r))}</span>${icon}` +
      `<span class="al-text">${row.t ? highlight(row.t, row.h ? searchWords : []) : "<i>(no text)</i>"}</span>${chips}</div>`;
  }

  function fetchPage(p) {
    if (pages.has(p) || pending.has(p)) return;
    pending.add(p);
    const asked = version;
    request("rows", { start: p * PAGE, stop: (p + 1) * PAGE }).then((reply) => {
      if (asked !== version) return; // a newer version cleared the cache; its own requests are on their way
      pending.delete(p);
      if (reply.error) { showError(reply.error); return; }
      if (reply.result.version !== version) return; // the kernel moved on; the version change refetches
      pages.set(p, reply.result.rows);
      paintWindow(true);
    });
  }

  let painted = [-1, -1];
  function paintWindow(force) {
    const count = model.get("row_count");
    const height = outline.clientHeight || 420;
    const first = Math.max(0, Math.floor(outline.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(count, Math.ceil((outline.scrollTop + height) / ROW_HEIGHT) + OVERSCAN);
    for (let p = Math.floor(first / PAGE); p * PAGE < last; p++) fetchPage(p);
    if (!force && first === painted[0] && last === painted[1]) return;
    painted = [first, last];
    spacer.style.height = `${count * ROW_HEIGHT}px`;
    body.style.height = `${Math.max(240, Math.min(420, count * ROW_HEIGHT + 8))}px`;
    windowEl.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
    let html = "";
    let missing = 0;
    for (let i = first; i < last; i++) {
      const row = rowAt(i);
      if (!pages.has(Math.floor(i / PAGE))) missing += 1; // not yet of this version (a stale row, or none)
      html += rowHtml(row, i);
    }
    windowEl.innerHTML = html;
    root.dataset.rows = String(count);
    root.dataset.version = String(version);
    if (!missing) root.dataset.loadedVersion = String(version);
    if (!firstPainted && !missing && count >= 0) {
      firstPainted = true;
      // Time to the first outline painted with its rows, read by the browser benchmark.
      requestAnimationFrame(() => setTimeout(() => {
        root.dataset.firstRenderMs = String(Math.round(performance.now() - started));
        root.dataset.paintedAt = String(Date.now()); // epoch ms: comparable with the kernel's time.time()
      }, 0));
    }
  }

  let scrollQueued = false;
  outline.addEventListener("scroll", () => {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => { scrollQueued = false; paintWindow(false); });
  });

  function newVersion() {
    if (model.get("version") === version) return;
    version = model.get("version");
    stalePages = pages.size ? pages : stalePages;
    pages = new Map();
    pending.clear();
    paintWindow(true);
  }

  function jumpTo(row) {
    if (row === undefined || row === null || row < 0) return;
    const height = outline.clientHeight || 420;
    outline.scrollTop = Math.max(0, row * ROW_HEIGHT - height / 3);
    paintWindow(true);
    flashRow = row;
    setTimeout(() => { if (flashRow === row) flashRow = -1; markFlash(); }, 1500);
    markFlash();
  }
  let flashRow = -1;
  function markFlash() {
    for (const node of windowEl.querySelectorAll(".al-flash")) node.classList.remove("al-flash");
    const node = windowEl.querySelector(`[data-row="${flashRow}"]`);
    if (node) node.classList.add("al-flash");
  }
  async function jumpToId(id) {
    const result = await call("reveal", { id });
    if (result) setTimeout(() => jumpTo(result.row), 0);
  }

  function drawStats() {
    const s = model.get("stats") || {};
    stats.textContent = ` · session "${s.session ?? ""}" · ${num(s.messages || 0)} messages · ` +
      `${s.branch_points || 0} branch points · ${s.leaves || 0} leaves · ${s.compactions || 0} compactions`;
    $("[data-role=compactions-tab]").textContent = `Compactions (${(model.get("compactions") || []).length})`;
  }

  // -- side panel: tabs -----------------------------------------------------------------------------------------
  let tab = "branch";
  function showTab(name) {
    tab = name;
    for (const b of root.querySelectorAll(".al-tab")) b.classList.toggle("al-active", b.dataset.tab === name);
    for (const p of root.querySelectorAll(".al-panel")) p.hidden = p.dataset.panel !== name;
    root.dataset.tab = name;
  }
  $(".al-tabs").addEventListener("click", (event) => {
    const button = event.target.closest(".al-tab");
    if (button) showTab(button.dataset.tab);
  });

  // The selected branch: its last messages, overlays applied; earlier ones on request.
  let pathFor = null;
  let pathKey = null;
  let pathShown = [];
  async function drawPath() {
    const leaf = model.get("selected_leaf");
    if (!leaf) { pathHead.textContent = "No messages yet."; pathList.replaceChildren(); pathFor = pathKey = null; return; }
    // Fetched again when the selection moves or the session changed, not for a search or an expanded gap.
    const key = `${leaf}|${(model.get("stats") || {}).changes}`;
    if (key === pathKey) return;
    pathFor = leaf;
    pathKey = key;
    const result = await call("path", { leaf, limit: 80 });
    if (!result || pathFor !== leaf) return; // a newer selection is on its way
    pathShown = result.messages;
    paintPath(result.total);
    pathList.scrollTop = pathList.scrollHeight;
  }
  function paintPath(total) {
    const leaf = pathFor || "";
    const earlier = total > pathShown.length
      ? ` <button class="al-earlier" type="button">${Math.min(80, total - pathShown.length)} earlier</button>` : "";
    pathHead.innerHTML = `<b>Selected branch</b> → <code>${esc(leaf.slice(0, 16))}</code> · ${num(total)} messages` +
      (total > pathShown.length ? ` (last ${num(pathShown.length)} shown)` : "") + ` · overlays applied${earlier}`;
    pathHead.dataset.total = String(total);
    pathList.innerHTML = pathShown.map(messageHtml).join("");
  }
  pathHead.addEventListener("click", async (event) => {
    if (!event.target.closest(".al-earlier")) return;
    const leaf = pathFor;
    const result = await call("path", { leaf, limit: 80, skip: pathShown.length });
    if (!result || leaf !== pathFor) return;
    pathShown = result.messages.concat(pathShown);
    paintPath(result.total);
  });

  async function expandMessage(button) {
    const result = await call("message", { id: button.dataset.id });
    if (!result) return;
    const box = button.closest(".al-msg");
    box.outerHTML = messageHtml({ ...result, cut: false });
  }
  root.addEventListener("click", (event) => {
    const full = event.target.closest(".al-full");
    if (full) { expandMessage(full); return; }
    const locate = event.target.closest(".al-locate");
    if (locate) jumpToId(locate.dataset.id);
  });

  // Compare: the selected branch against another, side by side from their fork point.
  let picking = false;
  let compared = null; // {a, b} shown in the panel
  function drawCompareIntro() {
    comparePanel.innerHTML = `<div class="al-compare-help">Compare the selected branch with another one from their fork ` +
      `point: click <button class="al-pick" type="button">pick branch B</button> and then a message in the outline, ` +
      `or click a <span class="al-chip al-fork">branches ⇄</span> chip.</div>`;
  }
  function sideHtml(name, side) {
    const more = side.total > side.offset + side.messages.length
      ? `<button class="al-compare-more" type="button" data-side="${name}">${num(side.total - side.offset - side.messages.length)} more</button>` : "";
    return `<div class="al-compare-side" data-side="${name}"><div class="al-compare-head"><b>${name.toUpperCase()}</b> → ` +
      `<code>${esc((side.leaf || "").slice(0, 16))}</code> · ${num(side.total)} messages after the fork</div>` +
      side.messages.map(messageHtml).join("") + more + "</div>";
  }
  let compareState = null;
  function drawCompare(result) {
    compareState = result;
    compared = { a: result.a.leaf, b: result.b.leaf };
    const fork = result.fork
      ? `<div class="al-compare-fork"><b>Fork point</b> (${num(result.shared)} shared messages)${messageHtml(result.fork)}</div>`
      : `<div class="al-compare-fork"><b>No shared messages</b>: two separate roots.</div>`;
    comparePanel.innerHTML = `<div class="al-compare-tools"><button class="al-pick" type="button">pick another branch B</button>` +
      `<button class="al-compare-swap" type="button">swap</button></div>${fork}` +
      `<div class="al-compare-cols">${sideHtml("a", result.a)}${sideHtml("b", result.b)}</div>`;
    showTab("compare");
  }
  let comparing = 0; // requests in flight: the comparison trait they set is drawn from their reply
  async function compareWith(method, params) {
    comparing += 1;
    const result = await call(method, params);
    comparing -= 1;
    if (result) drawCompare(result);
  }
  const compare = (a, b) => compareWith("compare", { a, b });
  comparePanel.addEventListener("click", async (event) => {
    if (event.target.closest(".al-pick")) {
      picking = true;
      root.classList.add("al-picking");
      showError("Click a message in the outline: its branch becomes B.");
      return;
    }
    if (event.target.closest(".al-compare-swap") && compared) { compare(compared.b, compared.a); return; }
    const more = event.target.closest(".al-compare-more");
    if (more && compared && compareState) {
      const side = more.dataset.side;
      const shown = compareState[side].offset + compareState[side].messages.length;
      const result = await call("compare", { a: compared.a, b: compared.b, offset: shown });
      if (!result) return;
      compareState[side].messages = compareState[side].messages.concat(result[side].messages);
      drawCompare(compareState);
    }
  });

  // Compactions: range, summary, tokens before and after; click to jump to the range.
  function drawCompactions() {
    const list = model.get("compactions") || [];
    if (!list.length) { compactionPanel.innerHTML = '<div class="al-none">No compactions in this session.</div>'; return; }
    compactionPanel.innerHTML = list.map((c) => {
      const saved = c.tokens_before && c.tokens_after !== null && c.tokens_after !== undefined
        ? ` (${Math.round((1 - c.tokens_after / c.tokens_before) * 100)}% fewer)` : "";
      const more = c.summary_chars > c.summary.length
        ? ` <button class="al-summary-more" type="button" data-id="${esc(c.id)}">show all ${num(c.summary_chars)} characters</button>` : "";
      return `<div class="al-compaction" data-n="${c.n}" data-row="${c.row}"><div class="al-compaction-head">` +
        `<span class="al-swatch al-lane-swatch-${c.n % LANES}"></span><b>#${c.n + 1}</b> ` +
        `<code>${esc(c.from)}</code> → <code>${esc(c.to)}</code> · ${num(c.count)} messages · ${esc(c.trigger || "")}</div>` +
        `<div class="al-compaction-tokens">${c.tokens_before === null || c.tokens_before === undefined
          ? "tokens not recorded (an overlay added by hand)"
          : `session tokens ${num(c.tokens_before)} → ${num(c.tokens_after)}${saved}`}</div>` +
        `<div class="al-compaction-summary">${esc(c.summary)}${more}</div></div>`;
    }).join("");
  }
  compactionPanel.addEventListener("click", async (event) => {
    const more = event.target.closest(".al-summary-more");
    if (more) {
      const result = await call("compaction", { id: more.dataset.id });
      if (result) more.parentElement.textContent = result.summary;
      return;
    }
    const item = event.target.closest(".al-compaction");
    if (item) jumpTo(Number(item.dataset.row));
  });

  // Search: the kernel's BM25 search; hits are drawn, ranked and listed; ↑ ↓ walk them.
  let hitIndex = -1;
  function drawSearch() {
    const s = model.get("search") || {};
    const hits = s.hits || [];
    searchWords = s.query ? s.query.split(/\s+/).filter((w) => w.length > 1) : [];
    if (s.query && searchBox.value.trim() === "") searchBox.value = s.query;
    if (s.mode) modeBox.value = s.mode;
    hitCount.textContent = s.query ? (hits.length ? `${hitIndex >= 0 ? hitIndex + 1 : "–"} / ${hits.length}` : "no hits") : "";
    root.dataset.hits = String(hits.length);
    $("[data-role=hits-tab]").textContent = s.query ? `Hits (${hits.length})` : "Hits";
    hitPanel.innerHTML = !s.query ? '<div class="al-none">Type in the search box above.</div>'
      : !hits.length ? `<div class="al-none">Nothing matches “${esc(s.query)}” (${esc(s.mode)}).</div>`
      : hits.map((h, k) => `<div class="al-hit-item" data-k="${k}"><span class="al-chip al-hit-chip">#${k + 1}</span>` +
        `<span class="al-role al-role-${esc(h.role)}">${esc(roleLetter(h.role))}</span> ${highlight(h.snippet, searchWords)}</div>`).join("");
  }
  function goHit(k) {
    const hits = (model.get("search") || {}).hits || [];
    if (!hits.length) return;
    hitIndex = (k + hits.length) % hits.length;
    drawSearch();
    jumpTo(hits[hitIndex].row);
  }
  let searchTimer = null;
  async function runSearch() {
    clearTimeout(searchTimer);
    hitIndex = -1;
    showError("");
    const result = await call("search", { query: searchBox.value, mode: modeBox.value });
    if (result && result.total) { showTab("hits"); goHit(0); }
  }
  searchBox.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); runSearch(); }
    if (event.key === "Escape") { searchBox.value = ""; runSearch(); }
  });
  searchBox.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(runSearch, 400);
  });
  modeBox.addEventListener("change", runSearch);
  $(".al-next").addEventListener("click", () => goHit(hitIndex + 1));
  $(".al-prev").addEventListener("click", () => goHit(hitIndex - 1));
  hitPanel.addEventListener("click", (event) => {
    const item = event.target.closest(".al-hit-item");
    if (item) goHit(Number(item.dataset.k));
  });

  $(".al-jump-current").addEventListener("click", () => jumpTo(model.get("current_row")));
  $(".al-jump-selected").addEventListener("click", () => jumpTo(model.get("selected_row")));

  outline.addEventListener("click", async (event) => {
    const button = event.target.closest(".al-expand");
    if (button) {
      const gap = button.closest(".al-gap");
      await call("expand", { segment: Number(gap.dataset.seg), start: Number(gap.dataset.start), stop: Number(gap.dataset.stop) });
      return;
    }
    const fork = event.target.closest(".al-fork");
    if (fork) {
      compareWith("compare_at", { id: fork.dataset.id });
      return;
    }
    const row = event.target.closest(".al-row");
    if (!row || !row.dataset.id) return;
    if (picking) {
      picking = false;
      root.classList.remove("al-picking");
      showError("");
      compare(model.get("selected_leaf"), row.dataset.id);
      return;
    }
    await call("select", { id: row.dataset.id });
  });

  // One traitlet update changes several traits at once: redraw once per tick, not once per trait.
  let queued = false;
  function schedule() {
    if (queued) return;
    queued = true;
    Promise.resolve().then(() => {
      queued = false;
      newVersion();
      drawStats();
      drawCompactions();
      drawSearch();
      showError();
      drawPath();
      const c = model.get("comparison") || {};
      if (!comparing && c.a && c.b && (!compared || compared.a !== c.a || compared.b !== c.b)) compare(c.a, c.b);
    });
  }
  const traits = ["version", "row_count", "compactions", "stats", "search", "selected_leaf", "error", "comparison"];
  for (const name of traits) model.on(`change:${name}`, schedule);
  drawCompareIntro();
  drawStats();
  drawCompactions();
  drawSearch();
  showError();
  paintWindow(true);
  drawPath();
  const c0 = model.get("comparison") || {};
  if (c0.a && c0.b) compare(c0.a, c0.b);
  return () => {
    dispose();
    for (const name of traits) model.off(`change:${name}`, schedule);
  };
}

export default { render };
