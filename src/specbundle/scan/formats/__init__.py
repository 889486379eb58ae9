"""Weight formats: strict safetensors and GGUF headers, never tensor data.

:mod:`.safetensors_header` and :mod:`.gguf_header` are the checks; :mod:`.gguf_reader` is the
bounded GGUF parser under the latter. Other packages (compatibility, templates) read headers
through the names below.
"""

from __future__ import annotations

from specbundle.scan.formats.gguf_header import (
    GGUFCheck,
    GGUFHeader,
    StringArray,
    load_gguf,
    read_gguf,
)
from specbundle.scan.formats.safetensors_header import (
    SafetensorsCheck,
    StHeader,
    read_header,
    tensor_bytes,
)

__all__ = ["GGUFCheck", "GGUFHeader", "SafetensorsCheck", "StHeader", "StringArray",
           "load_gguf", "read_gguf", "read_header", "tensor_bytes"]
