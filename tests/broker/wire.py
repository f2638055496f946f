"""A blocking socket speaking Kafka through kayak's sans-I/O ClientConnection (tests only)."""

from __future__ import annotations

import socket

from kayak.protocol import ClientConnection, Message


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.protocol = ClientConnection(client_id="kayak-tests")

    def request(self, message: Message, version: int) -> Message:
        _, frame = self.protocol.send_request(message, version)
        self.sock.sendall(frame)
        while (event := self.protocol.next_event()) is None:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.protocol.receive_data(data)
        return event.response

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closed_by_peer(self) -> bool:
        """True once the broker has closed its side (reads return EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            return True

    def closes_within(self, within: float) -> bool:
        """Whether the broker closes the connection within ``within`` seconds."""
        self.sock.settimeout(within)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()
