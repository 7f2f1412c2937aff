"""Hosting a supervisor as a Channels worker: its channel feeds the SupervisorConsumer."""

import asyncio
import logging

from channels.layers import get_channel_layer
from channels.routing import ChannelNameRouter
from channels.worker import Worker

from .consumer import SupervisorConsumer
from .core import Supervisor

log = logging.getLogger("mcpcore.supervisor")


async def run(sup: Supervisor) -> None:
    """Start the supervisor, then consume its channel until cancelled."""
    await sup.start()
    app = ChannelNameRouter({sup.channel: SupervisorConsumer.as_asgi(supervisor=sup)})
    worker = Worker(application=app, channels=[sup.channel], channel_layer=get_channel_layer())
    log.info("supervisor %s listening on %s", sup.name, sup.channel)
    try:
        await worker.handle()
    except asyncio.CancelledError:
        pass
