// Calls a tool that never answers with the official TypeScript SDK client, which gives up
// after a short timeout and cancels the call, then checks the same client still works;
// prints what it saw as one JSON line (used by test_cancellation_e2e.py).
//
//   node ts_cancel_probe.mjs URL MODE TOKEN
//
// MODE is the client's version negotiation: "auto" (the stateless revision, where a
// cancel closes the request's connection) or "legacy" (a session, where the client posts
// notifications/cancelled).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [url, mode, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "mymcp-e2e", version: "1.0.0" }, { versionNegotiation: { mode } });
await client.connect(transport);
let outcome = "answered";
try {
  await client.callTool({ name: "slow__wait", arguments: {} }, { timeout: 500 });
} catch (error) {
  outcome = /timed out/i.test(error.message) ? "timed_out" : `failed: ${error.message}`;
}
const listed = await client.listTools();
console.log(
  JSON.stringify({
    era: client.getProtocolEra(),
    outcome,
    tools: listed.tools.map((tool) => tool.name),
  }),
);
await client.close();
