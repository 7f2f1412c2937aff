"""The supervisor: leases, server sessions, tool calls, confirmation expiry, file watching.

Web code reaches it only through the database, the channel-layer messages the
SupervisorConsumer (`consumer.py`) hands over here, and, in the process that hosts it
(`serve`), the small interface of `calls.LocalSupervisor` (`holds`, `run`, `pick_up`,
`cancel`, `running`), which the process wiring (`mcpcore.runtime`) puts in each request's
ASGI scope. Its sessions and the call runner reach it through `session.SessionHost`.
Its tasks run on one event loop; its database work (the lease claims and renewals of
`_leases`, the file syncs, the call rows) goes to `mcpcore.db`'s database threads and comes
back to that loop.
"""

import asyncio
import contextlib
import datetime
import logging
import math
import os
import re
import socket
import time
import uuid
from pathlib import Path
from typing import IO

import anyio
import mcp_types as types
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from .. import calls, control, db, files, retention
from ..calls import notify, questions
from ..models import Server, Worker
from . import runner, upstream
from .session import ServerSession, upstream_error


class NotConnected(Exception):
    """No session of the server is ready in this worker."""


log = logging.getLogger("mcpcore.supervisor")

TICK = 1.0
ESCALATION_CHECK = 5.0  # seconds between looks for confirmations due to escalate (SPEC 24.3)


