"""Export five Hugging Face transformer architectures to ONNX the way their users do (transformers' modeling
code through PyTorch's TorchScript exporter), with seeded random weights (no model hub here): BERT-base,
DistilBERT, ViT-base, GPT-2 and the T5-small encoder, at their library's default configurations. transformers
is pinned to 4.44.2 (`nox -s hf_models`): from 4.5x on, GPT-2's masking code no longer traces through that
exporter (RuntimeError: unordered_map::at), and the dynamo exporter's GPT-2 breaks onnxruntime's transformer
optimizer (IndexError in its fusions).

They go into the models cache ($ORT_CORE_MODELS or ~/.cache/ort-core/models) as ``hf_<name>.onnx`` (weights in
the file; BERT-base is ~440 MB), each with the files onnxruntime's tools make from it (``VARIANTS``), and
``hf_exports.json`` recording the versions used (about 4 GB in all). Needs torch, transformers and onnxruntime
(its transformer optimizer imports torch at levels 1 and up), which the runtime never does: `nox -s hf_models`
installs them in its own environment (torch pulls its CUDA libraries, about 3 GB) and runs this. Then
`python bench/transformer_tools.py` runs every file on both runtimes, and `core/tests/test_hf_exports.py`
checks them.

  python bench/export_transformers.py [NAME ...] [--cache DIR] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from real_models_lib import cache_dir

CACHE = cache_dir()
OPSET = 17
SEQ = 128


def _text_model(name: str):
    """(module, example inputs, input names, output names, dynamic axes) of a text model."""
    import torch
    import transformers as T

    ids = torch.randint(0, 1000, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    if name == "bert":
        model = T.BertModel(T.BertConfig())
        args, names = (ids, mask, torch.zeros_like(ids)), ["input_ids", "attention_mask", "token_type_ids"]
        axes["token_type_ids"] = {0: "batch", 1: "sequence"}
    elif name == "distilbert":
        model = T.DistilBertModel(T.DistilBertConfig())
        args, names = (ids, mask), ["input_ids", "attention_mask"]
    elif name == "gpt2":
        model = T.GPT2Model(T.GPT2Config(use_cache=False))
        args, names = (ids, mask), ["input_ids", "attention_mask"]
    else:  # t5 encoder
        model = T.T5EncoderModel(T.T5Config())
        args, names = (ids, mask), ["input_ids", "attention_mask"]
    outputs = ["last_hidden_state"]
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    return _by_name(model, names), args, names, outputs, axes


def _by_name(model, names):
    """``model`` called with its inputs by keyword (positional orders differ between models and transformers
    versions), returning the last hidden state."""
    import torch

    class ByName(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):  # explicit: torch.export maps axes
            given = dict(zip(["input_ids", "attention_mask", "token_type_ids"], [input_ids, attention_mask,
                                                                                 token_type_ids]))
            return self.model(**{k: given[k] for k in names}).last_hidden_state

    return ByName()


def _whisper():
    import torch
    import transformers as T

    config = T.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6, decoder_layers=4,
                             decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536)  # tiny
    encoder = T.WhisperModel(config).get_encoder()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_features):
            return self.encoder(input_features).last_hidden_state

    return (Encoder(), (torch.randn(1, 80, 3000),), ["input_features"], ["last_hidden_state"],
            {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}})


def _vit():
    import torch
    import transformers as T

    model = T.ViTModel(T.ViTConfig(), add_pooling_layer=False)
    return (model, (torch.randn(1, 3, 224, 224),), ["pixel_values"], ["last_hidden_state"],
            {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}})


# onnxruntime.transformers.optimizer's model type, heads and hidden size of each
SHAPES = {"bert": ("bert", 12, 768), "distilbert": ("bert", 12, 768), "vit": ("vit", 12, 768),
          "gpt2": ("gpt2", 12, 768), "t5_encoder": ("t5", 8, 512)}
VARIANTS = {"": "the export", "opt1": "optimize_model(opt_level=1)", "opt2": "optimize_model(opt_level=2)",
            "qdyn": "quantize_dynamic (int8 weights)", "nbits4": "MatMulNBitsQuantizer (4 bits, block 32)"}
"""The files made from each export with onnxruntime's tools (``hf_<name>.<variant>.onnx``)."""

