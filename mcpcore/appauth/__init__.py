"""Apps that sign in (SPEC 21): the rows behind the console's own OAuth authorization server.

`clients`: who an app is (dynamic registration's rules, Client ID Metadata Documents fetched
safely, redirect URIs matched); `grants`: what a person allowed (grants, codes, access and
refresh tokens, all kept as SHA-256 only). Below the doors: the MCP door serves the SDK's
OAuth routes on them (`mcpserver/authserver.py`), the web door the `Allow an app` page and the
Connected apps list, `/v1` the grants' routes; `bearer` reads the access tokens.
"""
