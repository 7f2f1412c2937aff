"""The browser suites' accessibility results (tests/e2e/a11y.py), printed after the run."""


def pytest_terminal_summary(terminalreporter):
    from tests.e2e.a11y import RESULTS

    if RESULTS:
        terminalreporter.section("axe-core and keyboard, per page")
        for line in RESULTS:
            terminalreporter.write_line(line)
