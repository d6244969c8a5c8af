"""Installing a test double over a real vendor SDK module, shared by every SDK double.

Each API function warptd may call is replaced by ``create_autospec`` of the *real* function (a
wrong arity or a misspelt keyword fails as it would against the SDK), answering from the double's
state; every other API function raises ``AssertionError``, so an unexpected call is loud.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections import Counter
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any
from unittest import mock


def is_api_function(module: ModuleType, prefix: str) -> Callable[[str], bool]:
    """Names of ``module`` that are its API functions: callables named ``prefix…`` that are not classes."""

    def check(name: str) -> bool:
        real = getattr(module, name, None)
        return name.startswith(prefix) and callable(real) and not isinstance(real, type)

    return check


@contextlib.contextmanager
def patched_sdk(
    module: ModuleType,
    impls: dict[str, Callable[..., Any]],
    is_api: Callable[[str], bool],
    mocks: dict[str, mock.Mock],
    counts: Counter[str] | None = None,
) -> Iterator[None]:
    """Patch ``module``'s API functions for the block.

    ``impls`` answer the calls. With ``counts`` (benchmarks, soaks) the signature is checked by
    ``inspect.signature(real).bind`` and only counted, so a long run does not grow mock call lists;
    otherwise each is an autospec mock recorded in ``mocks``.
    """
    missing = sorted(set(impls) - set(dir(module)))
    if missing:  # the double answers a function the real package does not have
        raise AssertionError(f"{module.__name__} has no {', '.join(missing)}")
    with contextlib.ExitStack() as stack:
        for name in dir(module):
            replacement: Any
            if not is_api(name):
                continue
            real = getattr(module, name)
            if name in impls and counts is None:
                impl = impls[name]
                if inspect.isbuiltin(real):  # autospec does not check a compiled function's signature
                    impl = _signature_checked(name, real, impl, Counter())
                replacement = mocks[name] = mock.create_autospec(real, side_effect=impl)
            elif name in impls:
                replacement = _signature_checked(name, real, impls[name], counts)
            else:
                replacement = _unexpected(module.__name__, name)
            stack.enter_context(mock.patch.object(module, name, replacement))
        yield


def _signature_checked(
    name: str, real: Callable[..., Any], impl: Callable[..., Any], counts: Counter[str]
) -> Callable[..., Any]:
    signature = inspect.signature(real)

    @functools.wraps(real)
    def call(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs)  # TypeError on a wrong call, as autospec raises
        counts[name] += 1
        return impl(*args, **kwargs)

    return call


def _unexpected(module: str, name: str) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"warptd called {module}.{name}, which the double does not implement")

    return fail


def burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of the calling thread's CPU, as a driver's time in a call is spent: a price
    charged in CPU, where a sleep would charge a wait."""
    if seconds <= 0:
        return
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass
