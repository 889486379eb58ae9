"""Configs and remote code: every JSON/YAML file in every reading, and the code they name.

:mod:`.check` parses and searches configs; :mod:`.remote_code` judges ``auto_map``, Python
files and ``custom_generate/`` on top of that parse.
"""

from __future__ import annotations

from specbundle.scan.configs.check import ConfigCheck, find_key, is_config, load_config
from specbundle.scan.configs.remote_code import RemoteCodeCheck

__all__ = ["ConfigCheck", "RemoteCodeCheck", "find_key", "is_config", "load_config"]
