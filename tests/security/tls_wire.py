"""A blocking TLS socket speaking Kafka (tests only), like tests/broker/wire.py over TLS."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from kayak.protocol import ClientConnection, Message
from tests.fixtures.certs import TlsFiles


class TlsWireClient:
    """A blocking TLS socket speaking Kafka through kayak's sans-I/O ClientConnection."""

    def __init__(
        self,
        bootstrap: str,
        files: TlsFiles,
        *,
        cert: Path | None = None,
        key: Path | None = None,
        server_hostname: str = "localhost",
    ) -> None:
        host, port = bootstrap.rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(files.ca))
        if cert is not None:
            context.load_cert_chain(str(cert), str(key))
        raw = socket.create_connection((host, int(port)), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname=server_hostname)
        self.protocol = ClientConnection(client_id="kayak-tls-tests")

    def request(self, message: Message, version: int) -> Message:
        _, frame = self.protocol.send_request(message, version)
        self.sock.sendall(frame)
        while (event := self.protocol.next_event()) is None:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closes_within(self, within: float) -> bool:
        """Whether the broker closes the connection within ``within`` seconds."""
        self.sock.settimeout(within)
        return self.closed_by_peer()

    def closed_by_peer(self) -> bool:
        """True once the broker has closed its side (EOF, reset or a TLS alert)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True
        except TimeoutError:
            return False
