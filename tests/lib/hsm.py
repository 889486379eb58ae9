"""A fresh SoftHSM2 token with one P-256 key pair generated inside it (for the HSM tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")
PIN = "4711-test"
HAVE_SOFTHSM = bool(MODULE.exists() and shutil.which("softhsm2-util")
                    and shutil.which("pkcs11-tool"))


def init_token(hsm: Path, label: str = "release") -> tuple[str, dict[str, str]]:
    """Initialise a token under ``hsm``; return its key's URI and the env it needs."""
    (hsm / "tokens").mkdir(parents=True)
    conf = hsm / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {hsm / 'tokens'}\nobjectstore.backend = file\n"
                    "log.level = ERROR\n")
    env = {"SOFTHSM2_CONF": str(conf), "SPECBUNDLE_PKCS11_PIN": PIN}
    run_env = {**os.environ, **env}
    subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", label,
                    "--pin", PIN, "--so-pin", "so-" + PIN], check=True, capture_output=True,
                   env=run_env)
    subprocess.run(["pkcs11-tool", "--module", str(MODULE), "--token-label", label,
                    "--login", "--pin", PIN, "--keypairgen", "--key-type", "EC:prime256v1",
                    "--label", "signing-key", "--id", "01"], check=True, capture_output=True,
                   env=run_env)
    return f"pkcs11:token={label};object=signing-key?module-path={MODULE}", env
