"""Both OAuth sides of the console, below the doors.

The console as an OAuth client of upstream servers (SPEC 16): `upstream` (each server's tokens
and client registration, sealed; the authorization-code flows). The SDK's side of it, the
providers, is `supervisor/upstream.py`.

The console as an OAuth authorization server for apps that sign in (SPEC 21; "app" in code
means these only): `clients` (who an app is: dynamic registration's rules, Client ID Metadata
Documents fetched safely, redirect URIs matched); `grants` (what a person allowed: grants,
codes, access and refresh tokens, all kept as SHA-256 only). The MCP door serves the SDK's
OAuth routes on them (`mcpserver/authserver.py`), the web door the `Allow an app` page and the
Connected apps list, `/v1` the grants' routes; `bearer` reads the access tokens.
"""