MODELS = {"bert": "BERT-base (BertModel, bert-base-uncased's configuration)",
          "distilbert": "DistilBERT (DistilBertModel, distilbert-base-uncased's configuration)",
          "vit": "ViT-base/16 at 224x224 (ViTModel without the pooler)",
          "gpt2": "GPT-2 small (GPT2Model, no past key values)",
          "t5_encoder": "T5-small's encoder (T5EncoderModel)",
          "whisper_tiny_encoder": "Whisper-tiny's encoder (30 s of 80 log-mel bins; whisper-tiny's configuration)"}


def export(name: str, path: str) -> float:
    import torch

    torch.manual_seed(0)
    model, args, names, outputs, axes = _vit() if name == "vit" else _whisper() if name.startswith("whisper") \
        else _text_model(name)
    model.eval()
    t0 = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # the TorchScript exporter: what optimum and transformers' users have produced for years, and the graphs
        # onnxruntime's transformer optimizer is written for
        torch.onnx.export(model, args, path, input_names=names, output_names=outputs, dynamic_axes=axes,
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)
    return time.perf_counter() - t0


def variants(name: str, path: str, force: bool) -> dict[str, str]:
    """The export rewritten by onnxruntime's tools, as users save models (its transformer optimizer at levels 1
    and 2, its dynamic quantizer, its 4-bit MatMulNBits quantizer); files beside the export."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.transformers.optimizer import optimize_model

    kind, heads, hidden = SHAPES.get(name, (None, 0, 0))
    made = {}
    for variant in VARIANTS:
        if not variant or (variant.startswith("opt") and kind is None):  # no transformer optimizer model type
            continue
        out = path.removesuffix(".onnx") + f".{variant}.onnx"
        made[variant] = os.path.basename(out)
        if os.path.exists(out) and not force:
            continue
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if variant.startswith("opt"):
                    optimize_model(path, model_type=kind, num_heads=heads, hidden_size=hidden,
                                   opt_level=int(variant[-1])).save_model_to_file(out)
                elif variant == "qdyn":
                    quantize_dynamic(path, out, weight_type=QuantType.QInt8)
                else:
                    import onnx

                    q = MatMulNBitsQuantizer(onnx.load(path), bits=4, block_size=32, is_symmetric=True)
                    q.process()
                    q.model.save_model_to_file(out, use_external_data_format=False)
        except Exception as e:  # noqa: BLE001 - onnxruntime's tool failed on this export: recorded, not fatal
            made[variant] = {"failed": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1][:200]}"}
            print(f"{name}: {VARIANTS[variant]} failed: {made[variant]['failed']}", flush=True)
            continue
        print(f"{name}: {VARIANTS[variant]} -> {out} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return made


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=list(MODELS), help=f"of {', '.join(MODELS)}")
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--force", action="store_true", help="export again when the file exists")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"needs torch and transformers ({e}); `nox -s hf_models` installs them")
        return 1
    os.makedirs(args.cache, exist_ok=True)
    record_path = os.path.join(args.cache, "hf_exports.json")
    record = json.load(open(record_path)) if os.path.exists(record_path) else {}
    for name in args.names:
        path = os.path.join(args.cache, f"hf_{name}.onnx")
        if os.path.exists(path) and not args.force:
            print(f"{name}: {path} exists (--force to export again)")
        else:
            print(f"{name}: exporting {MODELS[name]} ...", flush=True)
            seconds = export(name, path)
            print(f"{name}: {path} ({os.path.getsize(path) / 2 ** 20:.0f} MB, {seconds:.1f} s)", flush=True)
        import onnxruntime

        record[name] = {"file": os.path.basename(path), "what": MODELS[name], "opset": OPSET,
                        "exporter": "torchscript", "torch": torch.__version__,
                        "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__, "seed": 0,
                        "variants": variants(name, path, args.force)}
        with open(record_path, "w") as f:  # after each model: what is made stays usable if a later one fails
            json.dump(record, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
