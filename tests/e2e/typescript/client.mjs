// One scenario of the official TypeScript MCP client SDK against a Tally server over
// streamable HTTP: `node client.mjs SCENARIO URL`. It prints one JSON object of what it saw;
// tests/e2e/test_typescript_sdk.py checks it. Scenarios:
//
//   choice-modern   2026-07-28 (pinned): an ambiguous field answered by the SDK's own
//                   multi-round-trip driver with the elicitation handler's choice
//   choice-legacy   2025-11-25: the same, the server asking with `elicitation/create`
//   decline-modern  2026-07-28: the user declines; the call is refused as without asking
//   task-legacy     the tasks extension declared: a call asked as a task, polled to its end
//   cancel-legacy   a task waiting for its user's choice, cancelled
//   no-extension    2026-07-28 without the extension: asking for a task gives the answer
//
// The SDK 2.4.0 has no tasks client: at 2026-07-28 it refuses a `resultType: "task"` answer
// (UNSUPPORTED_RESULT_TYPE), so tasks are driven in the 2025 era, where it passes the task
// handle through, with `tasks/get` and `tasks/cancel` sent as any request.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const TASKS = "io.modelcontextprotocol/tasks";
const AMBIGUOUS = { dataset_id: "procedures", group_by: ["手続が行われるイベント"], limit: 3 };
// A result schema that takes the server's answer as it is (the SDK asks for one on a method
// it does not know, and `tasks/*` are the extension's methods).
const ANY = { "~standard": { version: 1, vendor: "tally-e2e", validate: (value) => ({ value }) } };

const [scenario, url] = process.argv.slice(2);
const modern = scenario.endsWith("-modern") || scenario === "no-extension";
const asked = [];
const capabilities = { elicitation: { form: {} } };
if (scenario !== "no-extension") capabilities.extensions = { [TASKS]: {} };
const client = new Client(
  { name: "tally-e2e-typescript", version: "1.0.0" },
  {
    capabilities,
    ...(modern ? { versionNegotiation: { mode: { pin: "2026-07-28" } }, inputRequired: { autoFulfill: true } } : {}),
  },
);
client.setRequestHandler("elicitation/create", async (request) => {
  const params = request.params;
  asked.push({ message: params.message, options: params.requestedSchema.properties.name.oneOf });
  if (scenario.startsWith("decline")) return { action: "decline" };
  if (scenario.startsWith("cancel")) return new Promise(() => {});
  return { action: "accept", content: { name: params.requestedSchema.properties.name.oneOf[1].const } };
});

const seen = { scenario };
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const text = (result) => JSON.parse(result.content[0].text);

async function settle(taskId) {
  const statuses = [];
  for (let i = 0; i < 600; i++) {
    const task = await client.request({ method: "tasks/get", params: { taskId } }, ANY);
    statuses.push(task.status);
    if (["completed", "failed", "cancelled"].includes(task.status)) return { task, statuses };
    await sleep(task.pollIntervalMs ?? 200);
  }
  throw new Error(`task ${taskId} did not end: ${statuses.slice(-3)}`);
}

try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  seen.era = client.getNegotiatedProtocolVersion();
  if (scenario.startsWith("choice") || scenario.startsWith("decline")) {
    const result = await client.callTool({ name: "summarize_records", arguments: AMBIGUOUS });
    seen.isError = result.isError ?? false;
    seen.answer = text(result);
  } else if (scenario === "task-legacy") {
    const handle = await client.callTool({
      name: "summarize_records",
      arguments: { dataset_id: "procedures", group_by: ["所管府省庁"], limit: 3 },
      _meta: { "tally/task": true },
    });
    seen.handle = { taskId: handle.taskId, status: handle.status, ttlMs: handle.ttlMs, pollIntervalMs: handle.pollIntervalMs };
    const { task, statuses } = await settle(handle.taskId);
    seen.statuses = statuses;
    seen.status = task.status;
    seen.answer = text(task.result);
  } else if (scenario === "cancel-legacy") {
    const handle = await client.callTool({ name: "summarize_records", arguments: AMBIGUOUS, _meta: { "tally/task": true } });
    seen.handle = { taskId: handle.taskId, status: handle.status };
    let task;
    for (let i = 0; i < 100; i++) {
      task = await client.request({ method: "tasks/get", params: { taskId: handle.taskId } }, ANY);
      if (task.status !== "working") break;
      await sleep(100);
    }
    seen.waiting = task.status;
    seen.inputRequests = Object.keys(task.inputRequests ?? {});
    seen.cancelAck = await client.request({ method: "tasks/cancel", params: { taskId: handle.taskId } }, ANY);
    seen.status = (await settle(handle.taskId)).task.status;
  } else if (scenario === "no-extension") {
    const result = await client.callTool({
      name: "list_datasets",
      arguments: {},
      _meta: { "tally/task": true },
    });
    seen.taskId = result.taskId ?? null;
    seen.answer = text(result);
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
} catch (error) {
  seen.error = { message: String(error?.message ?? error), code: error?.code ?? null };
}
seen.asked = asked;
await client.close().catch(() => {});
console.log(JSON.stringify(seen));
