"""The software switch's exceptions: their one base (SoftSwitchError), and the one error type
the P4Runtime layer raises, which the server maps to a gRPC status."""

from __future__ import annotations

import grpc


class SoftSwitchError(Exception):
    """Anything the software switch refuses or fails at."""


class P4RTError(SoftSwitchError):
    """A request the switch refuses; `code` is the gRPC status the client receives."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> P4RTError:
    return P4RTError(grpc.StatusCode.INVALID_ARGUMENT, message)
