// ContextView front end: one row per context block, live provider content on the left and the
// frozen system prompt's section on the right, with the block's tag and a usage bar; below, the memory
// timeline (every write to a writable block: when, which block, who, what changed).
// Plain ESM for anywidget; long texts and older timeline rows are fetched from the kernel when asked for.

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

function usageBar(block) {
  if (!block.max_tokens) {
    return `<div class="al-usage"><span class="al-usage-text">${num(block.tokens)} tokens · no budget</span></div>`;
  }
  const pct = block.pct ?? 0;
  const width = Math.max(0, Math.min(100, pct));
  const level = pct > 100 ? "al-over" : pct >= 80 ? "al-high" : "al-ok";
  return `<div class="al-usage" title="${num(block.tokens)} of ${num(block.max_tokens)} tokens">` +
    `<div class="al-bar"><div class="al-fill ${level}" style="width:${width}%"></div></div>` +
    `<span class="al-usage-text">${num(block.tokens)} / ${num(block.max_tokens)} tokens (${pct}%)</span></div>`;
}

function textCell(text, chars, which, label, emptyNote) {
  if (text === null || text === undefined) return `<div class="al-none">${emptyNote}</div>`;
  const more = chars > text.length
    ? `<button class="al-more" data-label="${esc(label)}" data-which="${which}" type="button">show all ${num(chars)} characters</button>` : "";
  return `<pre class="al-text" data-which="${which}">${esc(text) || '<span class="al-none">(empty)</span>'}</pre>${more}`;
}

