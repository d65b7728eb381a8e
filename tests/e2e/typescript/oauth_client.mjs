// The official TypeScript MCP client SDK signs in to a Tally server that takes OAuth access
// tokens, and calls every tool: `node oauth_client.mjs SCENARIO URL`. It prints one JSON object
// of what it saw; tests/e2e/test_typescript_sdk.py checks it. Scenarios:
//
//   legacy-confidential  2025-era `initialize`; the client registers with the default
//                        `token_endpoint_auth_method` and gets a client secret
//   modern-public        2026-07-28 (pinned); a public client (`token_endpoint_auth_method: none`)
//
// The flow is the SDK's own: the transport takes an `OAuthClientProvider` (`authProvider`); its
// first request is refused 401, the SDK reads the challenge, the protected resource metadata
// and the authorization server's metadata, registers the client, and hands the authorization
// URL (PKCE S256, `resource`) to `redirectToAuthorization`. There the user's "browser" opens it
// (the test authorization server approves at once) and keeps the redirect back without
// following it; `connect` then fails with `UnauthorizedError`, `transport.finishAuth` redeems
// the code (with `iss`, RFC 9207) and a new transport connects with the token. The
// authorization server is https with a test certificate authority: node trusts it through
// NODE_EXTRA_CA_CERTS.
import { Client, StreamableHTTPClientTransport, UnauthorizedError } from "@modelcontextprotocol/client";
import { randomUUID } from "node:crypto";

// Where the browser is sent back to; nothing listens there: the redirect is read, not followed.
const REDIRECT_URI = "http://127.0.0.1:1/callback";

const [scenario, url] = process.argv.slice(2);
if (!["legacy-confidential", "modern-public"].includes(scenario)) throw new Error(`unknown scenario ${scenario}`);
const modern = scenario === "modern-public";

/** `OAuthClientProvider` with everything in memory, for one sign-in to one server. */
class MemoryProvider {
  constructor(clientMetadata) {
    this._clientMetadata = clientMetadata;
    this._client = undefined;
    this._tokens = undefined;
    this._codeVerifier = undefined;
    this._discovery = undefined;
    this._state = undefined;
    this.callback = undefined; // the redirect back's query: code, state, iss
    this.opened = []; // authorization URLs the browser opened
    this.saved = []; // every token set saved, in order
  }

  get redirectUrl() {
    return REDIRECT_URI;
  }

  get clientMetadata() {
    return this._clientMetadata;
  }

  // The SDK sends it and does not check it on the way back (see finishAuth): the browser does.
  state() {
    this._state = randomUUID();
    return this._state;
  }

  clientInformation() {
    return this._client;
  }

  saveClientInformation(info) {
    this._client = info;
  }

  tokens() {
    return this._tokens;
  }

  saveTokens(tokens) {
    this._tokens = tokens;
    this.saved.push(tokens);
  }

  saveCodeVerifier(verifier) {
    this._codeVerifier = verifier;
  }

  codeVerifier() {
    if (!this._codeVerifier) throw new Error("no code verifier saved");
    return this._codeVerifier;
  }

  // Kept across the redirect with the code verifier: on the callback leg the SDK checks that
  // the authorization server is the one the code came from (and refuses when a provider that
  // saves discovery state has none).
  saveDiscoveryState(state) {
    this._discovery = state;
  }

  discoveryState() {
    return this._discovery;
  }

  // The user's browser: opens the URL (the server approves at once for its user) and reads the
  // redirect back without following it.
  async redirectToAuthorization(authorizationUrl) {
    this.opened.push(authorizationUrl.href);
    const response = await fetch(authorizationUrl, { redirect: "manual" });
    const body = await response.text();
    if (response.status !== 302) throw new Error(`/authorize answered ${response.status}: ${body.slice(0, 500)}`);
    const location = response.headers.get("location");
    if (!location?.startsWith(REDIRECT_URI + "?")) throw new Error(`redirected to ${location}`);
    const params = new URL(location).searchParams;
    if (params.has("error")) throw new Error(`authorization refused: ${location}`);
    if (params.get("state") !== this._state) throw new Error(`state ${params.get("state")} is not ${this._state}`);
    this.callback = params;
  }
}

