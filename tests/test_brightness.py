"""Attention payload decoding: good payloads aggregate right, bad ones never touch brightness."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from halo_weave.brightness import AttentionError, decode_attention, magnitude_vote, vote_threshold


def payload(array: np.ndarray, fmt: str, **extra) -> dict:
    data = base64.b64encode(np.asarray(array, "<f4").tobytes()).decode()
    return {"format": fmt, "shape": list(array.shape), "encoding": "base64", "dtype": "float32",
            "data": data, **extra}


def softmax_rows(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=shape).astype(np.float32)
    e = np.exp(logits)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def test_per_layer_payload_is_the_mean_over_layers_and_heads():
    tensor = softmax_rows((30, 9, 50))
    vector = decode_attention(payload(tensor, "per_layer"), 50)
    assert vector.shape == (50,)
    np.testing.assert_allclose(vector, tensor.mean(axis=(0, 1)), rtol=1e-5, atol=1e-7)
    assert abs(vector.sum() - 1) < 1e-4


def test_aggregated_vector_padded_to_256_is_cut_to_the_live_length():
    live = softmax_rows((40,))
    padded = np.concatenate([live, np.zeros(216, np.float32)])
    vector = decode_attention(payload(padded, "aggregated"), 40)
    np.testing.assert_array_equal(vector, live)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda p: {**p, "data": p["data"][:-8]}, "bytes"),
        (lambda p: {**p, "data": "!!!notbase64!!!"}, "base64"),
        (lambda p: {**p, "shape": [7]}, "bytes"),
        (lambda p: {**p, "shape": "40"}, "shape"),
        (lambda p: {**p, "shape": [True]}, "shape"),
        (lambda p: {**p, "format": "weird"}, "format"),
        (lambda p: {**p, "dtype": "float16"}, "encoding"),
        (lambda p: {**p, "shape": [1 << 30]}, "invalid size"),
        (lambda p: None, "not an object"),
    ],
)
def test_broken_payloads_raise_a_typed_error(bad, message):
    good = payload(softmax_rows((40,)), "aggregated")
    with pytest.raises(AttentionError, match=message):
        decode_attention(bad(good), 40)


def test_nan_negative_and_misaligned_vectors_are_refused():
    row = softmax_rows((40,))
    with pytest.raises(AttentionError, match="NaN"):
        decode_attention(payload(np.where(np.arange(40) == 3, np.nan, row), "aggregated"), 40)
    with pytest.raises(AttentionError, match="negative"):
        decode_attention(payload(np.where(np.arange(40) == 3, -0.1, row), "aggregated"), 40)
    with pytest.raises(AttentionError, match="misaligned"):
        decode_attention(payload(row, "aggregated"), 30)  # weight past the live end
    with pytest.raises(AttentionError, match="context has"):
        decode_attention(payload(row, "aggregated"), 60)  # too short
    with pytest.raises(AttentionError, match="softmax"):
        decode_attention(payload(row * 3, "aggregated"), 40)


def test_threshold_uses_the_largest_value_wherever_it_sits():
    attention = np.array([0.1, 0.1, 0.6, 0.1, 0.1], np.float32)
    assert vote_threshold(attention) == pytest.approx((1 - 0.6) / 4)


def test_vote_masks_rows_and_never_overflows():
    brightness = np.array([0, 0, 0], np.int32)
    attention = np.array([1.0, 0.0, 0.0], np.float32)
    magnitude_vote(brightness, attention, 1e-30, mask=np.array([True, True, False]))
    assert brightness.tolist() == [10000, -1, 0]