function formatStamp(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso || "";
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

const WRITER = { tool: "model (set_context)", python: "Python", client: "client" };

function writeHtml(w) {
  const who = `<span class="al-writer al-writer-${esc(w.writer)}" title="${esc(w.writer_id || "")}">` +
    `${esc(WRITER[w.writer] || w.writer)}</span>`;
  const change = (w.removed || w.added)
    ? `<span class="al-ctx">${esc(w.before)}</span>${w.removed ? `<del>${esc(w.removed)}</del>` : ""}` +
      `${w.added ? `<ins>${esc(w.added)}</ins>` : ""}<span class="al-ctx">${esc(w.after)}</span>`
    : '<span class="al-none">no change (the same text written again)</span>';
  return `<div class="al-write" data-seq="${w.seq}"><div class="al-write-head"><span class="al-when">${esc(formatStamp(w.at))}</span>` +
    ` <b class="al-write-label">${esc(w.label)}</b> ${who} <span class="al-chars">${num(w.old_chars)} → ${num(w.new_chars)} chars</span>` +
    ` <button class="al-write-full" type="button" data-seq="${w.seq}">old / new</button></div>` +
    `<div class="al-change">${change}${w.cut ? '<span class="al-none"> …</span>' : ""}</div></div>`;
}

function render({ model, el }) {
  const { request, dispose } = requester(model);
  const root = document.createElement("div");
  root.className = "agentlab-context";
  root.innerHTML = `
    <div class="al-head"><span class="al-title">Context blocks</span><span class="al-summary" data-role="context-summary"></span>
      <button class="al-reload" type="button" title="Re-read every provider">Reload providers</button>
      <button class="al-refresh" type="button" title="Re-render the system prompt the model sees">Refresh prompt</button></div>
    <div class="al-error" hidden></div>
    <div class="al-grid" data-role="context-blocks"></div>
    <details class="al-timeline" data-role="timeline" open><summary><b>Memory timeline</b> <span class="al-timeline-count"></span></summary>
      <div class="al-writes"></div><button class="al-older" type="button" hidden>older writes</button></details>`;
  el.append(root);
  const summary = root.querySelector(".al-summary");
  const grid = root.querySelector(".al-grid");
  const error = root.querySelector(".al-error");
  const writes = root.querySelector(".al-writes");
  const older = root.querySelector(".al-older");
  const timelineCount = root.querySelector(".al-timeline-count");
  let olderRows = []; // fetched with "older writes"; dropped when the newest rows change
  let olderMore = false;

  function drawTimeline() {
    const rows = (model.get("timeline") || []).concat(olderRows);
    const more = olderRows.length ? olderMore : model.get("timeline_more");
    timelineCount.textContent = rows.length ? `· ${rows.length}${more ? "+" : ""} writes, newest first`
      : "· no writes to a writable block yet";
    writes.innerHTML = rows.map(writeHtml).join("");
    older.hidden = !more;
  }

  function draw() {
    const blocks = model.get("blocks") || [];
    const s = model.get("summary") || {};
    const frozen = model.get("frozen");
    summary.innerHTML = ` · ${blocks.length} blocks · live ${num(s.live_tokens)} tokens · ` +
      (frozen ? `frozen ${num(s.frozen_tokens)} tokens` : "no prompt frozen yet") +
      (s.stale ? ' · <span class="al-stale">frozen prompt is stale: the model sees the right column until a refresh</span>' : "");
    const message = model.get("error");
    error.textContent = message || "";
    error.hidden = !message;
    const head = `<div class="al-colhead">block</div><div class="al-colhead">live provider content (after a refresh)</div>` +
      `<div class="al-colhead">frozen prompt (what the model sees now)</div>`;
    grid.classList.toggle("al-empty", !blocks.length);
    if (!blocks.length) {
      grid.innerHTML = '<div class="al-none">No context blocks on this session object (add them with ' +
        '<code>session.with_context(...)</code>). The timeline below is read from the file.</div>';
      return;
    }
    grid.innerHTML = head + blocks.map((b) => {
      const changed = b.changed ? ' <span class="al-changed">changed since freeze</span>' : "";
      const failure = b.error ? `<div class="al-block-error">${esc(b.error)}</div>` : "";
      const desc = b.description ? `<div class="al-desc">${esc(b.description)}</div>` : "";
      return `<div class="al-block" data-label="${esc(b.label)}"><div class="al-label">${esc(b.label)}` +
        ` <span class="al-tag al-tag-${esc(b.tag)}">${esc(b.tag)}</span></div>${desc}${usageBar(b)}${changed}${failure}</div>` +
        `<div class="al-live">${textCell(b.content, b.content_chars, "live", b.label, "")}` +
        (b.in_prompt ? "" : '<div class="al-none">empty readonly block: left out of the prompt</div>') + "</div>" +
        `<div class="al-frozen${b.changed ? " al-differs" : ""}">` +
        textCell(b.frozen, b.frozen_chars, "frozen", b.label, frozen ? "not in the frozen prompt" : "not frozen yet") + "</div>";
    }).join("");
  }

  root.addEventListener("click", async (event) => {
    const target = event.target;
    let reply = null;
    if (target.closest(".al-reload")) reply = await request("reload", {});
    else if (target.closest(".al-refresh")) reply = await request("refresh_prompt", {});
    else if (target.closest(".al-more")) {
      const button = target.closest(".al-more");
      reply = await request("block", { label: button.dataset.label, which: button.dataset.which });
      if (!reply.error) {
        const pre = button.parentElement.querySelector("pre.al-text");
        if (pre) pre.textContent = reply.result.text ?? "";
        button.remove();
      }
    }
    else if (target.closest(".al-older")) {
      const rows = (model.get("timeline") || []).concat(olderRows);
      reply = await request("history", { before: rows[rows.length - 1].seq });
      if (!reply.error) {
        olderRows = olderRows.concat(reply.result.rows);
        olderMore = reply.result.more;
        drawTimeline();
      }
    } else if (target.closest(".al-write-full")) {
      const button = target.closest(".al-write-full");
      reply = await request("write", { seq: Number(button.dataset.seq) });
      if (!reply.error) {
        const w = reply.result;
        button.closest(".al-write").querySelector(".al-change").outerHTML =
          `<div class="al-change al-full-texts"><div><div class="al-colhead">before</div><pre class="al-text">${esc(w.old)}</pre></div>` +
          `<div><div class="al-colhead">after</div><pre class="al-text">${esc(w.new)}</pre></div></div>`;
        button.remove();
      }
    }
    if (reply && reply.error) { error.textContent = reply.error; error.hidden = false; }
  });

  let queued = false;
  const redraw = () => {
    if (queued) return;
    queued = true;
    Promise.resolve().then(() => { queued = false; draw(); drawTimeline(); });
  };
  const onTimeline = () => { olderRows = []; redraw(); };
  const traits = ["blocks", "frozen", "summary", "error", "timeline_more"];
  for (const name of traits) model.on(`change:${name}`, redraw);
  model.on("change:timeline", onTimeline);
  draw();
  drawTimeline();
  return () => {
    dispose();
    for (const name of traits) model.off(`change:${name}`, redraw);
    model.off("change:timeline", onTimeline);
  };
}

export default { render };
