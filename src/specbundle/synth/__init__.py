"""Tiny llama-architecture target/draft pairs for tests and the demo (random weights).

Each model directory holds what a real Hub repo of a llama checkpoint holds (config, f16
safetensors, fast tokenizer, chat template, README with a license) plus a GGUF conversion that
``llama-server`` loads, so every pipeline stage can run end to end without downloading a model.
"""

from specbundle.synth.eagle import make_eagle3_head
from specbundle.synth.files import MODEL_FILES, write_model_dir
from specbundle.synth.pair import Quality, SynthModel, SynthPair, make_model, make_pair
from specbundle.synth.tokenizer import SynthTokenizer, build_tokenizer
from specbundle.synth.weights import Shape

__all__ = ["MODEL_FILES", "Quality", "Shape", "SynthModel", "SynthPair", "SynthTokenizer",
           "build_tokenizer", "make_eagle3_head", "make_model", "make_pair",
           "write_model_dir"]