class Supervisor:
    """Hosts the sessions of the servers this worker holds a lease on.

    Who holds a server: `Server.owner` (the lease, in the database) is the truth, for every
    process. `sessions` is this worker's ServerSession for each of those rows and nothing
    else: every tick sets its keys to the servers whose lease `_leases` just renewed or took,
    and `holds()` answers from it. Which calls run in this process: `calls`, the task of
    each call this worker runs (`running()` hands one to the call path), and nothing else.
    """

    def __init__(self, exclusive: bool = True, name: str | None = None) -> None:
        # exclusive: the only supervisor (embedded serve); it takes every lease at once.
        self.exclusive = exclusive
        host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40]
        self.name = name or f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.channel = f"mcp-worker.{self.name}"
        self.sessions: dict[str, ServerSession] = {}
        self.calls: dict[str, asyncio.Task] = {}
        self._known: dict[str, str] | None = None
        self._rescan = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._watcher = files.FileWatcher()
        self._errlogs: dict[str, IO[str]] = {}
        self._connects = asyncio.Semaphore(max(4, 2 * (os.cpu_count() or 1)))
        # Authorization-code flows this worker runs (SPEC 16.2), by flow id.
        self.flows: dict[str, upstream.Flow] = {}
        self._flow_tasks: set[asyncio.Task] = set()
        # Completions asked of servers held here (SPEC 20.2), each answered on its reply channel.
        self._completions: set[asyncio.Task] = set()
        # A worker (not the only supervisor) takes no lease on its first tick: workers started
        # together see each other's heartbeat first and split the servers without a hand-over.
        self._seen_peers = exclusive
        self._escalation_checked = -math.inf  # time.monotonic of the last look (SPEC 24.3)

    # --- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register, join the supervisors' group, and start the background loops."""
        layer = get_channel_layer()
        await layer.group_add(control.SUPERVISORS, self.channel)
        await db.run(self._register_worker)
        self._tasks.append(asyncio.ensure_future(self._loop()))
        self._tasks.append(asyncio.ensure_future(notify.run()))  # webhooks and ntfy (SPEC 15)
        self._tasks.append(asyncio.ensure_future(retention.run()))  # old calls and results (SPEC 18.1)

    def _register_worker(self) -> None:
        Worker.objects.update_or_create(
            name=self.name, defaults={"channel": self.channel, "heartbeat": timezone.now()}
        )
        if self.exclusive:
            # One process, one supervisor: whatever an earlier run owned is ours now, and
            # whatever it was running when it died was interrupted.
            Worker.objects.exclude(name=self.name).delete()
            Server.objects.update(owner="", lease_expires=None)
            calls.interrupt_orphans(worker_alive=lambda w: w == self.name)

    async def stop(self) -> None:
        """Close every session (and with it every stdio server process), give leases back."""
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in list(self.calls.values()) + list(self._flow_tasks) + list(self._completions):
            task.cancel()
        await asyncio.gather(*(s.stop() for s in list(self.sessions.values())), return_exceptions=True)
        self.sessions.clear()
        await db.run(self._unregister)
        for f in self._errlogs.values():
            f.close()

    def _unregister(self) -> None:
        Server.objects.filter(owner=self.name).update(owner="", lease_expires=None)
        Worker.objects.filter(name=self.name).delete()
        calls.interrupt_orphans(worker_alive=lambda w: w != self.name)

    def errlog(self, name: str) -> IO[str]:
        """Each stdio server's stderr goes to its own log file in the data folder."""
        if name not in self._errlogs:
            folder = files.private_dir(Path(settings.DATA_DIR) / "logs")
            self._errlogs[name] = files.open_private(folder / f"{name}.stderr.log", "a", buffering=1)
        return self._errlogs[name]

    @contextlib.asynccontextmanager
    async def connect_slot(self):
        """One of a few places for connecting; yields a function that frees it early (once
        the first listing is done), and frees it on exit otherwise."""
        await self._connects.acquire()
        held = [True]

        def release() -> None:
            if held[0]:
                held[0] = False
                self._connects.release()

        try:
            yield release
        finally:
            release()

    # --- requests from the consumer ---------------------------------------------------------

    def request_rescan(self) -> None:
        self._rescan.set()

    def pick_up(self, call_id: str) -> None:
        """Claim a recorded, approved call (`calls.claim`) and run it, unless it runs here."""
        if call_id not in self.calls:
            self._track(call_id, asyncio.ensure_future(runner.run_call(self, call_id)))

    def run(self, call) -> asyncio.Task:
        """Run a call claimed for this worker; the task's result is the ended call (None when
        someone else ended it first)."""
        return self._track(str(call.id), asyncio.ensure_future(runner.run_claimed(self, call)))

    def _track(self, call_id: str, task: asyncio.Task) -> asyncio.Task:
        self.calls[call_id] = task
        task.add_done_callback(lambda _t: self.calls.pop(call_id, None))
        return task

    def holds(self, server_name: str) -> bool:
        """Whether this worker holds the server's session (read from any thread)."""
        return server_name in self.sessions

    def running(self, call_id: str) -> asyncio.Task | None:
        """The task of a call running here (its result: the ended call, or None)."""
        return self.calls.get(call_id)

    # --- what its sessions and the call runner need (session.SessionHost) -------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def session(self, server_name: str) -> ServerSession | None:
        return self.sessions.get(server_name)

    def cancel(self, call_id: str) -> bool:
        """Cancel a call running here; its task records it `cancelled`."""
        task = self.calls.get(call_id)
        if task is None:
            return False
        task.cancel()
        return True

    def spawn_reconnect(self, names: list[str] | None, reply: str | None) -> None:
        asyncio.ensure_future(self._reconnect(names, reply))

    async def _reconnect(self, names: list[str] | None, reply: str | None) -> None:
        targets = [n for n in (names or list(self.sessions)) if n in self.sessions]
        futures = {n: self.sessions[n].reconnect() for n in targets}
        outcome: dict[str, str] = {}
        for name, fut in futures.items():
            try:
                outcome[name] = await asyncio.wait_for(fut, settings.AGENVOY_CONNECT_TIMEOUT + 2)
            except TimeoutError:
                outcome[name] = "reconnect timed out"
        if reply:
            await get_channel_layer().send(reply, {"type": "reconnect.done", "servers": outcome})

    # --- resource subscriptions and completions (SPEC 20.2) ----------------------------------

    def resubscribe(self, server_name: str, reply: str | None = None) -> None:
        """A client subscribed to (or dropped) a resource of a server: its session re-reads
        the rows and follows them upstream, in its own task, then tells `reply`."""
        session = self.sessions.get(server_name)
        if session is not None:
            session.subscriptions.resubscribe(reply)

    def spawn_complete(
        self, server_name: str, ref: dict, argument: dict, context: dict | None, reply: str
    ) -> None:
        task = asyncio.ensure_future(self._complete(server_name, ref, argument, context, reply))
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    async def _complete(
        self, server_name: str, ref: dict, argument: dict, context: dict | None, reply: str
    ) -> None:
        """Ask the server for completions of a prompt's or template's argument and answer
        `reply` with `complete.done`: the result's wire JSON, or the JSON-RPC error."""
        try:
            answer = {"result": await self._completion(server_name, ref, argument, context)}
        except Exception as exc:
            answer = {"error": upstream_error(exc, self.sessions.get(server_name))}
        await get_channel_layer().send(reply, {"type": "complete.done", **answer})

    async def _completion(self, server_name: str, ref: dict, argument: dict, context: dict | None) -> dict:
        session = self.sessions.get(server_name)
        client = await session.wait_ready(settings.AGENVOY_CONNECT_TIMEOUT) if session else None
        if client is None:
            reason = session.error if session and session.error else "not held by this worker"
            raise NotConnected(f"server {server_name} is not connected: {reason}")
        if client.server_capabilities.completions is None:
            # Not asked: a server built without completions answers -32601 (SPEC 20.2: none).
            return {"completion": {"values": []}}
        reference = (
            types.PromptReference.model_validate(ref)
            if ref.get("type") == "ref/prompt"
            else types.ResourceTemplateReference.model_validate(ref)
        )
        arguments = (context or {}).get("arguments") or None
        with anyio.fail_after(settings.AGENVOY_LIST_TIMEOUT):
            result = await client.complete(reference, dict(argument), context_arguments=arguments)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    # --- OAuth flows (SPEC 16.2) -------------------------------------------------------------

    def spawn_authorize(self, server_name: str, flow_id: str, reply: str) -> None:
        task = asyncio.ensure_future(self._authorize(server_name, flow_id, reply))
        self._flow_tasks.add(task)
        task.add_done_callback(self._flow_tasks.discard)

    def wake_flow(self, flow_id: str) -> None:
        """`/oauth/callback` wrote into a flow's row (on some web process): read it now."""
        flow = self.flows.get(flow_id)
        if flow is not None:
            flow.wake()

    async def _authorize(self, server_name: str, flow_id: str, reply: str) -> None:
        """Run a person's flow for a server held here: answer `reply` with the authorization
        URL as soon as it is known (or the error that came first), then wait for the person;
        with the tokens stored, the server connects at once."""
        layer = get_channel_layer()
        session = self.sessions.get(server_name)
        server = await db.run(Server.objects.filter(name=server_name).first)
        if session is None or server is None:
            await layer.send(reply, {"type": "oauth.url", "error": "no worker holds this server"})
            return
        flow = self.flows[flow_id] = upstream.Flow(server, flow_id)
        task = asyncio.ensure_future(flow.run())
        try:
            waiters: set[asyncio.Future] = {task, flow.url}
            await asyncio.wait(
                waiters, timeout=settings.AGENVOY_CONNECT_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
            if flow.url.done():
                answer = {"url": flow.url.result()}
            elif task.done() and task.exception() is not None:
                answer = {"error": str(task.exception())}
            else:
                answer = {"error": "authorization failed: the authorization server did not answer in time"}
            await layer.send(reply, {"type": "oauth.url", **answer})
            try:
                await task
            except upstream.FlowFailed as exc:
                log.info("server %s: %s", server_name, exc)
                await control.asend_group(control.STATUS, {"type": "status.changed", "server": server_name})
                return
            log.info("server %s: authorized", server_name)
            session.reconnect()
        finally:
            task.cancel()
            self.flows.pop(flow_id, None)

    # --- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        """Every tick: shared files, heartbeat and leases, sessions to start or stop,
        confirmations to expire, calls to pick up. Woken early by a rescan request."""
        await db.run(files.sweep_stale_temp_files)
        await db.run(files.sync_allow)
        await db.run(files.sync_servers)
        self._watcher.changed(files.ALLOW_TOOL)
        self._watcher.changed(files.MCP_JSON)
        while not self._stop.is_set():
            try:
                await self._tick()
            except Exception:
                log.exception("supervisor tick failed")
            try:
                await asyncio.wait_for(self._rescan.wait(), TICK)
            except TimeoutError:
                pass
            self._rescan.clear()

    async def _tick(self) -> None:
        changed = await db.run(self._watcher.check)
        owned, wanted_config, share, every = await db.run(self._leases, self._seen_peers)
        self._seen_peers = True
        await self._announce_list_changes(every)
        if len(owned) > share:
            owned = await self._hand_over(owned, len(owned) - share)
        for name in list(self.sessions):
            if name not in owned:
                await self.sessions.pop(name).stop()
        for name in owned:
            session = self.sessions.get(name)
            if session is None:
                session = self.sessions[name] = ServerSession(self, name)
                session.config_hash = wanted_config[name]
                session.start()
            elif session.config_hash != wanted_config[name] or (changed and name in changed):
                session.config_hash = wanted_config[name]
                session.reconnect()
        expired = await db.run(calls.expire_due)
        for call_id in expired:
            await calls.announce(call_id)
        if time.monotonic() - self._escalation_checked >= ESCALATION_CHECK:
            self._escalation_checked = time.monotonic()
            # Every process looks; the claim in the row makes each escalation happen once.
            for call_id in await db.run(calls.escalate_due):
                await calls.announce(call_id)
        await db.run(questions.sweep)  # questions past their time, or of calls that ended
        for call_id in await db.run(calls.unstarted_for, list(owned)):
            self.pick_up(call_id)

    def _leases(self, claim: bool = True) -> tuple[set[str], dict[str, str], int, dict[str, str]]:
        """Renew our leases and, when `claim`, take free or expired ones (a fair share when
        others are alive). Claims are conditional updates. Returns the servers we hold (a
        removed server's row is gone, so it is not among them), their config hashes, our fair
        share, and every server's config hash.

        The only supervisor (embedded `serve`) has no one to share with: it writes nothing
        here on an ordinary tick, only when it takes a new server.
        """
        now = timezone.now()
        until = None if self.exclusive else now + datetime.timedelta(seconds=settings.AGENVOY_LEASE_SECONDS)
        if not self.exclusive:
            Worker.objects.filter(name=self.name).update(heartbeat=now)
            Server.objects.filter(owner=self.name).update(lease_expires=until)
        servers = list(Server.objects.values_list("name", "owner", "lease_expires", "config_hash"))
        mine = {n for n, owner, _e, _h in servers if owner == self.name}
        share = len(servers)
        if not self.exclusive:
            alive = Worker.objects.filter(
                heartbeat__gte=now - datetime.timedelta(seconds=settings.AGENVOY_LEASE_SECONDS)
            ).count()
            share = math.ceil(len(servers) / max(alive, 1))
        for name, owner, expires, _h in servers:
            if not claim or name in mine or len(mine) >= share:
                continue
            if owner and not self.exclusive and expires and expires > now:
                continue
            took = (
                Server.objects.filter(name=name, owner=owner)
                .filter(Q(lease_expires=expires) if expires else Q(lease_expires__isnull=True))
                .update(owner=self.name, lease_expires=until)
            )
            if took == 1:
                mine.add(name)
                if owner:
                    # The previous owner died holding it: its calls there can't finish.
                    calls.interrupt_for(name, owner)
        hashes = {n: h for n, _o, _e, h in servers}
        return mine, {n: hashes[n] for n in mine}, share, hashes

    async def _announce_list_changes(self, every: dict[str, str]) -> None:
        """Servers added, changed or removed (by anyone, through any door) update open pages."""
        previous, self._known = self._known, every
        if previous is None:
            return
        for name in set(previous) ^ set(every) | {n for n in every if previous.get(n, every[n]) != every[n]}:
            await control.asend_group(control.STATUS, {"type": "status.changed", "server": name})

    async def _hand_over(self, owned: set[str], surplus: int) -> set[str]:
        """Give back the servers beyond our fair share (a worker that started first took them
        all), idle ones only, all in one tick: their sessions stop together, then their leases
        are freed, so the others take them on their next tick."""
        busy = {s.name for s in self.sessions.values() if s.active_calls}
        leaving = sorted(owned - busy, reverse=True)[:surplus]
        stopping = [self.sessions.pop(name) for name in leaving if name in self.sessions]
        await asyncio.gather(*(session.stop() for session in stopping), return_exceptions=True)
        for name in leaving:
            await db.run(
                Server.objects.filter(name=name, owner=self.name).update, owner="", lease_expires=None
            )
            log.info("handed %s over for balance", name)
        return owned - set(leaving)
