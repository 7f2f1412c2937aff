"""Leases and hand-over in process (SPEC 9): two supervisors sharing one database, as two
`mcpworker`s do. Nothing is started: each test drives `Supervisor._leases` (one tick's lease
work) and `Supervisor._hand_over` itself, and reads the rows they leave."""

import datetime
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from mcpcore import calls, db
from mcpcore.models import Server, ToolCall, Worker
from mcpcore.supervisor import Supervisor
from mcpcore.supervisor.session import ServerSession
from tests.rows import make_call, write_servers

SERVER = {"command": "node", "args": ["index.js", "stdio"]}  # never started here


def worker(name: str) -> Supervisor:
    """A non-exclusive supervisor (an `mcpworker`), registered as alive, with no loops."""
    sup = Supervisor(exclusive=False, name=name)
    sup._register_worker()
    return sup


def owners() -> dict[str, str]:
    return dict(Server.objects.values_list("name", "owner"))


def gone_quiet(name: str) -> None:
    """What time does to a worker that died: its heartbeat and its leases run out."""
    past = timezone.now() - datetime.timedelta(seconds=settings.AGENVOY_LEASE_SECONDS + 1)
    Worker.objects.filter(name=name).update(heartbeat=past)
    Server.objects.filter(owner=name).update(lease_expires=past)


@pytest.mark.django_db
def test_it_gives_a_free_server_to_one_worker_and_keeps_it_there_while_its_lease_runs(agenvoy_home):
    write_servers(agenvoy_home, {"a": SERVER})
    w1, w2 = worker("w1"), worker("w2")
    assert w1._leases()[0] == {"a"}
    row = Server.objects.get(name="a")
    assert row.owner == "w1" and row.lease_expires > timezone.now()
    for _ in range(3):  # ticks of both: the holder renews, the other never takes it
        assert w2._leases()[0] == set()
        assert w1._leases()[0] == {"a"}
    assert Server.objects.get(name="a").lease_expires >= row.lease_expires
    assert owners() == {"a": "w1"}


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_hands_the_idle_surplus_over_in_one_tick_until_the_second_worker_has_its_share(
    agenvoy_home,
):
    await sync_to_async(write_servers)(agenvoy_home, {n: SERVER for n in ("a", "b", "c", "d")})
    w1 = await db.run(worker, "w1")
    owned, _configs, share, _every = await db.run(w1._leases)
    assert owned == {"a", "b", "c", "d"} and share == 4  # alone, everything is its share
    for name in owned:
        w1.sessions[name] = ServerSession(w1, name)  # held here (never started)
    # A call runs on d (filed as the runner files it): d stays where it is.
    with w1.sessions["d"].running(SimpleNamespace(call_id="on-d")):
        w2 = await db.run(worker, "w2")
        assert (await db.run(w2._leases))[0] == set()  # nothing free yet
        owned, _configs, share, _every = await db.run(w1._leases)
        assert share == 2
        owned = await w1._hand_over(owned, len(owned) - share)
        assert owned == {"a", "d"}  # the whole idle surplus at once, from the top; never d
        assert (await db.run(w2._leases))[0] == {"b", "c"}
        assert set(w1.sessions) == {"a", "d"} and w1.sessions["d"].active_calls == 1
    assert await db.run(owners) == {"a": "w1", "b": "w2", "c": "w2", "d": "w1"}
    # Balanced: a further tick of each moves nothing.
    owned, _configs, share, _every = await db.run(w1._leases)
    assert owned == {"a", "d"} and len(owned) == share
    assert (await db.run(w2._leases))[0] == {"b", "c"}
    assert await db.run(owners) == {"a": "w1", "b": "w2", "c": "w2", "d": "w1"}


@pytest.mark.django_db
def test_it_takes_nothing_on_a_workers_first_tick_so_workers_started_together_split_the_servers(
    agenvoy_home,
):
    write_servers(agenvoy_home, {n: SERVER for n in ("a", "b", "c", "d", "e")})
    w1, w2 = worker("w1"), worker("w2")
    # Their first ticks: heartbeats only. Had w1 claimed then, it would have taken all five
    # (w2 was not alive yet) and handed two over later, each started twice.
    assert w1._leases(claim=False)[0] == set() and w2._leases(claim=False)[0] == set()
    first, second = w1._leases()[0], w2._leases()[0]
    assert (len(first), len(second)) == (3, 2) and not first & second
    assert set(owners().values()) == {"w1", "w2"}


@pytest.mark.django_db
def test_it_takes_over_an_expired_lease_and_ends_the_dead_owners_running_calls_interrupted(agenvoy_home):
    write_servers(agenvoy_home, {"a": SERVER, "b": SERVER})
    w1, w2 = worker("w1"), worker("w2")
    assert w1._leases()[0] == {"a"} and w2._leases()[0] == {"b"}  # a fair share each
    on_a = make_call("running", server="a", started_at=timezone.now(), worker="w1")
    waiting = make_call("pending", server="a")
    on_b = make_call("running", server="b", started_at=timezone.now(), worker="w2")

    gone_quiet("w1")
    owned, _configs, share, _every = w2._leases()
    assert owned == {"a", "b"} and share == 2  # w2 is the only one alive now
    assert owners() == {"a": "w2", "b": "w2"}
    ended = ToolCall.objects.get(id=on_a.id)
    assert (ended.status, ended.result, ended.is_error) == ("interrupted", calls.WORKER_LOST, True)
    assert ended.ended_at is not None
    # Only what the dead worker was running ends: a waiting confirmation and w2's own call go on.
    assert ToolCall.objects.get(id=waiting.id).status == "pending"
    assert ToolCall.objects.get(id=on_b.id).status == "running"


@pytest.mark.django_db
def test_it_waits_for_a_lease_to_run_out_before_taking_it_over(agenvoy_home):
    write_servers(agenvoy_home, {"a": SERVER})
    w1, w2 = worker("w1"), worker("w2")
    assert w1._leases()[0] == {"a"}
    call = make_call("running", server="a", started_at=timezone.now(), worker="w1")
    # w1 stopped heartbeating, but its lease on `a` has not run out yet: `a` stays with it.
    Worker.objects.filter(name="w1").update(heartbeat=timezone.now() - datetime.timedelta(hours=1))
    assert w2._leases()[0] == set()
    assert owners() == {"a": "w1"}
    assert ToolCall.objects.get(id=call.id).status == "running"


@pytest.mark.django_db
def test_it_gives_up_the_lease_of_a_removed_server(agenvoy_home):
    write_servers(agenvoy_home, {"a": SERVER, "b": SERVER})
    w1 = worker("w1")
    assert w1._leases()[0] == {"a", "b"}
    write_servers(agenvoy_home, {"a": SERVER})  # b removed from mcp.json
    owned, configs, share, every = w1._leases()
    assert owned == {"a"} and set(configs) == {"a"} and set(every) == {"a"} and share == 1
    # A second worker finds nothing of b to take, and a still held.
    w2 = worker("w2")
    assert w2._leases()[0] == set()
    assert owners() == {"a": "w1"}
