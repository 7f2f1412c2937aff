// A client of the console's MCP endpoint built on the official TypeScript SDK (what Claude Code
// and Cursor are built on), driven by tests/mcpserver/test_endpoint.py.
//
//   node tests/mcp_ts_client.mjs <url> <token> [<client capabilities as JSON>]
//
// Reads one JSON command per line on stdin and writes one JSON event per line on stdout:
//   {"id": 1, "op": "list"}                                   -> {"id": 1, "tools": [...]}
//   {"id": 2, "op": "call", "name": "...", "arguments": {},
//    "timeout": 15000, "progress": true}                      -> {"id": 2, "progress": {...}} ...
//                                                                {"id": 2, "result": {...}} or {"id": 2, "error": "..."}
//   {"id": 3, "op": "close"}                                  -> {"id": 3, "closed": true}, then exits
// Prompts and resources (SPEC 20), each answered {"id": n, "result": {...}} or {"id": n, "error": "...", "code": n}:
//   {"op": "prompts"}, {"op": "get_prompt", "name": "...", "arguments": {}}, {"op": "resources"},
//   {"op": "templates"}, {"op": "read", "uri": "..."}, {"op": "subscribe", "uri": "..."},
//   {"op": "complete", "ref": {...}, "argument": {"name": "...", "value": "..."}}
// Questions from servers (SPEC 20.4), when the capabilities declare `elicitation`: each
// `elicitation/create` is written as {"event": "elicit", "params": {...}, "at": ...} and answered
// with the next of the answers given by {"op": "answers", "answers": [{"action": ...}, ...]}
// (cancel when none is left).
// Unprompted: {"event": "connected", ...} and {"event": "list_changed", "at": <ms since epoch>}
// (tools), {"event": "prompts_changed" | "resources_changed", "at": ...},
// {"event": "resource_updated", "uri": "...", "at": ...}.

import readline from "node:readline";

const sdk = new URL("./servers/node_modules/@modelcontextprotocol/sdk/dist/esm/", import.meta.url);
const { Client } = await import(new URL("client/index.js", sdk));
const { StreamableHTTPClientTransport } = await import(new URL("client/streamableHttp.js", sdk));
const {
  ToolListChangedNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ElicitRequestSchema,
} = await import(new URL("types.js", sdk));

const [url, token, capabilities] = process.argv.slice(2);
const out = (event) => process.stdout.write(JSON.stringify(event) + "\n");

const declared = capabilities ? JSON.parse(capabilities) : {};
const client = new Client({ name: "agenvoy-ts-test", version: "1.0.0" }, { capabilities: declared });
const elicitAnswers = [];
if (declared.elicitation) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    out({ event: "elicit", params: request.params, at: Date.now() });
    return elicitAnswers.shift() ?? { action: "cancel" };
  });
}
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  out({ event: "list_changed", at: Date.now() });
});
client.setNotificationHandler(PromptListChangedNotificationSchema, () => {
  out({ event: "prompts_changed", at: Date.now() });
});
client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
  out({ event: "resources_changed", at: Date.now() });
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  out({ event: "resource_updated", uri: n.params.uri, at: Date.now() });
});
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
out({
  event: "connected",
  session: transport.sessionId ?? null,
  protocol: transport.protocolVersion ?? null,
  server: client.getServerVersion(),
  instructions: client.getInstructions() ?? null,
  capabilities: client.getServerCapabilities() ?? null,
});

function call(cmd) {
  const options = {
    timeout: cmd.timeout ?? 60000,
    resetTimeoutOnProgress: true,
  };
  if (cmd.progress) {
    options.onprogress = (progress) => out({ id: cmd.id, progress, at: Date.now() });
  }
  client.callTool({ name: cmd.name, arguments: cmd.arguments ?? {} }, undefined, options).then(
    (result) => out({ id: cmd.id, result, at: Date.now() }),
    (error) => out({ id: cmd.id, error: String(error?.message ?? error), code: error?.code ?? null, at: Date.now() }),
  );
}

// The SDK's own typed method for each prompt and resource operation.
const requests = {
  prompts: () => client.listPrompts(),
  get_prompt: (cmd) => client.getPrompt({ name: cmd.name, arguments: cmd.arguments ?? {} }),
  resources: () => client.listResources(),
  templates: () => client.listResourceTemplates(),
  read: (cmd) => client.readResource({ uri: cmd.uri }),
  subscribe: (cmd) => client.subscribeResource({ uri: cmd.uri }),
  complete: (cmd) => client.complete({ ref: cmd.ref, argument: cmd.argument }),
};

function request(cmd) {
  requests[cmd.op](cmd).then(
    (result) => out({ id: cmd.id, result, at: Date.now() }),
    (error) => out({ id: cmd.id, error: String(error?.message ?? error), code: error?.code ?? null, at: Date.now() }),
  );
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  try {
    if (cmd.op === "list") {
      out({ id: cmd.id, tools: (await client.listTools()).tools });
    } else if (cmd.op === "call") {
      call(cmd);
    } else if (cmd.op === "answers") {
      elicitAnswers.push(...cmd.answers);
      out({ id: cmd.id, result: {} });
    } else if (cmd.op in requests) {
      request(cmd);
    } else if (cmd.op === "close") {
      await client.close();
      out({ id: cmd.id, closed: true });
      process.exit(0);
    }
  } catch (error) {
    out({ id: cmd.id, error: String(error?.message ?? error), code: error?.code ?? null });
  }
}
await client.close();
