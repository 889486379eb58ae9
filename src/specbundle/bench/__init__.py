"""The verification benchmark: does speculation pay on this engine, at this concurrency?

Runs the engine twice from the bundle's rendered shell manifest (with and without
speculation; same binary, prompts, concurrency, greedy and fixed length), interleaved in
ABBA rounds, reads acceptance as counter deltas over the measured windows, measures the
draft's cost c by serving it alone, and writes a versioned report::

    bundle = verify_bundle(mirror, "my-bundle", policy)  # or read_unsigned (connected side)
    report = run_bench(bundle, engine="llamacpp", options=BenchOptions())
    report.at_p95.ratio.low, report.at_p95.acceptance.alpha, report.at_p95.c_measured

Modules: ``interface`` (transport + engine adapter protocols), ``client`` (aiohttp
streaming client), ``engines`` (llama.cpp, vLLM, SGLang adapters), ``prometheus`` and
``logs`` (engine metric readings), ``stats`` (pure maths), ``workload`` (prompts),
``servers`` (start/attach/stop, loopback only), ``runner`` (ABBA rounds, sequential
extension, A/A, the draft alone), ``analysis`` (raw runs -> report), ``report`` (versioned
schema), ``html`` (self-contained page), ``api`` (this facade; shell or docker runtime).
"""

from specbundle.bench.api import load_report, report_path, run_bench
from specbundle.bench.report import SCHEMA_VERSION, BenchReport, LevelResult, report_schema
from specbundle.bench.runner import BenchOptions, sweep_levels

__all__ = ["SCHEMA_VERSION", "BenchOptions", "BenchReport", "LevelResult", "load_report",
           "report_path", "report_schema", "run_bench", "sweep_levels"]
