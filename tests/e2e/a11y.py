"""Accessibility checks in a real Chromium: axe-core (npm, pinned in tests/servers/package.json) run
on a page at desktop and phone width, and a walk of the page with the Tab key; and the page's
security headers (SPEC 22.3), with every Content-Security-Policy violation Chromium reported on
it (`RECORD_CSP` in tests/e2e/browser.py, on every page of `new_context`).

Every result is kept in `RESULTS`; tests/e2e/conftest.py prints them at the end of the run, one
line per page and width with the violations counted by impact."""

from playwright.sync_api import Page

from tests.e2e.browser import DESKTOP, DOCUMENTS, PHONE
from tests.live import ROOT

AXE = ROOT / "tests/servers/node_modules/axe-core/axe.min.js"
IMPACTS = ("critical", "serious", "moderate", "minor")
FAILING = ("critical", "serious")
RESULTS: list[str] = []  # "label @width: counts", printed in the terminal summary

_RUN_AXE = """async () => {
  const r = await axe.run(document, {resultTypes: ["violations"]});
  return r.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " :: " + (n.failureSummary || "").replace(/\\s+/g, " ").slice(0, 240)),
  }));
}"""

# Everything a person can act on. Hidden ones (closed <details>, [hidden]) don't count.
_MARK_FOCUSABLE = """() => {
  const sel = 'a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), ' +
              'select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex="-1"])';
  const found = [...document.querySelectorAll(sel)].filter(e => e.checkVisibility({visibilityProperty: true}));
  found.forEach((e, i) => { e.dataset.kb = String(i); });
  return found.map(e => (e.tagName.toLowerCase() + " " + (e.innerText || e.value || e.name || e.id || "").trim()).slice(0, 60));
}"""

_FOCUSED = """() => {
  const e = document.activeElement;
  if (!e || e === document.body || e.dataset.kb === undefined) return null;
  const s = getComputedStyle(e);
  const ring = (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== "none";
  return {kb: e.dataset.kb, ring: ring};
}"""


def axe(page: Page, label: str) -> list[str]:
    """axe-core on the page as it is, at 1280 and at 390 px (where nothing may scroll
    sideways, SPEC 15). The serious and critical violations, as readable lines; every result
    goes to RESULTS."""
    assert AXE.is_file(), f"{AXE} is missing: `make setup-test` installs tests/servers/package.json"
    problems: list[str] = []
    for size in (DESKTOP, PHONE):
        page.set_viewport_size(size)
        # The page at rest: while an htmx request runs (a live panel loading, say) its submit
        # buttons are dimmed on purpose, and axe would judge the dimmed colours.
        page.wait_for_function("() => !document.querySelector('.htmx-request')")
        if not page.evaluate("typeof window.axe !== 'undefined'"):
            # Through DevTools, not a <script> element: the page's CSP refuses inline scripts.
            page.evaluate(AXE.read_text())
        found = page.evaluate(_RUN_AXE)
        counts = {i: sum(1 for v in found if v["impact"] == i) for i in IMPACTS}
        where = f"{label} @{size['width']}"
        RESULTS.append(f"{where}: " + ", ".join(f"{i} {counts[i]}" for i in IMPACTS))
        for v in found:
            if v["impact"] in FAILING:
                problems.append(f"{where}: {v['impact']} {v['id']} ({v['help']}): " + " | ".join(v["nodes"]))
        if size is PHONE:
            wide = page.evaluate("document.documentElement.scrollWidth")
            if wide > size["width"]:
                problems.append(f"{where}: the page scrolls sideways ({wide} px wide)")
    page.set_viewport_size(DESKTOP)
    return problems


def tab_walk(page: Page, label: str) -> list[str]:
    """Tab through the whole page from its top: every visible control must take the focus, in
    turn, and show where it is (an outline or a ring). What was missed, as readable lines."""
    names = page.evaluate(_MARK_FOCUSABLE)
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    page.mouse.move(0, 0)
    reached, no_ring = set(), set()
    for _ in range(len(names) + 5):
        page.keyboard.press("Tab")
        at = page.evaluate(_FOCUSED)
        if at is None:
            continue
        reached.add(int(at["kb"]))
        if not at["ring"]:
            no_ring.add(int(at["kb"]))
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    # A live push may have swapped a part of the page meanwhile: what it replaced is gone.
    present = set(page.evaluate("() => [...document.querySelectorAll('[data-kb]')].map(e => +e.dataset.kb)"))
    problems = [f"{label}: Tab never reaches {names[i]!r}" for i in sorted(present - reached)]
    problems += [f"{label}: no visible focus on {names[i]!r}" for i in sorted(no_ring)]
    RESULTS.append(f"{label} keyboard: {len(reached)} of {len(names)} controls reached by Tab")
    return problems


def headers(page: Page, label: str) -> list[str]:
    """SPEC 22.3 on the page as served (its last document answer), and what Chromium refused
    on it so far."""
    document = DOCUMENTS.get(page)
    if document is None:
        return [f"{label}: no document answer seen (a page of tests/e2e/browser.py's new_context?)"]
    got = document.headers
    csp = got.get("content-security-policy", "")
    directives = {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}
    problems = [
        f"{label}: {what}"
        for what, ok in (
            (
                f"Content-Security-Policy without default-src 'self': {csp!r}",
                directives.get("default-src") == ["'self'"],
            ),
            (
                f"Content-Security-Policy without frame-ancestors 'none': {csp!r}",
                directives.get("frame-ancestors") == ["'none'"],
            ),
            (f"Content-Security-Policy allows inline scripts: {csp!r}", "'unsafe-inline'" not in csp),
            ("no X-Content-Type-Options: nosniff", got.get("x-content-type-options") == "nosniff"),
            ("no Referrer-Policy: same-origin", got.get("referrer-policy") == "same-origin"),
        )
        if not ok
    ]
    refused = page.evaluate("() => window.agvCspViolations || ['the CSP recorder is missing']")
    return problems + [f"{label}: CSP violation: {v}" for v in refused]


def check(page: Page, label: str) -> list[str]:
    return headers(page, label) + axe(page, label) + tab_walk(page, label)
