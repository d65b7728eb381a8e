"""Asking the user instead of refusing (issue 40): a field name that fits two fields equally
(`手続が行われるイベント` fits the individuals' and the businesses' one) is put to the user
of a client that declared elicitation, as a choice among the fields with their descriptions;
the call then runs with the choice, disclosed in `resolved_fields` as chosen by the user.

Driven with the official Python SDK's own elicitation callback: in a 2025 session the server
sends `elicitation/create` while the call waits; at 2026-07-28 it answers `input_required`
and the SDK calls again with the answer and the sealed `requestState`; inside a task the task
waits in `input_required` for `tasks/update`. A user who declines, and a client that cannot be
asked, get today's refusal."""

import json

import anyio
import pytest
from mcp import Client
from mcp.client import advertise
from mcp.shared.exceptions import MCPError
import mcp.types as types

from conftest import HttpServer, stdio_params, wait_for

pytestmark = pytest.mark.anyio

TIMEOUT = 120
AMBIGUOUS = {"dataset_id": "procedures", "group_by": ["手続が行われるイベント"], "limit": 3}
PERSONAL = "手続が行われるイベント(個人)"
BUSINESS = "手続が行われるイベント(法人)"


def target(transport: str, server: HttpServer | None):
    return stdio_params() if transport == "stdio" else server.url


@pytest.fixture(scope="module")
def server():
    s = HttpServer()
    yield s
    s.stop()


def body(r) -> dict:
    return json.loads(r.content[0].text)


class User:
    """A user at the client: answers each question with `choose(offered) -> (action, name)`,
    and remembers what was asked."""

    def __init__(self, choose):
        self.choose = choose
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context, params: types.ElicitRequestParams):
        self.asked.append(params)
        schema = params.requested_schema["properties"]["name"]
        offered = [o["const"] for o in schema["oneOf"]]
        action, name = self.choose(offered)
        if action != "accept":
            return types.ElicitResult(action=action)
        return types.ElicitResult(action="accept", content={"name": name})


def check_question(user: User):
    (params,) = user.asked
    assert "手続が行われるイベント" in params.message and "group_by" in params.message, params.message
    schema = params.requested_schema
    assert schema["type"] == "object" and schema["required"] == ["name"], schema
    options = schema["properties"]["name"]["oneOf"]
    assert [o["const"] for o in options] == [PERSONAL, BUSINESS], options
    # Each field is offered with its description.
    assert all(o["title"].startswith(o["const"] + " — ") for o in options), options


def check_chosen(envelope: dict, name: str):
    resolved = envelope["data"]["resolved_fields"]
    assert {"parameter": "group_by", "input": "手続が行われるイベント", "canonical": name, "chosen_by": "the user"} in resolved, resolved
    assert name in envelope["data"]["columns"], envelope["data"]["columns"]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_ambiguous_name_is_put_to_the_user(transport, mode, server):
    user = User(lambda offered: ("accept", offered[1]))
    with anyio.fail_after(TIMEOUT):
        async with Client(target(transport, server), mode=mode, cache=None, read_timeout_seconds=TIMEOUT,
                           elicitation_callback=user) as c:
            r = await c.call_tool("summarize_records", AMBIGUOUS)
            assert not r.is_error, r.content[0].text
            check_question(user)
            check_chosen(body(r), BUSINESS)
            # A name that fits one field is never asked about.
            r = await c.call_tool("summarize_records", {"dataset_id": "procedures", "group_by": ["所管府省庁"], "limit": 1})
            assert not r.is_error and len(user.asked) == 1


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_user_who_declines_gets_the_refusal(mode, server):
    for action in ("decline", "cancel"):
        user = User(lambda offered, action=action: (action, None))
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url, mode=mode, cache=None, read_timeout_seconds=TIMEOUT,
                              elicitation_callback=user) as c:
                r = await c.call_tool("summarize_records", AMBIGUOUS)
                assert r.is_error and len(user.asked) == 1, (action, r.content[0].text)
                err = body(r)["error"]
                assert err["code"] == "unknown_field" and "ambiguous" in err["message"], err
                assert {c["name"] for c in err["candidates"][:2]} == {PERSONAL, BUSINESS}


