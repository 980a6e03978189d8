"""Hugging Face models as a model source: spec parsing and refusals, every supported family at a tiny
config compiled and checked against PyTorch, a save_pretrained folder round trip."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.importer import ModelError, load_model
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.target import host_target_json

HAS_HF = importlib.util.find_spec("transformers") is not None
needs_hf = pytest.mark.skipif(not HAS_HF, reason="needs the hf extra (transformers)")

# Tiny configs: a layer or two per stage, 16-64 channels, 32x32 images, 16 tokens. The random weights
# are scaled to unit-variance outputs (``give_signal``), so even the deep conv stacks' outputs
# carry a signal the output check compares.
FAMILIES = {
    "convnext": "hf:convnext:num_stages=2,hidden_sizes=[16,32],depths=[1,1],image_size=32",
    "regnet": "hf:regnet:hidden_sizes=[16,32],depths=[1,1],embedding_size=16,groups_width=8,image_size=32",
    "resnet": "hf:resnet:hidden_sizes=[16,32],depths=[1,1],embedding_size=16,layer_type=basic,image_size=32",
    "mobilenet_v2": "hf:mobilenet_v2:depth_multiplier=0.25,image_size=32",
    "mobilevit": "hf:mobilevit:hidden_sizes=[16,24,32],neck_hidden_sizes=[8,8,16,16,24,32,64],image_size=32",
    "efficientnet": "hf:efficientnet:width_coefficient=0.25,depth_coefficient=0.1,hidden_dim=320,kernel_sizes=[3,3],"
                    "in_channels=[32,16],out_channels=[16,24],strides=[1,2],num_block_repeats=[1,1],expand_ratios=[1,6],"
                    "depthwise_padding=[],image_size=32",
    "swin": "hf:swin:embed_dim=16,depths=[1,1],num_heads=[1,2],window_size=4,patch_size=4,image_size=32",
    "levit": "hf:levit:hidden_sizes=[16,32,48],num_attention_heads=[1,2,3],depths=[1,1,1],key_dim=[8,8,8],"
             "image_size=32",
    "poolformer": "hf:poolformer:hidden_sizes=[16,32],depths=[1,1],num_encoder_blocks=2,image_size=32",
    "vit": "hf:vit:hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64,patch_size=8,"
           "image_size=32",
    "gpt2": "hf:gpt2:n_layer=1,n_embd=32,n_head=2,vocab_size=128,seq_len=16",
    "distilbert": "hf:distilbert:n_layers=1,dim=32,n_heads=2,hidden_dim=64,vocab_size=128,seq_len=16",
    "t5": "hf:t5:num_layers=1,d_model=32,d_kv=16,num_heads=2,d_ff=64,vocab_size=128,seq_len=16",
    "whisper": "hf:whisper:encoder_layers=1,decoder_layers=1,d_model=32,encoder_attention_heads=2,"
               "decoder_attention_heads=2,encoder_ffn_dim=64,decoder_ffn_dim=64,num_mel_bins=16,seq_len=16",
    # RoBERTa's position ids are a cumsum (a TOPI scan kernel, no blocks to schedule); llama: rotary
    # embeddings and grouped KV heads; pvt_v2: an (h, w) image size; wav2vec2: raw audio samples
    "roberta": "hf:roberta:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,"
               "vocab_size=128,seq_len=16",
    "llama": "hf:llama:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,num_key_value_heads=1,"
             "intermediate_size=64,vocab_size=128,seq_len=16",
    "pvt_v2": "hf:pvt_v2:num_encoder_blocks=2,depths=[1,1],sr_ratios=[2,1],hidden_sizes=[16,32],patch_sizes=[7,3],"
              "strides=[4,2],num_attention_heads=[1,2],mlp_ratios=[2,2],image_size=32",
    "wav2vec2": "hf:wav2vec2:hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64,"
                "conv_dim=[16,16],conv_kernel=[10,3],conv_stride=[5,2],num_conv_pos_embeddings=16,"
                "num_conv_pos_embedding_groups=4,seq_len=800",
}
TEXT = {"gpt2", "distilbert", "t5", "roberta", "llama"}
INPUT = {"whisper": ("input_features", "float32"), "wav2vec2": ("input_values", "float32")}


def refused(spec: str, match: str, **kw) -> str:
    """The one-line ModelError message of loading ``spec``."""
    with pytest.raises(ModelError, match=match) as e:
        load_model(spec, **kw)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


# ---------------------------------------------------------------- parsing and refusals (fast)
def test_spec_values_parse():
    from tensortune.models.hf import parse_spec, parse_value

    assert parse_value("3") == 3 and parse_value("0.5") == 0.5 and parse_value("1e-5") == 1e-5
    assert parse_value("true") is True and parse_value("False") is False
    assert parse_value("[16,32]") == [16, 32] and parse_value("[]") == []
    assert parse_value("gelu") == "gelu"
    assert parse_spec("hf:vit") == ("vit", {})
    assert parse_spec("hf:gpt2:seq_len=64,n_layer=2") == ("gpt2", {"seq_len": 64, "n_layer": 2})
    assert parse_spec("hf:convnext:depths=[1,1],hidden_sizes=[8,16]") == (
        "convnext", {"depths": [1, 1], "hidden_sizes": [8, 16]})


def test_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    msg = refused("hf:vit", "needs Hugging Face transformers")
    assert msg == "hf:... needs Hugging Face transformers: pip install 'tensortune[hf]'"


def test_malformed_specs_are_refused():
    refused("hf:", "no model type")
    refused("hf:vit:hidden_size", "'hidden_size' is not key=value")
    refused("hf:vit:=3", "is not key=value")
    refused("hf:vit:depths=[1,2", "unbalanced brackets")
    refused("hf:vit:hidden_size=32,hidden_size=64", "given twice")
    refused("hf:vit", "batch size 0", batch=0)


@needs_hf
def test_unknown_type_key_and_value_are_refused():
    msg = refused("hf:notamodel", "unknown Hugging Face model type 'notamodel'")
    assert "vit" in msg and "gpt2" in msg
    msg = refused("hf:vit:nonsense=1", "'nonsense' is not a vit config field")
    assert "hidden_size" in msg  # the known fields are named
    refused("hf:vit:hidden_size=abc", r"hidden_size='abc' is str; the vit field hidden_size takes int")
    refused("hf:vit:hidden_size=0.5", "takes int")
    refused("hf:vit:qkv_bias=3", "takes true/false")
    refused("hf:gpt2:seq_len=0", "seq_len=0 must be a positive integer")
    refused("hf:vit:image_size=big", "image_size='big' must be a positive integer")
    refused("hf:gpt2:image_size=32", "image_size is for vision models")
    refused("hf:vit:seq_len=16", "seq_len is for text and speech models")
    refused("hf:whisper:seq_len=15", "must be even")
    refused("hf:gpt2:n_layer=1,n_embd=32,n_head=2,seq_len=4096", "seq_len 4096 exceeds the model's 1024 positions")
    # the config's own check, and a model its class cannot build: one line each
    refused("hf:vit:hidden_act=nonexistent,num_hidden_layers=1", "cannot build the vit model")
    refused("hf:levit:hidden_sizes=[16,32],num_attention_heads=[1,2],depths=[1,1],key_dim=[8,8]", "levit")


@needs_hf
def test_meta_batch_and_seed():
    spec = FAMILIES["whisper"]
    m = load_model(spec, batch=2, seed=3)
    assert m.source == "hf" and m.batch == 2 and m.name == spec
    assert [(i.name, i.shape, i.dtype) for i in m.inputs] == [("input_features", (2, 16, 16), "float32")]
    assert m.meta["hf_model_type"] == "whisper" and m.meta["input_shape"] == [2, 16, 16]
    assert m.meta["hf_config"]["d_model"] == 32 and m.meta["hf_config"]["max_source_positions"] == 8
    again, other = load_model(spec, batch=2, seed=3), load_model(spec, batch=2, seed=4)
    w = {k: v for k, v in m.torch_module.state_dict().items()}
    assert all(torch.equal(w[k], v) for k, v in again.torch_module.state_dict().items())
    assert np.array_equal(m.example_inputs[0], again.example_inputs[0])
    assert not all(torch.equal(w[k], v) for k, v in other.torch_module.state_dict().items())
    gpt = load_model(FAMILIES["gpt2"])
    ids = gpt.example_inputs[0]
    assert gpt.inputs[0].name == "input_ids" and ids.dtype == np.int64 and ids.shape == (1, 16)
    assert ids.min() >= 0 and ids.max() < 128 and len(np.unique(ids)) > 2  # within the vocabulary, not all 0/1


def test_unit_variance_gives_each_layer_a_signal():
    """Twelve convolutions at std 0.02 shrink the output to nothing; scaled layer by layer, each
    one's output on the example has unit standard deviation."""
    from torch import nn

    from tensortune.models.hf import unit_variance

    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()) for _ in range(12)]).eval()
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    for c in convs:
        nn.init.normal_(c.weight, std=0.02)
        nn.init.zeros_(c.bias)
    x = torch.randn(1, 8, 16, 16)
    with torch.no_grad():
        assert float(net(x).abs().max()) < 1e-6
    assert unit_variance(net, x) == 12
    stds: list[float] = []
    handles = [c.register_forward_hook(lambda m, i, o: stds.append(float(o.std()))) for c in convs]
    with torch.no_grad():
        net(x)
    for h in handles:
        h.remove()
    assert len(stds) == 12 and all(abs(s - 1) < 1e-3 for s in stds), stds


