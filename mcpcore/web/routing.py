"""Channels routes: the browser's live socket (the supervisor's channel is routed by
`supervisor/host.py`)."""

from django.urls import path

from . import consumers

websocket_urlpatterns = [
    path("ws/live/", consumers.LiveConsumer.as_asgi()),
]
