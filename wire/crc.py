"""CRC-32C (Castagnoli), the record batch checksum, from the crc32c package's C extension.

The package's __init__ asks importlib.metadata for its own version, which costs a tenth of
`kshim serve`'s start (importlib.metadata and its dependencies); this module loads the extension
module itself without running that __init__, and falls back to the package if its layout ever
changes (the same function either way)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
from typing import Callable, Union

Buffer = Union[bytes, bytearray, memoryview]


def _extension() -> Callable[[Buffer], int]:
    try:
        package = importlib.util.find_spec("crc32c")  # found, not run: a top-level name imports no parent
        if package is not None and package.submodule_search_locations:
            spec = importlib.machinery.PathFinder.find_spec("crc32c._crc32c", list(package.submodule_search_locations))
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return module.crc32c
    except (ImportError, OSError, AttributeError):
        pass
    from crc32c import crc32c as packaged
    return packaged


crc32c: Callable[[Buffer], int] = _extension()
