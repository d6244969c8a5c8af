"""NVML calls that fill an array of structs the caller gives and answer how many, made in one call.

nvidia-ml-py's wrappers of such calls (the compute processes, the per-process utilization samples)
ask twice: the count with no array, then the structs into a new one, and turn each struct into a
Python object through its attribute hooks. Here the array is kept per GPU, sized for what the driver
holds, and the structs are read through ctypes' own field descriptors: one C call, a second only
where the driver answers INSUFFICIENT_SIZE (the array then grows, for good). Where the second call is
a firmware round trip (2.1 ms of CPU for per-process utilization on an H200), that halves the cost;
the process lists of 8 GPUs with 4 processes each take 0.15 ms a poll instead of 0.29
(``bench/processes_bench.py``).

The C function comes from nvidia-ml-py's private lookup (:func:`warptd.backends.nvidia.calls.pointer`);
where that is gone, each call goes through the public wrapper (two calls, the same values).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from warptd.backends.nvidia.calls import PUBLIC, pointer

Row = TypeVar("Row")
_INSUFFICIENT_SIZE = 7  # nvmlReturn_t


class BufferedCall(Generic[Row]):
    """One GPU's call of ``name``. ``make(function, buffer, capacity, argument)`` calls the C function
    into ``buffer`` (``capacity`` structs) and answers its return code and the count it set;
    ``read(values)`` makes a row of the values of one struct's ``fields``; ``public(argument)`` is
    nvidia-ml-py's wrapper, answering structs (or its objects) with the same fields."""

    def __init__(
        self,
        nvml: Any,
        name: str,
        struct: type[ctypes.Structure],
        fields: tuple[str, ...],
        *,
        make: Callable[[Any, Any, int, Any], tuple[int, int]],
        read: Callable[[tuple[Any, ...]], Row],
        public: Callable[[Any], Iterable[Any]],
        capacity: int,
    ) -> None:
        self.nvml, self.name, self._struct, self._fields = nvml, name, struct, fields
        self._make, self._read, self._public = make, read, public
        self._getters = tuple(getattr(struct, field).__get__ for field in fields)
        self.function: Any = None  # looked up at the first call, as the wrapper looks it up
        self.capacity = capacity
        self.buffer = (struct * capacity)()

    def __call__(self, argument: Any = None) -> list[Row]:
        """The rows the call answers; NVMLError for a failed return, as the wrapper raises it
        (FUNCTION_NOT_FOUND for a function this driver lacks)."""
        if self.function is None:
            self.function = pointer(self.nvml, self.name) or PUBLIC
        if self.function is PUBLIC:
            fields = self._fields
            return [self._read(tuple(getattr(raw, f) for f in fields)) for raw in self._public(argument)]
        code, count = self._make(self.function, self.buffer, self.capacity, argument)
        if code == _INSUFFICIENT_SIZE:  # more than the array holds: grow it, for good
            self.capacity = max(count, 2 * self.capacity)
            self.buffer = (self._struct * self.capacity)()
            code, count = self._make(self.function, self.buffer, self.capacity, argument)
        if code:  # not NVML_SUCCESS: the exception class of the code, as _nvmlCheckReturn raises it
            raise self.nvml.NVMLError(code)
        getters, read = self._getters, self._read
        return [read(tuple(get(raw) for get in getters)) for raw in self.buffer[:count]]
