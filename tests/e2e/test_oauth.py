"""Tally as an OAuth 2.1 resource server, end to end: the real `tally` binary, an authorization
server run by the test over https on 127.0.0.1 (`oauth_server.py`: the SDK's own authorization
endpoints, RS256 JWTs, a key set, introspection), and the official MCP Python SDK's OAuth
client, which finds the authorization server from Tally's 401, registers, signs in with PKCE
and calls every tool. Around it, the resource server's side of the specifications: protected
resource metadata (RFC 9728) and its challenge, audience binding (RFC 8707), the tokens it must
refuse (forged, expired, for another issuer or resource, `alg: none`, HMAC keyed with the
public key, unknown keys), a key set fetched sparingly and kept while its issuer is down,
opaque tokens by introspection (RFC 7662), no token in a URL, static tokens beside OAuth, and
no token in the audit log."""

import json
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken, ProtectedResourceMetadata

from conftest import HttpServer, ROOT, datasets_dir, tally_bin
from oauth_server import (
    AuthorizationServer,
    claims_of,
    hs256_keyed_with,
    new_key,
    unsigned,
    with_altered_claims,
    with_altered_signature,
)

pytestmark = pytest.mark.anyio

TIMEOUT = 60
TOOLS = {"list_datasets", "inspect_dataset", "query_records", "summarize_records", "cite_provisions", "verify_answer"}
STATIC = "static-ci-token-0123456789abcdef"
SECRET_ENV = "TALLY_TEST_OAUTH_CLIENT_SECRET"
# Where the "browser" is sent back to; nothing listens there: the redirect is read, not followed.
REDIRECT_URI = "http://127.0.0.1:1/callback"

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# ---- servers ------------------------------------------------------------------------------------


def tally(auth: AuthorizationServer, *extra_args: str, datasets: str | None = None, env: dict | None = None) -> HttpServer:
    """`tally serve --http 127.0.0.1:0` taking the access tokens `auth` issues; failed
    authentications are not rate limited (these tests fail many on purpose)."""
    return HttpServer(
        "--oauth-issuer", auth.issuer,
        "--oauth-ca-cert", str(auth.ca_file),
        "--auth-failures-per-minute", "100000",
        "--rate-limit", "100000", "--rate-burst", "100000",
        *extra_args,
        datasets=datasets, env=env,
    )


# A law of two articles in e-Gov's XML and a dataset of references linked to it, beside the
# default datasets, so that cite_provisions has provisions to cite.
LAW_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<Law Era="Reiwa" Lang="ja" LawType="Act" Num="1" Year="07"><LawNum>令和七年法律第一号</LawNum>'
    "<LawBody><LawTitle>試験手続法</LawTitle><MainProvision>"
    '<Article Num="1"><ArticleCaption>（目的）</ArticleCaption><ArticleTitle>第一条</ArticleTitle>'
    '<Paragraph Num="1"><ParagraphNum/><ParagraphSentence><Sentence>この法律は、試験の手続を定める。</Sentence>'
    "</ParagraphSentence></Paragraph></Article>"
    '<Article Num="2"><ArticleCaption>（申請）</ArticleCaption><ArticleTitle>第二条</ArticleTitle>'
    '<Paragraph Num="1"><ParagraphNum/><ParagraphSentence><Sentence>申請は、書面でする。</Sentence>'
    "</ParagraphSentence></Paragraph>"
    '<Paragraph Num="2"><ParagraphNum>２</ParagraphNum><ParagraphSentence>'
    "<Sentence>前項の申請は、電子情報処理組織を使用してすることができる。</Sentence></ParagraphSentence></Paragraph>"
    "</Article></MainProvision></LawBody></Law>"
)


