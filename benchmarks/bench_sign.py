"""Sign and verify a generated multi-file model; report ratios against references.

References measured in the same run, over the same files, with a warm page cache:

* ``openssl dgst -sha256`` over the files one after another: the single-core read-and-hash
  floor. Targets: specbundle single-threaded <= 1.05x; <= 0.65x on 2+ cores when the model
  has several similar-sized files.
* ``model_signing sign key`` / ``verify key`` (the OMS reference CLI, if installed).
  Target: < 1.0x (faster than the reference).
* specbundle's own key-file arms: the certificate method (a local CA, leaf + intermediate,
  chain validated on verify) and a key in a SoftHSM2 token (PKCS#11, if softhsm2 and PyKCS11
  are installed) sign and verify the same files. Target: within 1.05x of the key file.

Prints a table (and ``--json``); never asserts. Example::

    python benchmarks/bench_sign.py --size 2G --files 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specbundle.attest import (
    ChainTrust,
    SigningKey,
    generate_key,
    write_private_key,
    write_public_key,
)
from specbundle.sign import sign_model
from specbundle.transfer import parse_size
from specbundle.verify import verify_model


def make_model(root: Path, total: int, files: int) -> list[Path]:
    """``files`` similar-sized weight shards plus small configs, ``total`` bytes in all."""
    root.mkdir(parents=True, exist_ok=True)
    block = os.urandom(4 << 20)
    paths = []
    per = total // files
    for i in range(files):
        p = root / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        with p.open("wb") as fh:
            left = per
            while left:
                n = min(left, len(block))
                fh.write(block[:n])
                left -= n
        paths.append(p)
    for name in ("config.json", "tokenizer.json", "generation_config.json"):
        (root / name).write_text(json.dumps({"name": name, "pad": "x" * 2048}))
        paths.append(root / name)
    return paths


def _cert(subject: str, issuer: str, pub: ec.EllipticCurvePublicKey,
          signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731
    b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
         .public_key(pub).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(not ca, False, False, False, False, ca, ca, False, False),
                        critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False))
    if subject != issuer:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            signer.public_key()), critical=False)
    if not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]),
                            critical=False)
    return b.sign(signer, hashes.SHA256())


def certificate_signer(key: SigningKey) -> tuple[SigningKey, ChainTrust]:
    """``key`` with a leaf from a fresh root -> intermediate CA, and the trust to verify it."""
    root_key, int_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    root = _cert("bench root", "bench root", root_key.public_key(), root_key, True)
    inter = _cert("bench signing CA", "bench root", int_key.public_key(), root_key, True)
    pub = key.public.key
    assert isinstance(pub, ec.EllipticCurvePublicKey)
    leaf = _cert("bench signer", "bench signing CA", pub, int_key, False)
    return key.with_chain((leaf, inter)), ChainTrust((root,))


def token_signer(work: Path) -> SigningKey | None:
    """A P-256 key generated inside a fresh SoftHSM2 token, or None without the tooling."""
    module = Path("/usr/lib/softhsm/libsofthsm2.so")
    if not (module.exists() and shutil.which("softhsm2-util") and shutil.which("pkcs11-tool")):
        return None
    try:
        from specbundle.attest.pkcs11 import load_token_key
    except ImportError:
        return None
    (work / "tokens").mkdir(parents=True, exist_ok=True)
    conf = work / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {work / 'tokens'}\nobjectstore.backend = file\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    os.environ["SPECBUNDLE_PKCS11_PIN"] = "bench-pin"
    run(["softhsm2-util", "--init-token", "--free", "--label", "bench", "--pin", "bench-pin",
         "--so-pin", "bench-so"])
    run(["pkcs11-tool", "--module", str(module), "--token-label", "bench", "--login", "--pin",
         "bench-pin", "--keypairgen", "--key-type", "EC:prime256v1", "--label", "k"])
    return load_token_key(f"pkcs11:token=bench;object=k?module-path={module}")


def timed_round_robin(arms: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best wall time per arm; arms alternate each round so load spikes hit all of them."""
    best = dict.fromkeys(arms, float("inf"))
    for _ in range(repeat):
        for name, fn in arms.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def run(cmd: list[str]) -> None:
    """Run a reference command; a failure aborts the benchmark (no silent zeros)."""
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {res.stderr.strip()}")


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2G", help="total model size (default 2G)")
    ap.add_argument("--files", type=int, default=4, help="number of weight shards")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (best of, per arm)")
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-sign-"))
    model = work / "model"
    try:
        files = make_model(model, parse_size(args.size), args.files)
        key = generate_key("ecdsa-p256")
        priv, pub = work / "k.pem", work / "k.pub"
        write_private_key(key, priv, overwrite=True)
        write_public_key(key.public, pub)
        sig = work / "model.sig"
        for p in files:  # warm the page cache so every arm reads from memory alike
            with p.open("rb") as fh:
                while fh.read(16 << 20):
                    pass
        arms: dict[str, Callable[[], object]] = {
            "openssl_dgst_sequential":
                lambda: run(["openssl", "dgst", "-sha256", *map(str, files)]),
            "specbundle_sign_1thread": lambda: sign_model(model, key, signature=sig, workers=1),
            "specbundle_sign_parallel": lambda: sign_model(model, key, signature=sig),
            "specbundle_verify_parallel":
                lambda: verify_model(model, key.public, signature=sig),
        }
        cert_key, trust = certificate_signer(key)
        cert_sig = work / "cert.sig"
        arms["specbundle_sign_certificate"] = lambda: sign_model(model, cert_key,
                                                                 signature=cert_sig)
        arms["specbundle_verify_certificate"] = lambda: verify_model(model, trust,
                                                                     signature=cert_sig)
        token = token_signer(work / "hsm")
        if token is not None:
            hsm_sig = work / "hsm.sig"
            arms["specbundle_sign_pkcs11"] = lambda: sign_model(model, token, signature=hsm_sig)
            arms["specbundle_verify_pkcs11"] = lambda: verify_model(model, token.public,
                                                                    signature=hsm_sig)
        ms = shutil.which("model_signing")
        if ms:
            ref_sig = work / "ref.sig"
            arms["model_signing_sign_key"] = lambda: run(
                [ms, "sign", "key", "--private_key", str(priv), "--signature", str(ref_sig),
                 str(model)])
            arms["model_signing_verify_key"] = lambda: run(
                [ms, "verify", "key", "--public_key", str(pub), "--signature", str(ref_sig),
                 str(model)])
        res = timed_round_robin(arms, args.repeat)
        base = res["openssl_dgst_sequential"]
        ratios = {
            "sign_1thread_vs_openssl": res["specbundle_sign_1thread"] / base,
            "sign_parallel_vs_openssl": res["specbundle_sign_parallel"] / base,
            "verify_parallel_vs_openssl": res["specbundle_verify_parallel"] / base,
        }
        ratios["sign_certificate_vs_key"] = (res["specbundle_sign_certificate"]
                                             / res["specbundle_sign_parallel"])
        ratios["verify_certificate_vs_key"] = (res["specbundle_verify_certificate"]
                                               / res["specbundle_verify_parallel"])
        if token is not None:
            ratios["sign_pkcs11_vs_key"] = (res["specbundle_sign_pkcs11"]
                                            / res["specbundle_sign_parallel"])
            ratios["verify_pkcs11_vs_key"] = (res["specbundle_verify_pkcs11"]
                                              / res["specbundle_verify_parallel"])
        if ms:
            ratios["sign_vs_model_signing"] = (res["specbundle_sign_parallel"]
                                               / res["model_signing_sign_key"])
            ratios["verify_vs_model_signing"] = (res["specbundle_verify_parallel"]
                                                 / res["model_signing_verify_key"])
        total = sum(p.stat().st_size for p in files)
        out = {"bytes": total, "files": len(files), "cpus": os.cpu_count(),
               "seconds": res, "ratios": ratios}
        if args.json:
            print(json.dumps(out, indent=2))
            return
        print(f"model: {total / 2**30:.2f} GiB in {len(files)} files, {os.cpu_count()} CPUs")
        for k, v in res.items():
            print(f"  {k:<30} {v:8.3f} s  {total / v / 2**20:8.0f} MiB/s")
        for k, v in ratios.items():
            print(f"  {k:<30} {v:8.3f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
