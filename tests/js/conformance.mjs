// Drives the official `agents` AgentClient (and agentFetch) against an agentlab server.
// Usage: node conformance.mjs 127.0.0.1:PORT
// Prints one JSON line {"ok": true, "results": {...}} and exits 0, or prints the failure and exits 1.
// tests/test_serve_js.py starts `agentlab serve tests/js/served_agents.py:Counter`, runs this, and then checks
// the DuckDB files once the server has stopped.
import assert from "node:assert/strict";
import { webcrypto } from "node:crypto";
import { AgentClient, agentFetch } from "agents/client";
import WebSocket from "ws";

// Debian bookworm's Node 18 has no global Web Crypto, which the client uses for call ids.
globalThis.crypto ??= webcrypto;

const host = process.argv[2];
if (!host) {
  console.error("usage: node conformance.mjs HOST:PORT");
  process.exit(2);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(what, predicate, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

// One client with a record of everything it was told.
function client(name, extra = {}) {
  const seen = { server: [], client: [], errors: [], identities: [] };
  const c = new AgentClient({
    agent: "Counter",
    name,
    host,
    WebSocket,
    maxRetries: 0,
    onStateUpdate: (state, source) => seen[source].push(state),
    onStateUpdateError: (error) => seen.errors.push(error),
    onIdentity: (n, agent) => seen.identities.push([n, agent]),
    ...extra
  });
  c.seen = seen;
  return c;
}

async function stored(name) {
  const response = await agentFetch({ agent: "Counter", name, host });
  assert.equal(response.status, 200);
  return (await response.json()).state;
}

const results = {};
const clients = [];

try {
  // Identity and the initial state: `ready` waits for the state the identity announces.
  const a = client("alice");
  const b = client("alice");
  clients.push(a, b);
  await Promise.all([a.ready, b.ready]);
  assert.equal(a.identified, true);
  assert.deepEqual(a.seen.identities, [["alice", "counter"]]);
  assert.equal(a.name, "alice");
  assert.equal(a.agent, "counter");
  assert.deepEqual(a.state, { count: 0 });
  assert.deepEqual(b.state, { count: 0 });
  results.identity = a.seen.identities[0];

  // setState: the other client gets it from the server; the sender gets no echo.
  a.setState({ count: 5 });
  await waitFor("b to see count 5", () => b.seen.server.some((s) => s.count === 5));
  assert.deepEqual(b.state, { count: 5 });
  assert.deepEqual(await stored("alice"), { count: 5 });
  assert.equal(a.seen.server.filter((s) => s.count === 5).length, 0, "the sender must not get its own update back");

  // A rejected update: an error to the sender only, nothing stored, no corrective state (upstream).
  const bSeenBefore = b.seen.server.length;
  a.setState({ count: -1 });
  await waitFor("the rejection", () => a.seen.errors.length === 1);
  assert.deepEqual(a.seen.errors, ["State update rejected"]);
  assert.deepEqual(a.state, { count: -1 }, "setState is optimistic on the client");
  assert.deepEqual(await stored("alice"), { count: 5 });
  assert.equal(b.seen.server.length, bSeenBefore, "a rejected update is not broadcast");
  assert.deepEqual(b.seen.errors, []);
  a.setState({ count: 5 }); // back in step with the server
  await waitFor("b to see count 5 again", () => b.seen.server.length === bSeenBefore + 1);

  // Readonly: the agent's should_connection_be_readonly hook reads ?readonly=1.
  const r = client("alice", { query: { readonly: "1" } });
  clients.push(r);
  await r.ready;
  r.setState({ count: 99 });
  await waitFor("the readonly refusal", () => r.seen.errors.length === 1);
  assert.deepEqual(r.seen.errors, ["Connection is readonly"]);
  await assert.rejects(r.call("increment", [1]), { message: "Connection is readonly" });
  assert.deepEqual(await stored("alice"), { count: 5 });
  results.readonly = r.seen.errors[0];

  // A plain RPC call whose state change reaches every client, the caller too (its source is the server).
  const seenByB = b.seen.server.length;
  assert.equal(await a.call("increment", [2]), 7);
  await waitFor("b to see count 7", () => b.seen.server.some((s) => s.count === 7));
  await waitFor("a to see count 7", () => a.seen.server.some((s) => s.count === 7));
  await waitFor("r to see count 7", () => r.seen.server.some((s) => s.count === 7));
  assert.equal(b.seen.server.length, seenByB + 1);
  assert.equal(await a.stub.increment(1), 8);

  // A streaming call: chunks, then the final chunk; every step is broadcast.
  const chunks = [];
  let done;
  const final = await a.call("count_up", [3], {
    stream: { onChunk: (chunk) => chunks.push(chunk), onDone: (value) => (done = value) }
  });
  assert.deepEqual(chunks, [9, 10, 11]);
  assert.deepEqual(final, { count: 11 });
  assert.deepEqual(done, { count: 11 });
  await waitFor("b to see the streamed counts", () => b.seen.server.some((s) => s.count === 11));
  assert.deepEqual(
    b.seen.server.slice(-3).map((s) => s.count),
    [9, 10, 11]
  );
  results.stream = chunks;

  // Errors come back to the caller with upstream's texts.
  await assert.rejects(a.call("fail"), { message: "this method always fails" });
  await assert.rejects(a.call("nope"), { message: "Method nope does not exist" });
  await assert.rejects(a.call("not_marked"), { message: "Method not_marked is not callable" });

  // Two names are two agents: nothing crosses between them.
  const c = client("bob");
  clients.push(c);
  await c.ready;
  assert.deepEqual(c.state, { count: 0 });
  const aSeen = a.seen.server.length;
  c.setState({ count: 42 });
  assert.equal(await c.call("increment", [0]), 42);
  assert.equal(await a.call("increment", [0]), 11);
  assert.equal(a.seen.server.length, aSeen + 1, "alice sees her own increment only");
  assert.ok(c.seen.server.every((s) => s.count === 0 || s.count === 42));
  assert.deepEqual(await stored("bob"), { count: 42 });

  // HTTP through agentFetch, and a 404 with a JSON error for a class nobody serves.
  const http = await agentFetch({ agent: "Counter", name: "alice", host, path: "info" });
  assert.deepEqual(await http.json(), { name: "alice", method: "GET", path: "/info", state: { count: 11 } });
  const missing = await agentFetch({ agent: "NoSuchAgent", name: "alice", host });
  assert.equal(missing.status, 404);
  assert.match((await missing.json()).error, /no-such-agent/);

  results.final = { alice: await stored("alice"), bob: await stored("bob") };
  for (const each of clients) each.close();
  console.log(JSON.stringify({ ok: true, results }));
  process.exit(0);
} catch (error) {
  for (const each of clients) each.close();
  console.log(JSON.stringify({ ok: false, error: String(error?.stack || error) }));
  process.exit(1);
}