def datasets_with_a_law(root: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.copytree(datasets_dir(), root)
    (root / "laws" / "xml").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples" / "laws" / "dataset.yaml", root / "laws" / "dataset.yaml")
    (root / "laws" / "xml" / "507AC0000000001_20250401_000000000000000.xml").write_text(LAW_XML, encoding="utf-8")
    (root / "refs").mkdir()
    pq.write_table(
        pa.table({
            "id": ["r1", "r2", "r3"],
            "law": ["令和七年法律第一号"] * 3,
            "ref": ["第1条", "第2条第1項", "第2条第2項"],
            "kind": ["目的", "申請", "申請"],
        }),
        root / "refs" / "data.parquet",
    )
    (root / "refs" / "dataset.yaml").write_text(
        "title: References\n"
        "links: [{to: laws, on: {law: law_num, ref: locator}}]\n"
        "fields:\n- {name: id, role: id}\n- {name: law, role: dim}\n- {name: ref, role: attr}\n- {name: kind, role: dim}\n",
        encoding="utf-8",
    )
    return root


@pytest.fixture(scope="module")
def auth(tmp_path_factory):
    server = AuthorizationServer(tmp_path_factory.mktemp("oauth-as")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rs(auth, tmp_path_factory):
    """Tally with OAuth (key set found from the issuer's metadata), introspection for opaque
    tokens, a static token file and an audit log."""
    tmp = tmp_path_factory.mktemp("oauth-rs")
    tokens = tmp / "tokens"
    tokens.write_text(f"# id token [datasets]\nci {STATIC}\n", encoding="utf-8")
    audit = tmp / "audit.jsonl"
    server = tally(
        auth,
        "--oauth-introspection-url", auth.introspection_url,
        "--oauth-client-id", auth.introspection_client_id,
        "--oauth-client-secret-env", SECRET_ENV,
        "--token-file", str(tokens),
        "--audit-log", str(audit),
        datasets=str(datasets_with_a_law(tmp / "datasets")),
        env={SECRET_ENV: auth.introspection_client_secret},
    )
    server.audit = audit
    yield server
    server.stop()


# ---- helpers ------------------------------------------------------------------------------------


def post_initialize(server: HttpServer, token: str | None = None, **kwargs) -> httpx2.Response:
    headers = {**ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx2.post(server.url, json=INIT, headers=headers, timeout=TIMEOUT, **kwargs)


def challenge(response: httpx2.Response) -> tuple[str, dict]:
    """The WWW-Authenticate challenge: its scheme and its parameters (RFC 9110 §11.6.1)."""
    header = response.headers.get("www-authenticate")
    assert header, f"{response.status_code} without WWW-Authenticate: {response.text}"
    scheme, _, rest = header.partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in re.finditer(r'([A-Za-z_][\w-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))', rest)
    }
    return scheme, params


def refusal(response: httpx2.Response) -> str:
    """A refusal's JSON body: what was wrong and what would work."""
    error = response.json()["error"]
    assert error["message"] and error["fix"], error
    return error["message"]


def metadata_url(server: HttpServer) -> str:
    return f"{server.base}/.well-known/oauth-protected-resource/mcp"


def assert_invalid_token(server: HttpServer, response: httpx2.Response) -> str:
    assert response.status_code == 401, (response.status_code, response.text)
    scheme, params = challenge(response)
    assert scheme.lower() == "bearer"
    assert params.get("error") == "invalid_token", params
    assert params.get("error_description"), params
    assert params.get("resource_metadata") == metadata_url(server), params
    assert params.get("scope") == "tally", params
    refusal(response)
    return params["error_description"]


def audit_lines(server: HttpServer) -> list[dict]:
    if not server.audit.exists():
        return []
    return [json.loads(line) for line in server.audit.read_text(encoding="utf-8").splitlines()]


async def caller_of(server: HttpServer, token: str) -> str:
    """Calls list_datasets with `token` through the SDK client; the caller the audit log names."""
    before = len(audit_lines(server))
    with anyio.fail_after(TIMEOUT):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT) as http:
            async with Client(streamable_http_client(server.url, http_client=http), mode="legacy", cache=None,
                              read_timeout_seconds=TIMEOUT) as c:
                r = await c.call_tool("list_datasets", {})
                assert not r.is_error, r.content[0].text
    (line,) = audit_lines(server)[before:]
    assert line["tool"] == "list_datasets"
    return line["caller"]


def now() -> int:
    return int(time.time())


# ---- the SDK's OAuth client -------------------------------------------------------------------


class MemoryTokenStorage:
    """`mcp.client.auth.TokenStorage` in memory."""

    def __init__(self):
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """The user's browser: opens the authorization URL the SDK hands it (the server approves
    at once for its user) and reads `code`, `state` and `iss` from the redirect back."""

    def __init__(self, auth: AuthorizationServer):
        self.auth = auth
        self.opened: list[str] = []
        self._result: AuthorizationCodeResult | None = None

    async def redirect_handler(self, authorization_url: str) -> None:
        self.opened.append(authorization_url)
        async with httpx2.AsyncClient(verify=self.auth.client_ssl_context(), timeout=TIMEOUT) as browser:
            r = await browser.get(authorization_url)
        assert r.status_code == 302, (r.status_code, r.text)
        location = r.headers["location"]
        assert location.startswith(REDIRECT_URI + "?"), location
        query = parse_qs(urlsplit(location).query)
        assert "error" not in query, query
        self._result = AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    async def callback_handler(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        assert result is not None, "the callback came before the redirect"
        return result


def oauth_provider(server: HttpServer, storage: MemoryTokenStorage, browser: Browser,
                   token_endpoint_auth_method: str | None = None) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=server.url,
        client_metadata=OAuthClientMetadata(
            client_name="tally-e2e",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method=token_endpoint_auth_method,
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )


def body(result) -> dict:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


# ---- the SDK signs in and calls every tool ------------------------------------------------------


@pytest.mark.parametrize(
    "mode, client_auth",
    [("legacy", None), ("2026-07-28", "none")],
    ids=["2025-era, confidential client", "2026-07-28, public client"],
)
async def test_the_sdk_signs_in_with_pkce_and_calls_every_tool(auth, rs, mode, client_auth):
    storage, browser = MemoryTokenStorage(), Browser(auth)
    provider = oauth_provider(rs, storage, browser, client_auth)
    sent: list[tuple[str, str]] = []

    async def record(request):
        sent.append((request.method, str(request.url)))

    audit_before, approvals_before, refreshes_before = len(audit_lines(rs)), len(auth.authorizations), auth.refreshes
    with anyio.fail_after(TIMEOUT):
        async with httpx2.AsyncClient(auth=provider, verify=auth.client_ssl_context(), timeout=TIMEOUT,
                                      event_hooks={"request": [record]}) as http:
            async with Client(streamable_http_client(rs.url, http_client=http), mode=mode, cache=None,
                              read_timeout_seconds=TIMEOUT) as c:
                assert {t.name for t in (await c.list_tools()).tools} == TOOLS
                listed = body(await c.call_tool("list_datasets", {}))
                assert {"procedures", "guide", "laws", "refs"} <= {d["dataset_id"] for d in listed["data"]["datasets"]}
                inspected = body(await c.call_tool("inspect_dataset", {"dataset_id": "procedures"}))
                assert "所管府省庁" in [f["name"] for f in inspected["data"]["fields"]]
                queried = body(await c.call_tool("query_records", {
                    "dataset_id": "procedures", "where": {"所管府省庁": ["デジタル庁"]}, "select": ["手続ID", "手続名"], "limit": 3,
                }))
                assert queried["data"]["columns"] == ["手続ID", "手続名"] and len(queried["data"]["rows"]) == 3
                summary = body(await c.call_tool("summarize_records", {
                    "dataset_id": "procedures", "group_by": ["所管府省庁"], "metrics": ["count"], "limit": 5,
                }))
                assert summary["data"]["rows"][0][:2] == ["国土交通省", 13645]
                cited = body(await c.call_tool("cite_provisions", {"dataset_id": "refs"}))
                assert [row[1] for row in cited["data"]["rows"]] == ["第一条", "第二条第一項", "第二条第二項"]
                checked = body(await c.call_tool("verify_answer", {"envelope": summary}))
                assert checked["data"]["status"] == "identical", checked["data"]

                # The access token runs out: the SDK refreshes it before its next request, and
                # the new token is accepted.
                first = storage.tokens
                provider.context.token_expiry_time = time.time() - 1
                body(await c.call_tool("list_datasets", {}))
                assert auth.refreshes == refreshes_before + 1
                assert storage.tokens.access_token != first.access_token

    # What the SDK did: discovery from the 401, registration, one sign-in, one token.
    print("the SDK's requests:", *sent, sep="\n  ")
    urls = [url for _, url in sent]
    assert metadata_url(rs) in urls, "the protected resource metadata named in the challenge"
    assert auth.url("/.well-known/oauth-authorization-server") in urls
    assert ("POST", auth.url("/register")) in sent and ("POST", auth.url("/token")) in sent
    (opened,) = browser.opened
    asked = parse_qs(urlsplit(opened).query)
    assert asked["code_challenge_method"] == ["S256"] and asked["resource"] == [rs.url], asked
    (approval,) = auth.authorizations[approvals_before:]
    assert approval["resource"] == rs.url and approval["scopes"] == ["tally"], approval
    issued = claims_of(first.access_token)
    assert issued["aud"] == rs.url and issued["sub"] == "alice" and issued["iss"] == auth.issuer, issued
    assert claims_of(storage.tokens.access_token)["aud"] == rs.url

    # The audit log names the caller by the token's subject, and holds no token.
    lines = audit_lines(rs)[audit_before:]
    assert sorted(line["tool"] for line in lines) == sorted([*TOOLS, "list_datasets"]), lines
    assert {line["caller"] for line in lines} == {"oauth:alice"}, lines
    text = rs.audit.read_text(encoding="utf-8")
    for token in (first.access_token, first.refresh_token, storage.tokens.access_token, storage.tokens.refresh_token):
        assert token not in text


async def test_the_sdk_signs_in_again_when_tally_says_insufficient_scope(auth, rs):
    """The user grants no scope at the first sign-in: Tally answers the token 403
    `insufficient_scope`, and the SDK's next request reads the challenge and signs in again
    for the scope it names (SEP-2350 step-up)."""
    storage, browser = MemoryTokenStorage(), Browser(auth)
    provider = oauth_provider(rs, storage, browser)
    auth.next_grant = ""
    with anyio.fail_after(TIMEOUT):
        async with httpx2.AsyncClient(auth=provider, verify=auth.client_ssl_context(), timeout=TIMEOUT) as http:
            # The retry after the first sign-in is the SDK's last word for that request: the
            # 403 it gets ends the connection.
            with pytest.raises(Exception) as refused:
                async with Client(streamable_http_client(rs.url, http_client=http), mode="legacy", cache=None,
                                  read_timeout_seconds=TIMEOUT) as c:
                    await c.list_tools()
            print("with a token without the scope:", repr(refused.value)[:300])
            assert claims_of(storage.tokens.access_token)["scope"] == ""
            async with Client(streamable_http_client(rs.url, http_client=http), mode="legacy", cache=None,
                              read_timeout_seconds=TIMEOUT) as c:
                body(await c.call_tool("list_datasets", {}))
    assert len(browser.opened) == 2
    asked = parse_qs(urlsplit(browser.opened[1]).query)
    assert asked["scope"] == ["tally"], asked
    assert claims_of(storage.tokens.access_token)["scope"] == "tally"


# ---- what a client without a token is told ---------------------------------------------------


def test_the_protected_resource_metadata(auth, rs):
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        r = httpx2.get(rs.base + path, timeout=TIMEOUT)  # no token
        assert r.status_code == 200, (path, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json")
        doc = r.json()
        print(path, json.dumps(doc, indent=1))
        assert doc["resource"] == rs.url
        assert doc["authorization_servers"] == [auth.issuer]
        assert doc["scopes_supported"] == ["tally"]
        assert doc["bearer_methods_supported"] == ["header"]
        assert doc["resource_name"] == "Tally"
        # As the SDK reads it: the same resource and issuer, character for character (the
        # SDK compares the resource with the URL it connects to, and the issuer as a string).
        parsed = ProtectedResourceMetadata.model_validate(doc)
        assert str(parsed.resource) == rs.url and [str(s) for s in parsed.authorization_servers] == [auth.issuer]


def test_the_401_challenge_points_to_the_metadata(auth, rs):
    r = post_initialize(rs)
    assert r.status_code == 401
    scheme, params = challenge(r)
    assert scheme.lower() == "bearer"
    assert params["resource_metadata"] == metadata_url(rs)
    assert params["scope"] == "tally"
    # RFC 6750 §3.1: a request without credentials gets no error code.
    assert "error" not in params, params
    print("without a token:", refusal(r))
    assert httpx2.get(params["resource_metadata"], timeout=TIMEOUT).json()["resource"] == rs.url

    description = assert_invalid_token(rs, post_initialize(rs, "not-a-token-at-all-0123456789"))
    print("with a made-up token:", description)


@pytest.mark.parametrize("claims", [
    {"scope": "openid profile"},
    {"scope": None, "scp": ["openid", "profile"]},
    {"scope": None},
], ids=["scope without tally", "scp without tally", "no scope at all"])
def test_a_token_without_the_scope_is_answered_403(auth, rs, claims):
    r = post_initialize(rs, auth.token(rs.url, **claims))
    assert r.status_code == 403, (r.status_code, r.text)
    scheme, params = challenge(r)
    assert scheme.lower() == "bearer"
    assert params["error"] == "insufficient_scope", params
    assert params["scope"] == "tally" and params["resource_metadata"] == metadata_url(rs), params
    print(refusal(r))


def test_a_refusal_leaves_the_connection_usable_or_says_it_closes(auth, rs):
    """An OAuth client's first request is refused by design (the 401 that points to the
    metadata), and the SDK sends its next requests on the same kept-alive connection. A
    refusal answered before the request's body has arrived must then either leave the
    connection usable or say `Connection: close`: closing it silently makes the client's next
    request fail with "Server disconnected without sending a response" (intermittently, when
    the body comes in a later packet than the headers; here it comes 0.2 s later)."""
    import http.client

    payload = json.dumps(INIT).encode()
    cases = {
        "no token": {},
        "a made-up token": {"Authorization": "Bearer not-a-token-at-all-0123456789"},
        "a token without the scope": {"Authorization": f"Bearer {auth.token(rs.url, scope='openid')}"},
    }
    for case, headers in cases.items():
        conn = http.client.HTTPConnection("127.0.0.1", rs.port, timeout=TIMEOUT)
        try:
            conn.putrequest("POST", "/mcp", skip_accept_encoding=True)
            for name, value in {**ACCEPT, **headers, "Content-Length": str(len(payload))}.items():
                conn.putheader(name, value)
            conn.endheaders()
            time.sleep(0.2)
            conn.send(payload)
            first = conn.getresponse()
            first.read()
            assert first.status in (401, 403), (case, first.status)
            if first.will_close:
                continue  # said: the client opens a new connection
            try:
                conn.request("POST", "/mcp", body=payload, headers={**ACCEPT, **headers})
                second = conn.getresponse()
                second.read()
            except (http.client.RemoteDisconnected, ConnectionError) as e:
                pytest.fail(f"{case}: the {first.status} did not say `Connection: close`, but the connection was "
                            f"closed under the next request on it ({e!r})")
            assert second.status == first.status, (case, second.status)
        finally:
            conn.close()


def test_a_token_in_the_query_string_is_refused(auth, rs):
    token = auth.token(rs.url)
    for headers in ({}, {"Authorization": f"Bearer {token}"}):
        r = httpx2.post(rs.url, params={"access_token": token}, json=INIT, headers={**ACCEPT, **headers}, timeout=TIMEOUT)
        assert r.status_code == 400, (r.status_code, r.text)
        _, params = challenge(r)
        assert params["error"] == "invalid_request", params
        print(refusal(r))
    assert post_initialize(rs, token).status_code == 200, "the same token in the header"


# ---- tokens refused and accepted ----------------------------------------------------------------

REFUSED = {
    "signature altered": lambda a, res: with_altered_signature(a.token(res)),
    "claims altered, signature kept": lambda a, res: with_altered_claims(a.token(res), sub="mallory"),
    "expired an hour ago": lambda a, res: a.token(res, exp=now() - 3600, iat=now() - 7200, nbf=now() - 7200),
    "nbf an hour ahead": lambda a, res: a.token(res, nbf=now() + 3600),
    "iat an hour ahead": lambda a, res: a.token(res, iat=now() + 3600, nbf=None),
    "another issuer": lambda a, res: a.token(res, iss="https://issuer.example"),
    "the issuer with a trailing slash": lambda a, res: a.token(res, iss=a.issuer + "/"),
    "another resource": lambda a, res: a.token(res, aud="http://127.0.0.1:1/mcp"),
    "another path of this server": lambda a, res: a.token(res, aud=res.rsplit("/", 1)[0] + "/other"),
    "no aud": lambda a, res: a.token(res, aud=None),
    "no exp": lambda a, res: a.token(res, exp=None),
    "no sub": lambda a, res: a.token(res, sub=None),
    "alg none": lambda a, res: unsigned(a.claims(res), "none", a.rsa.kid),
    "alg NONE": lambda a, res: unsigned(a.claims(res), "NONE", a.rsa.kid),
    "HS256 keyed with the RSA public key (SPKI PEM)": lambda a, res: hs256_keyed_with(a.claims(res), a.rsa.public_pem(), a.rsa.kid),
    "HS256 keyed with the RSA public key (PKCS#1 PEM)": lambda a, res: hs256_keyed_with(a.claims(res), a.rsa.public_pem(pkcs1=True), a.rsa.kid),
    "HS256 keyed with the JWK": lambda a, res: hs256_keyed_with(a.claims(res), json.dumps(a.rsa.jwk()).encode(), a.rsa.kid),
    "RS384 with the published key": lambda a, res: a.token(res, alg="RS384"),
    "a kid the issuer does not publish": lambda a, res: a.token(res, key=new_key("EdDSA")),
    "an unpublished key under a published kid": lambda a, res: a.token(res, key=new_key("RS256"), kid=a.rsa.kid),
    "ES256 under the RSA key's kid": lambda a, res: a.token(res, key=new_key("ES256"), kid=a.rsa.kid),
    "EdDSA under the ES256 key's kid": lambda a, res: a.token(res, key=new_key("EdDSA"), kid=a.es.kid),
    "an unpublished key without a kid": lambda a, res: a.token(res, key=new_key("EdDSA"), kid=None),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_bad_token_is_answered_401_invalid_token(auth, rs, case):
    token = REFUSED[case](auth, rs.url)
    description = assert_invalid_token(rs, post_initialize(rs, token))
    print(f"{case}: {description}")


ACCEPTED = {
    "RS256": lambda a, res, sub: a.token(res, sub=sub),
    "ES256": lambda a, res, sub: a.token(res, key=a.es, sub=sub),
    "EdDSA": lambda a, res, sub: a.token(res, key=a.ed, sub=sub),
    "RS256 without a kid": lambda a, res, sub: a.token(res, kid=None, sub=sub),
    "ES256 without a kid": lambda a, res, sub: a.token(res, key=a.es, kid=None, sub=sub),
    "EdDSA without a kid": lambda a, res, sub: a.token(res, key=a.ed, kid=None, sub=sub),
    "aud a list": lambda a, res, sub: a.token(res, aud=["https://other.example/mcp", res], sub=sub),
    "scopes in scp": lambda a, res, sub: a.token(res, scope=None, scp=["tally"], sub=sub),
    "tally among other scopes": lambda a, res, sub: a.token(res, scope="openid tally profile", sub=sub),
    "typ JWT": lambda a, res, sub: a.token(res, headers={"typ": "JWT"}, sub=sub),
    "nbf 30 s ahead, within the skew": lambda a, res, sub: a.token(res, nbf=now() + 30, sub=sub),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
async def test_a_good_token_is_accepted_and_names_its_subject(auth, rs, case):
    sub = "user-" + re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")
    token = ACCEPTED[case](auth, rs.url, sub)
    assert post_initialize(rs, token).status_code == 200
    assert await caller_of(rs, token) == f"oauth:{sub}"


def test_a_configured_resource_and_scopes(auth):
    resource = "https://tally.example.org/mcp"
    server = tally(auth, "--oauth-resource", resource, "--oauth-scope", "tally", "--oauth-scope", "survey:read")
    try:
        prm = httpx2.get(metadata_url(server), timeout=TIMEOUT).json()
        assert prm["resource"] == resource and set(prm["scopes_supported"]) == {"tally", "survey:read"}, prm
        _, params = challenge(post_initialize(server))
        # RFC 9728 §3.1: the metadata's address is the resource's own origin and path.
        assert params["resource_metadata"] == "https://tally.example.org/.well-known/oauth-protected-resource/mcp", params
        assert set(params["scope"].split()) == {"tally", "survey:read"}, params
        assert post_initialize(server, auth.token(resource, scope="tally survey:read")).status_code == 200
        r = post_initialize(server, auth.token(resource))
        assert r.status_code == 403 and challenge(r)[1]["error"] == "insufficient_scope"
        # A token for the server's own address is not one for the configured resource.
        r = post_initialize(server, auth.token(server.url, scope="tally survey:read"))
        assert r.status_code == 401 and challenge(r)[1]["error"] == "invalid_token"
    finally:
        server.stop()


# ---- the issuer's key set ---------------------------------------------------------------------


async def test_a_flood_of_unknown_key_ids_fetches_the_key_set_at_most_twice(auth):
    fetches, metadata = auth.jwks_fetches, auth.metadata_fetches
    server = tally(auth)
    try:
        stranger = new_key("EdDSA")
        tokens = [auth.token(server.url, key=stranger, kid=secrets.token_hex(8)) for _ in range(50)]
        codes: list[int] = []
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(timeout=TIMEOUT, limits=httpx2.Limits(max_connections=16)) as h:
                async def one(token):
                    # A connection each (test_a_refusal_leaves_the_connection_usable_or_says_it_closes
                    # is about reusing one after a refusal).
                    headers = {**ACCEPT, "Authorization": f"Bearer {token}", "Connection": "close"}
                    r = await h.post(server.url, json=INIT, headers=headers)
                    codes.append(r.status_code)

                async with anyio.create_task_group() as tg:
                    for token in tokens:
                        tg.start_soon(one, token)
        assert codes == [401] * 50, codes
        print(f"50 unknown kids: {auth.jwks_fetches - fetches} key set fetches, {auth.metadata_fetches - metadata} metadata fetches")
        assert auth.jwks_fetches - fetches <= 2
        assert auth.metadata_fetches - metadata <= 2
        # The keys it has still work, without another fetch.
        assert post_initialize(server, auth.token(server.url)).status_code == 200
        assert auth.jwks_fetches - fetches <= 2
    finally:
        server.stop()


def test_the_keys_are_kept_while_the_key_set_is_down(tmp_path):
    with AuthorizationServer(tmp_path / "as") as auth:
        server = tally(auth)
        try:
            assert post_initialize(server, auth.token(server.url)).status_code == 200
            assert auth.jwks_fetches >= 1
            auth.jwks_status = 503
            assert post_initialize(server, auth.token(server.url)).status_code == 200
            # A key rotated in while the key set cannot be read: its tokens cannot be checked.
            rotated = auth.rotate()
            description = assert_invalid_token(server, post_initialize(server, auth.token(server.url, key=rotated)))
            print("a rotated key while the key set is down:", description)
            # The keys fetched before are kept.
            assert post_initialize(server, auth.token(server.url, key=auth.rsa)).status_code == 200
        finally:
            server.stop()


def test_a_server_that_never_had_the_keys_answers_503(tmp_path):
    with AuthorizationServer(tmp_path / "as") as auth:
        auth.jwks_status = 503
        server = tally(auth)
        try:
            r = post_initialize(server, auth.token(server.url))
            assert r.status_code == 503, (r.status_code, r.text)
            assert int(r.headers["retry-after"]) >= 1
            print(refusal(r))
        finally:
            server.stop()


def test_the_key_set_is_found_by_discovery_or_given(tmp_path):
    with AuthorizationServer(tmp_path / "as") as auth:
        # Only OpenID Connect discovery: the fallback finds jwks_uri.
        auth.serve_oauth_metadata = False
        server = tally(auth)
        try:
            assert post_initialize(server, auth.token(server.url)).status_code == 200
            assert ("GET", "/.well-known/openid-configuration") in auth.requests
        finally:
            server.stop()
        # No metadata at all: the key set's address given.
        auth.serve_openid_configuration = False
        server = tally(auth, "--oauth-jwks-url", auth.jwks_url)
        try:
            assert post_initialize(server, auth.token(server.url)).status_code == 200
        finally:
            server.stop()
        # Neither: no keys, 503.
        server = tally(auth)
        try:
            r = post_initialize(server, auth.token(server.url))
            assert r.status_code == 503 and r.headers.get("retry-after"), (r.status_code, r.text)
            print(refusal(r))
        finally:
            server.stop()


def test_the_issuer_is_read_over_https_only():
    for flags in (["--oauth-issuer", "http://issuer.example"],
                  ["--oauth-issuer", "https://issuer.example", "--oauth-jwks-url", "http://issuer.example/jwks"]):
        r = subprocess.run([tally_bin(), "serve", "--http", "127.0.0.1:0", "--datasets", datasets_dir(), *flags],
                           capture_output=True, text=True, timeout=30)
        # Exit code 5: the setup is refused (see README, exit codes).
        assert r.returncode == 5 and "https" in r.stderr, (flags, r.returncode, r.stderr)


# ---- opaque tokens, static tokens -------------------------------------------------------------


async def test_opaque_tokens_are_introspected(auth, rs):
    bob = auth.opaque_token(rs.url, sub="bob")
    before = auth.introspections
    assert await caller_of(rs, bob) == "oauth:bob"
    # One question for the whole session (the answer is kept a while), asked as the client
    # the issuer knows.
    assert auth.introspections - before == 1
    assert auth.introspections_refused == 0
    # An answer without `iss` is taken (introspection answers need not name it).
    assert await caller_of(rs, auth.opaque_token(rs.url, sub="carol", iss=None)) == "oauth:carol"

    refused = {
        "inactive": auth.opaque_token(rs.url, active=False),
        "unknown": "opaque_" + secrets.token_urlsafe(32),
        "for another resource": auth.opaque_token("http://127.0.0.1:1/mcp"),
        "from another issuer": auth.opaque_token(rs.url, iss="https://issuer.example"),
        "expired, though the issuer says active": auth.opaque_token(rs.url, exp=now() - 3600, iat=now() - 7200),
    }
    for case, token in refused.items():
        print(f"{case}: {assert_invalid_token(rs, post_initialize(rs, token))}")
    r = post_initialize(rs, auth.opaque_token(rs.url, scope="openid"))
    assert r.status_code == 403 and challenge(r)[1]["error"] == "insufficient_scope", (r.status_code, r.text)


async def test_static_tokens_still_work_beside_oauth(auth, rs):
    assert await caller_of(rs, STATIC) == "ci"
    assert_invalid_token(rs, post_initialize(rs, STATIC[:-1] + "x"))


def test_no_token_is_written_to_the_audit_log_or_the_server_log(auth, rs):
    audit = rs.audit.read_text(encoding="utf-8") if rs.audit.exists() else ""
    log = "".join(rs.log)
    assert auth.minted
    for token in auth.minted:
        for secret in {token, token.rsplit(".", 1)[-1]} - {""}:
            assert secret not in audit and secret not in log
    assert STATIC not in audit and STATIC not in log


async def sdk_call(server: HttpServer, token: str, tool: str, arguments: dict) -> dict:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    with anyio.fail_after(TIMEOUT):
        async with Client(streamable_http_client(server.url, http_client=http), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT) as c:
            result = await c.call_tool(tool, arguments)
            return json.loads(result.content[0].text)


async def test_claims_and_scopes_grant_policies(auth, tmp_path):
    """A `groups` claim and a scope map to policies (--policy-file): one group sees one
    ministry's procedures without the procedure names, a scope sees everything, a caller
    granted nothing sees the default policy's datasets only."""
    import duckdb

    policies = tmp_path / "policies.yaml"
    policies.write_text(
        """policies:
  digital:
    datasets:
      procedures:
        hide: [手続名]
        rows: {所管府省庁: デジタル庁}
  everything:
    datasets: "*"
  guide-only:
    datasets: [guide]
grants:
  scopes: {"tally:all": [everything]}
  claims: {groups: {digital-team: [digital]}}
  default: [guide-only]
""",
        encoding="utf-8",
    )
    server = tally(auth, "--policy-file", str(policies))
    try:
        parquet = Path(datasets_dir()) / "procedures" / "data.parquet"
        digital = duckdb.connect().execute(
            f"SELECT count(*) FROM read_parquet('{parquet}') WHERE 所管府省庁 = 'デジタル庁'"
        ).fetchone()[0]
        everyone = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{parquet}')").fetchone()[0]
        count = {"dataset_id": "procedures", "metrics": ["count"]}

        member = auth.token(server.url, sub="dana", scope="tally", groups=["staff", "digital-team"])
        answer = await sdk_call(server, member, "summarize_records", count)
        assert answer["data"]["rows"] == [[digital]], answer
        inspected = await sdk_call(server, member, "inspect_dataset", {"dataset_id": "procedures"})
        assert "手続名" not in json.dumps(inspected, ensure_ascii=False)

        admin = auth.token(server.url, sub="root", scope="tally tally:all")
        answer = await sdk_call(server, admin, "summarize_records", count)
        assert answer["data"]["rows"] == [[everyone]], answer

        nobody = auth.token(server.url, sub="eve", scope="tally", groups=["staff"])
        listed = await sdk_call(server, nobody, "list_datasets", {})
        assert [d["dataset_id"] for d in listed["data"]["datasets"]] == ["guide"], listed
        hidden = await sdk_call(server, nobody, "summarize_records", count)
        assert hidden["error"]["code"] == "unknown_dataset", hidden
    finally:
        server.stop()


def test_asking_where_to_sign_in_is_not_a_failed_authentication(auth):
    """A client's first request carries no token: the challenge tells it where to sign in. With
    OAuth on, such requests are not counted among failed authentications (which are limited per
    address); a wrong token still is."""
    server = HttpServer(
        "--oauth-issuer", auth.issuer, "--oauth-ca-cert", str(auth.ca_file),
        "--auth-failures-per-minute", "3",
    )
    try:
        codes = [post_initialize(server).status_code for _ in range(12)]
        assert codes == [401] * 12, codes
        codes = [post_initialize(server, f"wrong-{i}").status_code for i in range(10)]
        assert codes[0] == 401 and codes[-1] == 429, codes
    finally:
        server.stop()


def test_an_issuer_on_every_address_needs_the_resource_named():
    """Bound to 0.0.0.0 the server cannot tell the URI clients reach it by: refused before it
    listens, with what works."""
    r = subprocess.run(
        [tally_bin(), "serve", "--http", "0.0.0.0:0", "--datasets", datasets_dir(),
         "--oauth-issuer", "https://id.example.org/realms/x"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 5 and "--oauth-resource" in r.stderr, r.stderr
