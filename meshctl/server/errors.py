"""The API server's errors: an HTTP status and one line that says what was expected."""

from __future__ import annotations


class ApiError(Exception):
    """Answered as ``{"error": message}`` with ``status``; nothing was written."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def unauthorised(message: str = "a bearer token is required (meshctl login)") -> ApiError:
    return ApiError(401, message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, message)


def invalid(message: str) -> ApiError:
    return ApiError(422, message)


def too_large(message: str) -> ApiError:
    return ApiError(413, message)
