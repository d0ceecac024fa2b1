"""Loading a provider's native library: a process-wide holder that loads it on first use and
remembers why it could not (so a missing library is looked for once and every later call gives the
same reason), and the symbol check cffi's ABI mode needs (it resolves symbols lazily, on first use).

Plugins call ``LoadOnce(load, Unavailable)()`` on their run paths: once loaded it is an attribute
read and a comparison, no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LoadOnce(Generic[T]):
    """``holder()`` is ``load()``'s result, made once; when ``load`` raised ``unavailable`` (an
    exception class whose message is the reason), every call raises it again with that reason."""

    def __init__(self, load: Callable[[], T], unavailable: type[Exception]) -> None:
        self._load, self._unavailable = load, unavailable
        self._value: T | None = None
        self._error: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> T:
        value = self._value
        if value is not None:
            return value
        with self._lock:
            if self._value is None and self._error is None:
                try:
                    self._value = self._load()
                except self._unavailable as e:
                    self._error = str(e)
            if self._value is None:
                raise self._unavailable(self._error)
            return self._value

    def reason(self) -> str:
        """Why it cannot be loaded, or "" when it is."""
        try:
            self()
        except self._unavailable as e:
            return str(e)
        return ""


def missing_symbols(lib: Any, names: Iterable[str]) -> list[str]:
    """The ``names`` a cffi ABI-mode library object does not provide."""
    missing = []
    for name in names:
        try:
            getattr(lib, name)
        except AttributeError:
            missing.append(name)
    return missing
