"""specbundle: carry speculative-decoding deployments (target + draft) into air-gapped clusters.

The package tree is the pipeline, and a stage imports only earlier stages::

    spec          bundle.yaml -> BundleSpec (validated input)
    pull/         hub or local dir -> verified objects in the mirror + BundleRecord
    mirror/       content-addressed store in Hugging Face cache layout, event log
    scan/         security and draft/target compatibility findings
    attest/ sign/ OMS model.sig + in-toto/DSSE attestations
    verify/       trust policy + re-hash on the isolated side
    render/       offline serve manifests (vLLM, SGLang, llama.cpp) + lint
    bench/        A/B acceptance-and-throughput benchmark
    admit/        the gate and its signed decision
    audit/        provenance of any draft, event-log verification, ML-BOM

Only :mod:`specbundle.cli` imports every stage; the library never prints or exits.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
