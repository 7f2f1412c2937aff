"""Pages of the console (function views; htmx fragments via `page.html#fragment`)."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .models import ApiToken, Server, ToolCall


@login_required
def servers(request: HttpRequest) -> HttpResponse:
    rows = Server.objects.annotate(n_tools=Count("tools")).order_by("name")
    return render(request, "mcpcore/server_list.html", {"servers": rows})


@login_required
def pending(request: HttpRequest) -> HttpResponse:
    rows = ToolCall.objects.filter(status="pending").order_by("created_at")
    return render(request, "mcpcore/pending_list.html", {"calls": rows})


@login_required
def history(request: HttpRequest) -> HttpResponse:
    rows = ToolCall.objects.all()[:100]
    return render(request, "mcpcore/call_list.html", {"calls": rows})


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    return render(request, "mcpcore/token_list.html", {"tokens": ApiToken.objects.all()})