# ---------------------------------------------------------------- every family, compiled (seconds each)
#: Families whose compile and check take many seconds (6-30 s each): run by make test-slow and CI.
SLOW_FAMILIES = {"mobilevit", "levit", "mobilenet_v2", "swin", "efficientnet"}


@needs_hf
@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FAMILIES else f
                                    for f in FAMILIES])
def test_family_compiles_and_matches_pytorch(family):
    model = load_model(FAMILIES[family])
    assert model.source == "hf" and model.meta["hf_model_type"] == family
    name, dtype = ("input_ids", "int64") if family in TEXT else INPUT.get(family, ("pixel_values", "float32"))
    assert (model.inputs[0].name, model.inputs[0].dtype) == (name, dtype)
    if family == "wav2vec2":
        assert model.inputs[0].shape == (1, 800)  # seq_len samples of raw audio
    if family == "roberta":  # its position ids' cumsum is TOPI's scan kernel: compiled as written, not a task
        from tensortune.models.extract import is_opaque, prim_funcs

        fused = model.fused(host_target_json())
        scans = [n for n, f in prim_funcs(fused).items() if is_opaque(f)]
        assert scans and not {n for t in model_tasks(model) for n in t.funcs} & set(scans)
    ref = TorchRunner(model.torch_module).run(model.example_inputs)
    assert len(ref) == 1 and float(np.abs(ref[0]).max()) > 1e-2  # a real output, not one shrunk to zeros
    cm = compile_model(model)
    check = compare_outputs(cm.run(model.example_inputs), ref)
    assert check.ok, check.message


