"""Built-in model zoo: published parameter counts, output shapes, seeding, errors, torch.export."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tensortune.models.zoo import (BERT_SEQ_LEN, BERT_VOCAB, DISTILBERT_SEQ_LEN, MODELS, UnknownModelError, ZooModel,
                                   build_model, model_names)

# torchvision / HuggingFace (bert-base-uncased BertModel, with pooler) parameter counts.
PUBLISHED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "alexnet": 61_100_840,
    "squeezenet1_0": 1_248_424,
    "densenet121": 7_978_856,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "mobilenet_v3_large": 5_483_032,
    "vit_b16": 86_567_656,
    "bert_base": 109_482_240,
    "distilbert": 66_362_880,
}
CHEAP = ["resnet18", "alexnet", "squeezenet1_0", "mobilenet_v2", "efficientnet_b0"]


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[nn.Module, list[torch.Tensor]]]:
    """Every model at batch 1, seed 0, built once for the module."""
    return {name: build_model(name) for name in model_names()}


def outputs(model: nn.Module, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        out = model(*inputs)
    return out if isinstance(out, tuple) else (out,)


def expected_shapes(name: str, batch: int) -> list[tuple[int, ...]]:
    if name == "bert_base":
        return [(batch, BERT_SEQ_LEN, 768), (batch, 768)]
    if name == "distilbert":
        return [(batch, DISTILBERT_SEQ_LEN, 768)]
    return [(batch, 1000)]


def test_registry() -> None:
    assert model_names() == list(PUBLISHED_PARAMS)
    assert set(MODELS) == set(PUBLISHED_PARAMS)
    for name, spec in MODELS.items():
        assert isinstance(spec, ZooModel) and spec.name == name
        assert spec.description and "\n" not in spec.description


@pytest.mark.parametrize("name", list(PUBLISHED_PARAMS))
def test_parameter_count_and_batch1_forward(built, name: str) -> None:
    model, inputs = built[name]
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED_PARAMS[name]
    assert not model.training and not any(m.training for m in model.modules())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not any(getattr(m, "inplace", False) for m in model.modules())
    if name in ("bert_base", "distilbert"):
        (ids,) = inputs
        assert ids.dtype == torch.int64 and ids.shape == (1, BERT_SEQ_LEN if name == "bert_base" else DISTILBERT_SEQ_LEN)
        assert 0 <= int(ids.min()) and int(ids.max()) < BERT_VOCAB
    else:
        (x,) = inputs
        assert x.dtype == torch.float32 and x.shape == (1, 3, 224, 224)
    outs = outputs(model, inputs)
    assert [tuple(o.shape) for o in outs] == expected_shapes(name, 1)
    assert all(torch.isfinite(o).all() and o.std() > 0 for o in outs)


@pytest.mark.parametrize("name", CHEAP + ["bert_base"])
def test_batch2_forward(name: str) -> None:
    model, inputs = build_model(name, batch=2)
    assert inputs[0].shape[0] == 2
    assert [tuple(o.shape) for o in outputs(model, inputs)] == expected_shapes(name, 2)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_base"])
def test_same_seed_identical(built, name: str) -> None:
    model_a, inputs_a = built[name]
    model_b, inputs_b = build_model(name, seed=0)
    for a, b in zip(inputs_a, inputs_b):
        assert torch.equal(a, b)
    state_b = model_b.state_dict()
    for key, value in model_a.state_dict().items():
        assert torch.equal(value, state_b[key]), key
    for a, b in zip(outputs(model_a, inputs_a), outputs(model_b, inputs_b)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["resnet18", "squeezenet1_0", "bert_base"])
def test_different_seed_differs(built, name: str) -> None:
    model_a, inputs_a = built[name]
    model_b, inputs_b = build_model(name, seed=1)
    assert not torch.equal(inputs_a[0], inputs_b[0])
    params_b = dict(model_b.named_parameters())
    random_params = [(k, v) for k, v in model_a.named_parameters() if v.min() != v.max()]  # not constant-init
    assert len(random_params) > len(params_b) // 3
    for key, value in random_params:
        assert not torch.equal(value, params_b[key]), key


def test_batch_does_not_change_weights(built) -> None:
    model_a, inputs_a = built["mobilenet_v2"]
    model_b, inputs_b = build_model("mobilenet_v2", batch=3)
    state_b = model_b.state_dict()
    assert all(torch.equal(v, state_b[k]) for k, v in model_a.state_dict().items())
    assert inputs_b[0].shape == (3, 3, 224, 224)


def test_global_rng_untouched() -> None:
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    build_model("squeezenet1_0", seed=7)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("name", ["resnet18", "densenet121", "efficientnet_b0"])
def test_batchnorm_statistics_are_random(built, name: str) -> None:
    model, _ = built[name]
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns
    for bn in bns:
        assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
        assert not torch.allclose(bn.weight, torch.ones_like(bn.weight))
        assert not torch.allclose(bn.bias, torch.zeros_like(bn.bias))
        assert (bn.running_var > 0).all()


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "efficientnet_b0", "vgg16"])
def test_outputs_depend_on_input(built, name: str) -> None:
    """Random weights keep the signal alive: other images give visibly other logits."""
    model, inputs = built[name]
    (a,) = outputs(model, inputs)
    (b,) = outputs(model, MODELS[name].inputs(1, 99))
    assert (a - b).std() > 0.05 * a.std()


def test_unknown_name() -> None:
    with pytest.raises(KeyError) as info:
        build_model("resnet1000")
    message = str(info.value)
    assert "resnet1000" in message and "resnet18" in message and "bert_base" in message and "\n" not in message
    assert isinstance(info.value, (UnknownModelError, ValueError))


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_bad_batch(batch) -> None:
    with pytest.raises(ValueError):
        build_model("resnet18", batch=batch)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_base"])
def test_torch_export(built, name: str) -> None:
    model, inputs = built[name]
    exported = torch.export.export(model, tuple(inputs))
    got = exported.module()(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    for g, want in zip(got, outputs(model, inputs)):
        assert g.shape == want.shape
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5)
