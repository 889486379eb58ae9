"""The content-addressed mirror on either side of the air gap (see :mod:`.store` for layout)."""

from specbundle.mirror.store import GENESIS, GcResult, Mirror, model_dir_name, utc_now

__all__ = ["GENESIS", "GcResult", "Mirror", "model_dir_name", "utc_now"]