# ---------------------------------------------------------------- save_pretrained folder
@needs_hf
def test_save_pretrained_folder_round_trip(tmp_path):
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model("distilbert", n_layers=1, dim=32, n_heads=2, hidden_dim=64, vocab_size=128)
    torch.manual_seed(7)
    original = AutoModel.from_config(config, attn_implementation="eager").eval()
    folder = tmp_path / "tiny-distilbert"
    original.save_pretrained(str(folder))

    model = load_model(str(folder), input_shapes={"input_ids": (2, 12)})
    assert model.source == "hf" and model.name == "tiny-distilbert" and model.meta["hf_model_type"] == "distilbert"
    assert model.inputs[0].name == "input_ids" and model.inputs[0].shape == (2, 12) and model.batch == 2
    ids = torch.as_tensor(model.example_inputs[0])
    with torch.no_grad():
        expect = original(input_ids=ids).last_hidden_state.numpy()
    ref = TorchRunner(model.torch_module).run(model.example_inputs)
    np.testing.assert_allclose(ref[0], expect, rtol=0, atol=1e-6)  # the saved weights, not fresh random ones
    check = compare_outputs(compile_model(model).run(model.example_inputs), ref)
    assert check.ok, check.message

    assert load_model(str(folder)).inputs[0].shape == (1, 128)  # default sequence length
    refused(str(folder), "no input named 'pixel_values'", input_shapes={"pixel_values": (1, 3, 8, 8)})
    refused(str(folder), "takes 2 positive dimensions", input_shapes={"input_ids": (1, 2, 3)})
    (folder / "config.json").write_text("{not json")
    refused(str(folder), "not a loadable Hugging Face folder")


def test_cli_help_names_hf_specs(capsys):
    from tensortune.cli import main

    with pytest.raises(SystemExit):
        main(["tasks", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "hf:MODEL_TYPE[:key=value,...]" in out and "save_pretrained folder" in out
