// Connects the official TypeScript SDK client to a MyMCP server, lists its tools, calls
// one, and prints what it saw as one JSON line (used by test_typescript_client_e2e.py).
//
//   node ts_client_probe.mjs http URL MODE [TOKEN]
//   node ts_client_probe.mjs stdio MODE COMMAND [ARG...]
//
// MODE is the client's version negotiation: "auto" (probe server/discover, adopt the
// stateless revision) or "legacy" (the initialize handshake).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [kind, ...rest] = process.argv.slice(2);
let transport;
let mode;
if (kind === "http") {
  const [url, negotiation, token] = rest;
  mode = negotiation;
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
} else {
  const [negotiation, command, ...args] = rest;
  mode = negotiation;
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: "ignore" });
}

const client = new Client({ name: "mymcp-e2e", version: "1.0.0" }, { versionNegotiation: { mode } });
await client.connect(transport);
const names = [];
let cursor;
do {
  const page = await client.listTools(cursor === undefined ? {} : { cursor });
  names.push(...page.tools.map((tool) => tool.name));
  cursor = page.nextCursor;
} while (cursor !== undefined);
const called = await client.callTool({ name: "list_tools", arguments: {} });
console.log(
  JSON.stringify({
    version: client.getNegotiatedProtocolVersion(),
    era: client.getProtocolEra(),
    names,
    isError: called.isError ?? false,
    structured: called.structuredContent,
  }),
);
await client.close();
