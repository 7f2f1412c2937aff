"""The runner's retry in process (SPEC 6): a call whose session is lost under it is retried
once, on the renewed session, and only then. The server is an SDK `MCPServer` in this process,
reached through the SDK's in-memory transport behind a pipe the test can cut, as a killed
stdio server cuts its pipes; the session around it is the supervisor's own `ServerSession`."""

import contextlib
import sys

import anyio
import pytest
from asgiref.sync import sync_to_async
from mcp.client._memory import InMemoryTransport
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcpcore import calls, db
from mcpcore.models import ToolCall
from mcpcore.supervisor import Supervisor, transport
from mcpcore.supervisor.session import ServerSession
from tests.rows import claimed_call, write_servers

NAME = "mem"
# What a `contextlib` manager (one made of a generator) runs as its block is entered.
ENTERS = ("__enter__", "__aenter__")
# contextlib's managers made of a generator (`@contextmanager`, `@asynccontextmanager`);
# `nullcontext` is a class's two calls, as cheap as a try/finally's branch.
GENERATOR_MANAGERS = ("_GeneratorContextManager", "_AsyncGeneratorContextManager")


class Dying:
    """Connections to one in-process MCPServer, a new "process" per connect. `kill()` ends the
    current one the way a killed server ends: the client reads end-of-stream, and what it
    sends is lost."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.connects = 0
        self._pipes: list[anyio.CancelScope] = []

    def kill(self) -> None:
        for pipe in self._pipes:
            pipe.cancel()

    @contextlib.asynccontextmanager
    async def connect(self):
        self.connects += 1
        to_client, client_reads = anyio.create_memory_object_stream(0)
        client_writes, from_client = anyio.create_memory_object_stream(0)
        down, up = anyio.CancelScope(), anyio.CancelScope()
        self._pipes = [down, up]

        async def pump(scope, source, sink) -> None:
            async with sink:
                with scope:
                    async for message in source:
                        await sink.send(message)

        async with InMemoryTransport(self.server) as (server_out, server_in):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, down, server_out, to_client)
                tg.start_soon(pump, up, from_client, server_in)
                try:
                    yield client_reads, client_writes
                finally:
                    self.kill()
                    for stream in (client_reads, client_writes, from_client):
                        await stream.aclose()


def server_that_dies(times: int) -> tuple[Dying, list[str]]:
    """An MCPServer whose `work` tool kills its own connection on its first `times` calls
    (with the call in its hands), then answers which connection it ran on."""
    mcp = MCPServer("mem", log_level="WARNING")
    seen: list[str] = []
    dying = Dying(mcp)

    @mcp.tool()
    async def work(text: str) -> str:
        """Answer the text and the connection it ran on."""
        seen.append(text)
        if len(seen) <= times:
            dying.kill()
            await anyio.sleep_forever()
        return f"{text} on connection {dying.connects}"

    @mcp.tool()
    def broken() -> str:
        """Fail as a tool does (an error result, the session unharmed)."""
        seen.append("broken")
        raise ToolError("broken was called")

    return dying, seen


@contextlib.asynccontextmanager
async def supervisor_holding(dying: Dying, agenvoy_home, monkeypatch):
    """A supervisor (not started: no loops, no leases) holding the session of server `mem`,
    whose connections go to `dying`; connected when this yields."""
    await sync_to_async(write_servers)(agenvoy_home, {NAME: {"url": "http://in-process.invalid/mcp"}})
    monkeypatch.setattr(transport, "make_target", lambda *_args, **_kw: dying.connect())
    sup = Supervisor(exclusive=False, name="w1")
    session = sup.sessions[NAME] = ServerSession(sup, NAME)
    session.start()
    try:
        with anyio.fail_after(20):
            await session.ready.wait()
        yield sup
    finally:
        await sup.stop()


async def run(sup: Supervisor, tool: str, arguments: dict) -> ToolCall:
    """Record a call claimed by `sup` and run it there, as an approved call is run."""
    call = await claimed_call(sup.name, NAME, tool, arguments)
    with anyio.fail_after(60):
        stored = await sup.run(call)
    assert stored is not None
    row = await db.run(ToolCall.objects.get, id=call.id)
    assert (row.status, row.result) == (stored.status, stored.result)  # stored, not only returned
    return stored


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_retries_a_call_whose_session_died_once_on_the_renewed_session(agenvoy_home, monkeypatch):
    dying, seen = server_that_dies(times=1)
    async with supervisor_holding(dying, agenvoy_home, monkeypatch) as sup:
        call = await run(sup, "work", {"text": "hello"})
    assert (call.status, call.result, call.is_error) == ("done", "hello on connection 2", False)
    assert seen == ["hello", "hello"]  # the first attempt reached the server, and died there
    assert dying.connects >= 2


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_retries_only_once_and_ends_the_call_with_the_loss_when_it_happens_again(
    agenvoy_home, monkeypatch
):
    dying, seen = server_that_dies(times=2)
    async with supervisor_holding(dying, agenvoy_home, monkeypatch) as sup:
        call = await run(sup, "work", {"text": "hello"})
        assert seen == ["hello", "hello"]  # no third attempt
    assert call.status == "error" and call.is_error
    assert call.result.startswith("tool error: ") and "hello on" not in call.result


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_does_not_retry_a_tool_error(agenvoy_home, monkeypatch):
    dying, seen = server_that_dies(times=0)
    async with supervisor_holding(dying, agenvoy_home, monkeypatch) as sup:
        call = await run(sup, "broken", {})
        again = await run(sup, "work", {"text": "after"})
    assert (call.status, call.is_error) == ("error", True)
    assert call.result.startswith("tool error: ") and call.result.endswith("broken was called")
    assert seen == ["broken", "after"] and dying.connects == 1  # once, on the same session
    assert again.result == "after on connection 1"


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_hands_no_database_job_to_the_thread_for_a_call_that_asked_nothing(
    agenvoy_home, monkeypatch
):
    # A hand-off to the database thread costs about 1.2 ms of CPU per call (issue 39): only a
    # call whose server asked a question has questions to close when it ends.
    dying, _seen = server_that_dies(times=0)
    async with supervisor_holding(dying, agenvoy_home, monkeypatch) as sup:
        call = await claimed_call(sup.name, NAME, "work", {"text": "hello"})
        handed: list[str] = []
        real_run = db.run

        async def counting_run(fn, *args, **kwargs):
            handed.append(getattr(fn, "__qualname__", repr(fn)))
            return await real_run(fn, *args, **kwargs)

        monkeypatch.setattr(db, "run", counting_run)
        with anyio.fail_after(60):
            stored = await sup.run(call)
        monkeypatch.setattr(db, "run", real_run)
    assert stored is not None and (stored.status, stored.result) == ("done", "hello on connection 1")
    assert handed == []


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_runs_and_waits_on_a_call_through_no_context_manager_made_of_a_generator(
    agenvoy_home, monkeypatch
):
    # Every call runs and is waited on here: a `contextlib` manager (a generator's) costs it five
    # to eight more Python calls than a class's or a try/finally. Two nested on the runner's
    # session and one in `calls.wait` were 20 of the 28 Python calls the reshaping of issue 40
    # added to each `POST /v1/mcp/call` (branch perf-house).
    dying, _seen = server_that_dies(times=0)
    async with supervisor_holding(dying, agenvoy_home, monkeypatch) as sup:
        call = await claimed_call(sup.name, NAME, "work", {"text": "hello"})
        entered: list[str] = []

        def profile(frame, event, _arg) -> None:
            code, caller = frame.f_code, frame.f_back
            if event == "call" and code.co_filename == contextlib.__file__ and code.co_name in ENTERS:
                made_of_a_generator = type(frame.f_locals.get("self")).__name__ in GENERATOR_MANAGERS
                if made_of_a_generator and caller is not None and "/mcpcore/" in caller.f_code.co_filename:
                    entered.append(caller.f_code.co_qualname)

        sys.setprofile(profile)  # this thread: the loop the run and the wait are tasks of
        try:
            with anyio.fail_after(60):
                sup.run(call)
                stored = await calls.wait(call, 60, local=sup)
        finally:
            sys.setprofile(None)
    assert (stored.status, stored.result) == ("done", "hello on connection 1")
    assert entered == []
