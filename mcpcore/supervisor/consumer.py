"""The supervisor's Channels consumer: requests that reach a supervisor on its channel
(`host.run` feeds it), handed over without awaiting MCP."""

from channels.consumer import AsyncConsumer

from .core import Supervisor


class SupervisorConsumer(AsyncConsumer):
    """Receives requests for the supervisor it was made for (`host.run` hands it over).
    Handlers only hand over: the supervisor spawns a task, so no handler awaits MCP."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    async def config_changed(self, message: dict) -> None:
        self.supervisor.request_rescan()

    async def call_run(self, message: dict) -> None:
        self.supervisor.pick_up(message["call_id"])

    async def call_cancel(self, message: dict) -> None:
        self.supervisor.cancel(message["call_id"])

    async def servers_reconnect(self, message: dict) -> None:
        self.supervisor.spawn_reconnect(message.get("names"), message.get("reply"))

    async def oauth_authorize(self, message: dict) -> None:
        self.supervisor.spawn_authorize(message["server"], message["flow"], message["reply"])

    async def oauth_callback(self, message: dict) -> None:
        self.supervisor.wake_flow(message["flow"])

    async def resource_subscribe(self, message: dict) -> None:
        self.supervisor.resubscribe(message["server"], message.get("reply"))

    async def server_complete(self, message: dict) -> None:
        self.supervisor.spawn_complete(
            message["server"], message["ref"], message["argument"], message.get("context"), message["reply"]
        )
