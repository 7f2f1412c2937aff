"""`python -m tests.servers.oauthlab --port P [--access-ttl SECONDS] [--client ID:SECRET[:post]] [--state FILE]`:
the lab on 127.0.0.1:P (0 picks a free port), printing `oauthlab ready http://127.0.0.1:P` once
it accepts connections."""

import argparse
import asyncio
import socket
from pathlib import Path

import uvicorn

from tests.servers.oauthlab.app import SCOPES, build
from tests.servers.oauthlab.provider import LabProvider, client_credentials_client


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.oauthlab")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--access-ttl", type=int, default=3600, help="access token lifetime, seconds")
    parser.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="ID:SECRET[:post]",
        help="a client-credentials client (HTTP Basic at the token endpoint; `:post`: the secret in the form)",
    )
    parser.add_argument("--state", type=Path, help="keep clients and tokens in this file across restarts")
    args = parser.parse_args()

    # The socket listens before the app starts: a client that connects early waits in the
    # backlog instead of being refused, and --port 0 learns its port here.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    issuer = f"http://127.0.0.1:{sock.getsockname()[1]}"

    provider = LabProvider(issuer, issuer + "/mcp", args.access_ttl, args.state)
    for spec in args.client:
        provider.add_client(client_credentials_client(spec, SCOPES))
    config = uvicorn.Config(build(provider), log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
