"""Views as console rows (SPEC 19): saving and removing them, the tools each holds now, and
what a token limited to views may see. Every door reads a token's limit through
`cache.scope` and narrows with the helpers here, so the limit is the same on each.

Saving or removing a view tells the MCP endpoints of every web process (a `status.changed`
with `"views": true` on `control.STATUS`, the message they already follow for servers), so
clients whose list it changes get `list_changed` (SPEC 13.2).
"""

from collections.abc import Callable, Iterable

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from . import audit, control, toolviews
from .choices import AuditAction
from .db import cache
from .models import ApiToken, Tool, View

Visible = Callable[[str], bool] | None  # None: everything


def changed() -> None:
    """Tell the MCP endpoints that views changed (their clients' lists may have)."""
    control.send_group(control.STATUS, {"type": "status.changed", "views": True})


def save(
    name: str, description: str, include: list[str], exclude: list[str], by: audit.Actor = audit.BY_SYSTEM
) -> View:
    """Create or replace the view `name` (already checked: `schemas.ViewEdit`)."""
    with transaction.atomic():
        old = View.objects.select_for_update().filter(name=name).first()
        before = state(old) if old is not None else None
        view, created = View.objects.update_or_create(
            name=name,
            defaults={
                "description": description,
                "include": include,
                "exclude": exclude,
                "updated_at": timezone.now(),
            },
        )
        if state(view) != before:
            action = AuditAction.VIEW_ADD if created else AuditAction.VIEW_EDIT
            audit.record(action, name, actor=by, before=before, after=state(view))
    changed()
    return view


def state(view: View) -> dict:
    """What the audit keeps of a view."""
    return {"description": view.description, "include": list(view.include), "exclude": list(view.exclude)}


def remove(name: str, by: audit.Actor = audit.BY_SYSTEM) -> bool:
    """Remove a view; the tokens limited to it lose it (one left with none sees nothing)."""
    with transaction.atomic():
        found = View.objects.filter(name=name).first()
        if found is None:
            return False
        tokens = sorted(ApiToken.objects.filter(views=found).values_list("name", flat=True))
        audit.record(AuditAction.VIEW_REMOVE, name, actor=by, before={**state(found), "tokens": tokens})
        found.delete()  # and its rows in the tokens' views
    changed()
    return True


def prefilter(rows: QuerySet[Tool], *narrowings: object) -> QuerySet[Tool]:
    """`rows` cut down in the database to the tools the includes of these narrowings (each a
    `toolviews.Selection` or `Scope`, or None) may hold: a superset of what they select (SQL
    `LIKE` ignores case), so the exact check (`narrow`) still follows."""
    for narrowing in narrowings:
        include = getattr(narrowing, "include", None)
        if include is None:
            continue
        exact, prefixes = toolviews.split_patterns(include)
        if "" in prefixes:
            continue  # `*`: every tool
        q = Q(registered_name__in=exact)
        for prefix in prefixes:
            q |= Q(registered_name__startswith=prefix)
        rows = rows.filter(q)
    return rows


def holds(visible: Visible, registered: str) -> bool:
    return visible is None or visible(registered)


def narrow(tools: Iterable[Tool], visible: Visible) -> list[Tool]:
    """The tools `visible` lets through, in their order."""
    if visible is None:
        return list(tools)
    return [t for t in tools if visible(t.registered_name)]


def registered_names() -> list[str]:
    return list(Tool.objects.order_by("registered_name").values_list("registered_name", flat=True))


def to_dict(view: View, names: list[str]) -> dict:
    """A view as `GET /v1/views` lists it, with the registered names of the tools in it now."""
    selection = view.selection()
    return {
        "name": view.name,
        "description": view.description,
        "include": list(view.include),
        "exclude": list(view.exclude),
        "tools": [n for n in names if selection(n)],
    }


def listing(token: ApiToken | None = None) -> list[dict]:
    """Every view, by name; for a token limited to views, its own views only (the others
    would tell it what exists)."""
    rows = View.objects.order_by("name")
    scope = cache.scope(token)
    if scope is not None:
        rows = rows.filter(name__in=scope.views)
    names = registered_names()
    return [to_dict(v, names) for v in rows]


def known_toolviews(names: Iterable[str]) -> tuple[list[View], list[str]]:
    """The views of these names, and the names that are no view."""
    wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    found = {v.name: v for v in View.objects.filter(name__in=wanted)}
    return [found[n] for n in wanted if n in found], [n for n in wanted if n not in found]


def selection_of(name: str) -> toolviews.Selection | None:
    view = cache.toolview(name)
    return None if view is None else view.selection()
