# The two commands: `make run` and `make test` (and `make lint`, which CI runs first). Everything
# they need is installed from here.
VENV := .venv
PY := $(VENV)/bin/python
SERVERS_VENV := .venv-servers
EVERYTHING := tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js

.PHONY: run test setup setup-test bench bench-ab e2e lint clean

run: setup
	@scripts/install-bubblewrap.sh
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py bootstrap_admin
	$(PY) manage.py serve --host 127.0.0.1 --port 8000

# The tests start hundreds of Python processes; where PYTHONDONTWRITEBYTECODE is set (as on CI's
# machines) none of them writes its bytecode, so each would compile the console from source:
# compiled once here instead.
test: setup setup-test
	$(PY) -m compileall -q -x node_modules mcpcore agenvoy_site tests bench manage.py
	$(PY) -m pytest -q
	$(PY) -m pytest -q -m e2e
	$(PY) -m pytest -q -m scaleout

bench: setup setup-test
	$(PY) bench/run.py

# The call path's benchmarks of this tree against BASE, alternately in one run (bench/README.md).
CYCLES ?= 3
bench-ab: setup setup-test
	@[ -n "$(BASE)" ] || { echo "usage: make bench-ab BASE=<commit> [CYCLES=3]" >&2; exit 2; }
	$(PY) bench/ab.py $(BASE) --cycles $(CYCLES)

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt scripts/find-python.sh
	@PYBIN=$$(scripts/find-python.sh) || exit 1; \
	  [ -x $(PY) ] || $$PYBIN -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

setup-test: $(SERVERS_VENV)/.installed $(EVERYTHING)
	scripts/install-system.sh

$(SERVERS_VENV)/.installed: tests/servers/requirements-time.txt
	@PYBIN=$$(scripts/find-python.sh) || exit 1; \
	  [ -x $(SERVERS_VENV)/bin/python ] || $$PYBIN -m venv $(SERVERS_VENV)
	$(SERVERS_VENV)/bin/python -m pip install -q -r tests/servers/requirements-time.txt
	touch $@

$(EVERYTHING): tests/servers/package.json tests/servers/package-lock.json
	cd tests/servers && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The type check (mypy.ini) loads the settings: a throwaway key and data folder, never the console's.
lint: setup
	$(PY) -m ruff check mcpcore agenvoy_site tests bench
	$(PY) -m ruff format --check mcpcore agenvoy_site tests bench
	DJANGO_SECRET_KEY=lint AGENVOY_DATA_DIR=.mypy_cache/data $(PY) -m mypy mcpcore agenvoy_site

clean:
	rm -rf $(VENV) $(SERVERS_VENV) tests/servers/node_modules