const clientMetadata = {
  client_name: "tally-e2e-typescript",
  redirect_uris: [REDIRECT_URI],
  grant_types: ["authorization_code", "refresh_token"],
  response_types: ["code"],
  ...(modern ? { token_endpoint_auth_method: "none" } : {}),
};
const provider = new MemoryProvider(clientMetadata);
// Every request the SDK makes (to Tally and to the authorization server) goes through this
// fetch; the browser's does not.
const sent = [];
const recordingFetch = async (input, init) => {
  const response = await fetch(input, init);
  sent.push({ method: init?.method ?? "GET", url: String(input instanceof Request ? input.url : input), status: response.status });
  return response;
};
const newTransport = () =>
  new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: recordingFetch });
const newClient = () =>
  new Client(
    { name: "tally-e2e-typescript-oauth", version: "1.0.0" },
    modern ? { versionNegotiation: { mode: { pin: "2026-07-28" } } } : {},
  );

const text = (result) => JSON.parse(result.content[0].text);
const seen = { scenario, calls: {} };
let client;
try {
  // 1. Without a token: the SDK discovers, registers and sends the browser to /authorize.
  const first = newTransport();
  client = newClient();
  try {
    await client.connect(first);
    throw new Error("connected without signing in");
  } catch (error) {
    if (!UnauthorizedError.isInstance(error)) throw error;
    seen.firstConnect = { name: error.name, message: error.message };
  }
  await client.close().catch(() => {});
  if (!provider.callback) throw new Error("the SDK did not send the browser to the authorization server");
  seen.registered = {
    token_endpoint_auth_method: provider.clientInformation()?.token_endpoint_auth_method ?? null,
    has_secret: provider.clientInformation()?.client_secret !== undefined,
  };

  // 2. The redirect back: the code (and the issuer) redeemed for tokens.
  await first.finishAuth(provider.callback);
  seen.tokensAfterSignIn = provider.saved.length;

  // 3. Connected with the token, every tool called.
  client = newClient();
  await client.connect(newTransport());
  seen.era = client.getNegotiatedProtocolVersion();
  seen.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  const call = async (name, args) => {
    const result = await client.callTool({ name, arguments: args });
    const answer = text(result);
    seen.calls[name] = { isError: result.isError ?? false, answer };
    return answer;
  };
  await call("list_datasets", {});
  await call("inspect_dataset", { dataset_id: "procedures" });
  await call("query_records", {
    dataset_id: "procedures",
    where: { 所管府省庁: ["デジタル庁"] },
    select: ["手続ID", "手続名"],
    limit: 3,
  });
  const summary = await call("summarize_records", {
    dataset_id: "procedures",
    group_by: ["所管府省庁"],
    metrics: ["count"],
    limit: 5,
  });
  await call("cite_provisions", { dataset_id: "refs" });
  await call("verify_answer", { envelope: summary });

  // 4. The access token is refused (as when it has run out): the SDK's answer to the 401 is a
  // refresh, and the request is sent again with the new token.
  // One character in the middle of its signature changed (the last ones may carry only padding).
  const before = provider.tokens();
  const [head, body, signature] = before.access_token.split(".");
  const middle = signature.length >> 1;
  const altered = signature.slice(0, middle) + (signature[middle] === "A" ? "B" : "A") + signature.slice(middle + 1);
  provider._tokens = { ...before, access_token: [head, body, altered].join(".") };
  const again = await client.callTool({ name: "list_datasets", arguments: {} });
  seen.afterRefresh = {
    isError: again.isError ?? false,
    datasets: text(again).data?.datasets?.length ?? null,
    refreshed: provider.tokens().access_token !== before.access_token,
    refreshTokenRotated: provider.tokens().refresh_token !== before.refresh_token,
  };
} catch (error) {
  seen.error = { name: error?.name ?? null, message: String(error?.message ?? error), code: error?.code ?? null };
}
await client?.close().catch(() => {});
seen.opened = provider.opened;
seen.sent = sent;
seen.tokens = provider.saved.map((t) => ({ access_token: t.access_token, refresh_token: t.refresh_token ?? null, scope: t.scope ?? null }));
console.log(JSON.stringify(seen));