async def test_the_sealed_state_cannot_be_edited_or_moved(server):
    """At 2026-07-28 the question's `requestState` is sealed and bound to its call: edited, or
    sent with other arguments, it is refused with a JSON-RPC error."""
    with anyio.fail_after(TIMEOUT):
        async with Client(server.url, mode="2026-07-28", cache=None, read_timeout_seconds=TIMEOUT,
                          elicitation_callback=User(lambda offered: ("accept", offered[0]))) as c:
            first = await c.session.call_tool("summarize_records", AMBIGUOUS, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            (key,) = first.input_requests
            state = first.request_state
            answer = {key: types.ElicitResult(action="accept", content={"name": PERSONAL})}
            for bad_state, arguments in ((state + "-TAMPERED", AMBIGUOUS), (state, {**AMBIGUOUS, "limit": 4})):
                with pytest.raises(MCPError) as e:
                    await c.session.call_tool("summarize_records", arguments, input_responses=answer,
                                              request_state=bad_state, allow_input_required=True)
                assert e.value.error.code == -32602 and "requestState" in e.value.error.message, e.value.error
            # A name that was not offered is not an answer.
            with pytest.raises(MCPError) as e:
                await c.session.call_tool(
                    "summarize_records", AMBIGUOUS, request_state=state, allow_input_required=True,
                    input_responses={key: types.ElicitResult(action="accept", content={"name": "所管府省庁"})},
                )
            assert e.value.error.code == -32602, e.value.error
            # Without the answer, the question is asked again.
            again = await c.session.call_tool("summarize_records", AMBIGUOUS, request_state=state, allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult), again
            # The answer, as the SDK would send it.
            done = await c.session.call_tool("summarize_records", AMBIGUOUS, input_responses=answer,
                                             request_state=state, allow_input_required=True)
            assert isinstance(done, types.CallToolResult) and not done.is_error, done
            check_chosen(json.loads(done.content[0].text), PERSONAL)


async def test_a_task_waits_for_the_users_choice():
    """Inside a task the question is the task's `input_required` status; `tasks/update` with
    the answer lets it go on."""
    from test_tasks import TASKS, call, raw, settle

    with anyio.fail_after(TIMEOUT):
        async with Client(stdio_params(), mode="2026-07-28", cache=None, read_timeout_seconds=TIMEOUT,
                          extensions=[advertise(TASKS)],
                          elicitation_callback=User(lambda offered: ("accept", offered[0]))) as c:
            created = await call(c, "summarize_records", AMBIGUOUS, meta={"tally/task": True})
            task_id = created["taskId"]
            while True:
                got = await raw(c, "tasks/get", {"taskId": task_id})
                if got["status"] != "working":
                    break
                await anyio.sleep(0.2)
            assert got["status"] == "input_required", got
            ((key, request),) = got["inputRequests"].items()
            assert request["method"] == "elicitation/create", request
            assert [o["const"] for o in request["params"]["requestedSchema"]["properties"]["name"]["oneOf"]] == [PERSONAL, BUSINESS]
            ack = await raw(c, "tasks/update", {"taskId": task_id, "inputResponses": {
                "unknown-key": {"ignored": True},
                key: {"action": "accept", "content": {"name": PERSONAL}},
            }})
            assert ack == {"resultType": "complete"}, ack
            done = await settle(c, task_id)
            assert done["status"] == "completed" and done["result"]["isError"] is False, done
            check_chosen(done["result"]["structuredContent"], PERSONAL)


async def test_an_ambiguous_measure_is_put_to_the_user(server):
    user = User(lambda offered: ("accept", offered[0]))
    with anyio.fail_after(TIMEOUT):
        async with Client(server.url, mode="2026-07-28", cache=None, read_timeout_seconds=TIMEOUT,
                          elicitation_callback=user) as c:
            r = await c.call_tool("summarize_records", {"dataset_id": "procedures", "metrics": ["sum:手続件数"]})
            assert not r.is_error, r.content[0].text
            (params,) = user.asked
            options = params.requested_schema["properties"]["name"]["oneOf"]
            assert [o["const"] for o in options] == ["総手続件数", "オンライン手続件数", "非オンライン手続件数"], options
            assert "measures" in params.message, params.message
            envelope = body(r)
            assert {"parameter": "metrics", "input": "手続件数", "canonical": "総手続件数", "chosen_by": "the user"} in envelope["data"]["resolved_fields"]
            assert "sum:総手続件数" in envelope["data"]["columns"], envelope["data"]["columns"]


async def test_an_ambiguous_dataset_is_put_to_the_user(tmp_path):
    import shutil

    from conftest import ROOT

    for year in ("2023", "2024"):
        folder = tmp_path / f"guide-{year}"
        shutil.copytree(ROOT / "datasets" / "guide", folder)
        definition = folder / "dataset.yaml"
        definition.write_text(definition.read_text(encoding="utf-8").replace("title: Tally guide", f"title: Tally guide of {year}"), encoding="utf-8")
    s = HttpServer(datasets=str(tmp_path))
    try:
        user = User(lambda offered: ("accept", offered[1]))
        with anyio.fail_after(TIMEOUT):
            async with Client(s.url, mode="legacy", cache=None, read_timeout_seconds=TIMEOUT,
                              elicitation_callback=user) as c:
                r = await c.call_tool("inspect_dataset", {"dataset_id": "guide"})
                assert not r.is_error, r.content[0].text
                (params,) = user.asked
                options = params.requested_schema["properties"]["name"]["oneOf"]
                assert options == [
                    {"const": "guide-2023", "title": "guide-2023 — Tally guide of 2023"},
                    {"const": "guide-2024", "title": "guide-2024 — Tally guide of 2024"},
                ], options
                envelope = body(r)
                assert envelope["data"]["dataset_id"] == "guide-2024", envelope["data"].keys()
                chosen = {"parameter": "dataset_id", "input": "guide", "canonical": "guide-2024", "chosen_by": "the user"}
                assert chosen in envelope["data"]["resolved_fields"], envelope["data"].get("resolved_fields")
    finally:
        s.stop()


async def test_an_ambiguous_code_is_put_to_the_user(server):
    field = "添付書類等提出の撤廃/省略状況"
    user = User(lambda offered: ("accept", offered[1]))
    with anyio.fail_after(TIMEOUT):
        async with Client(server.url, mode="2026-07-28", cache=None, read_timeout_seconds=TIMEOUT,
                          elicitation_callback=user) as c:
            r = await c.call_tool("summarize_records", {"dataset_id": "procedures", "where": {field: ["撤廃・省略"]}})
            assert not r.is_error, r.content[0].text
            (params,) = user.asked
            options = [o["const"] for o in params.requested_schema["properties"]["name"]["oneOf"]]
            assert options == ["1 撤廃・省略済", "2 撤廃・省略予定", "3 撤廃・省略不可"], options
            resolved = body(r)["data"]["resolved_fields"]
            assert any(x["input"] == "撤廃・省略" and x["canonical"] == "2 撤廃・省略予定" and x.get("chosen_by") == "the user" for x in resolved), resolved
            # The same count as naming the code exactly.
            exact = await c.call_tool("summarize_records", {"dataset_id": "procedures", "where": {field: ["2 撤廃・省略予定"]}})
            assert body(exact)["data"]["rows"] == body(r)["data"]["rows"], (body(exact)["data"]["rows"], body(r)["data"]["rows"])


# Questions one caller may have waiting for its user at once (host/mcp/src/choose.rs).
WAITING_PER_CALLER = 4


async def test_questions_waiting_for_the_user_are_bounded():
    """Regression (issue 54, "first come holds the slots"): an unanswered question held its
    call and slot for 10 minutes, and a caller could leave any number of them waiting. A
    caller has at most WAITING_PER_CALLER questions waiting at once: past them the user is not
    asked, and the call is refused as before (with its candidates), naming the bound and when
    the first waiting question is given up; an answered question frees its place."""
    release = anyio.Event()
    asked: list[types.ElicitRequestParams] = []

    async def slow_user(context, params: types.ElicitRequestParams):
        asked.append(params)
        await release.wait()
        return types.ElicitResult(action="decline")

    answered: list = []
    with anyio.fail_after(TIMEOUT):
        async with Client(stdio_params(), mode="legacy", cache=None, read_timeout_seconds=TIMEOUT,
                          elicitation_callback=slow_user) as c:

            async def one():
                answered.append(await c.call_tool("summarize_records", AMBIGUOUS))

            async with anyio.create_task_group() as tg:
                for _ in range(WAITING_PER_CALLER + 1):
                    tg.start_soon(one)

                async def one_answered_the_rest_waiting():
                    return len(answered) == 1 and len(asked) == WAITING_PER_CALLER

                # One call is answered while the user still has the others' questions: it was
                # not asked.
                await wait_for("a call answered without asking its user", one_answered_the_rest_waiting)
                (refused,) = answered
                assert refused.is_error, refused
                err = body(refused)["error"]
                assert err["code"] == "unknown_field" and "ambiguous" in err["message"], err
                assert "not asked" in err["message"] and "WAITING_PER_CALLER" in err["message"], err
                assert "given up within" in err["message"], err
                assert {c["name"] for c in err["candidates"][:2]} == {PERSONAL, BUSINESS}, err
                release.set()
            assert len(answered) == WAITING_PER_CALLER + 1 and len(asked) == WAITING_PER_CALLER
            # The questions answered (declined), their places are free: the user is asked again.
            r = await c.call_tool("summarize_records", AMBIGUOUS)
            assert r.is_error and len(asked) == WAITING_PER_CALLER + 1, body(r)
            assert "not asked" not in body(r)["error"]["message"]


@pytest.mark.parametrize("version,form", [("2025-06-18", "enumNames"), ("2025-11-25", "oneOf")])
def test_each_protocol_version_is_asked_in_its_own_form_of_a_choice(version, form):
    """A 2025-06-18 client knows a titled choice as `enum` with `enumNames` (it shows `oneOf`,
    the 2025-11-25 form, as a free-text box): the session's negotiated version decides the
    form. Driven as JSON-RPC lines over stdio, so the client can name its version."""
    import subprocess

    from conftest import stop_process, tally_bin, datasets_dir

    proc = subprocess.Popen(
        [tally_bin(), "serve", "--datasets", datasets_dir()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
    )

    def send(message: dict):
        proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        proc.stdin.flush()

    def receive() -> dict:
        line = proc.stdout.readline()
        assert line, "the server closed stdout"
        return json.loads(line)

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "old-client", "version": "1"}}})
        assert receive()["result"]["protocolVersion"] == version
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "summarize_records", "arguments": AMBIGUOUS}})
        asked = receive()
        while asked.get("method") != "elicitation/create":
            assert asked.get("id") != 2, asked
            asked = receive()
        name = asked["params"]["requestedSchema"]["properties"]["name"]
        if form == "enumNames":
            assert name["enum"] == [PERSONAL, BUSINESS], name
            # Each field with its description, as the titled form gives it.
            assert [n.split(" — ")[0] for n in name["enumNames"]] == [PERSONAL, BUSINESS], name
            assert all(" — " in n for n in name["enumNames"]), name
            assert "oneOf" not in name, name
        else:
            assert [o["const"] for o in name["oneOf"]] == [PERSONAL, BUSINESS], name
            assert "enum" not in name and "enumNames" not in name, name
        send({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"name": BUSINESS}}})
        answer = receive()
        while answer.get("id") != 2:
            answer = receive()
        data = json.loads(answer["result"]["content"][0]["text"])
        assert not answer["result"].get("isError"), data
        resolved = data["data"]["resolved_fields"]
        assert {"parameter": "group_by", "input": "手続が行われるイベント", "canonical": BUSINESS, "chosen_by": "the user"} in resolved, resolved
    finally:
        proc.stdin.close()
        stop_process(proc)
