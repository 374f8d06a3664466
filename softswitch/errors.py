"""The one error type the P4Runtime layer raises; the server maps it to a gRPC status."""

from __future__ import annotations

import grpc


class P4RTError(Exception):
    """A request the switch refuses; `code` is the gRPC status the client receives."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> P4RTError:
    return P4RTError(grpc.StatusCode.INVALID_ARGUMENT, message)
