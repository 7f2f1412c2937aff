"""A real OAuth 2.1 authorization server and a protected MCP server, in one process, for tests.

Built from the SDK's own server side: its authorization routes (`create_auth_routes`, through
`MCPServer(auth=..., auth_server_provider=...)`), the `OAuthAuthorizationServerProvider` protocol
(tests/servers/oauthlab/provider.py), its bearer middleware and protected resource metadata. What the SDK
lacks is added beside it, never patched in: a consent page, the `client_credentials` grant (a
route in front of the SDK's token route that hands every other grant to the SDK's handler) and
plain JSON test controls under `/_lab/` (tests/servers/oauthlab/app.py).

    python -m tests.servers.oauthlab --port P [--access-ttl SECONDS] [--client ID:SECRET[:post]] [--state FILE]

prints `oauthlab ready <url>` once it listens. tests/servers/oauthlab/run.py starts and stops it for tests.
"""
