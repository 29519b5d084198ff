"""Q4_K and Q6_K blocks packed from float weights, for tests: the `gguf` package dequantizes
these types but has no quantizer for them. Plain round-to-nearest (llama.cpp searches its
scales; the tests only need valid blocks of realistic weights). Every packed tensor is checked
against gguf.quants.dequantize here, so a misread layout fails loudly instead of giving a
consistent but wrong reference.

Layouts (ggml-common.h block_q4_K, block_q6_K; 256 weights a block):
  Q4_K: fp16 d | fp16 dmin | 12 bytes of 6-bit scales sc[8] and mins m[8] | 128 bytes of nibbles
        weight = d·sc[j]·q − dmin·m[j] for sub-block j of 32; bytes 32c..32c+31 hold sub-block
        2c in their low nibbles and 2c+1 in their high nibbles
  Q6_K: 128 bytes ql | 64 bytes qh | 16 int8 scales | fp16 d
        weight = d·sc[j]·(q − 32) for sub-block j of 16; in each half of 128 weights, weight
        32s + l has its low 4 bits in ql[32 (s mod 2) + l] (low nibble for s < 2, high for s >= 2)
        and its top 2 bits at bits 2s of qh[l]
"""
import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

QK_K = 256


def _fp16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def _pack_q4_k_scales(sc, m):
    """12 bytes per block from sc, m [n, 8] (0..63)."""
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    return out


def quantize_q4_k(w):
    """[rows, cols] float (cols a multiple of 256) -> uint8 [rows, cols / 256 * 144]."""
    rows, cols = w.shape
    x = w.astype(np.float32).reshape(-1, 8, 32)
    lo = np.minimum(x.min(axis=-1), 0)           # the offset is -dmin·m with m >= 0
    hi = x.max(axis=-1)
    scale = (hi - lo) / 15
    d = _fp16(scale.max(axis=-1) / 63)
    dmin = _fp16(-lo.min(axis=-1) / 63)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(df > 0, np.round(scale / df), 0), 0, 63).astype(np.uint8)
        m = np.clip(np.where(dminf > 0, np.round(-lo / dminf), 0), 0, 63).astype(np.uint8)
        step = (df * sc)[..., None]
        q = np.where(step > 0, np.round((x + (dminf * m)[..., None]) / step), 0)
    q = np.clip(q, 0, 15).astype(np.uint8).reshape(-1, 4, 2, 32)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.reshape(-1, 1).view(np.uint8), dmin.reshape(-1, 1).view(np.uint8),
                             _pack_q4_k_scales(sc, m), qs], axis=1)
    return _checked(blocks.reshape(rows, -1), w, Q.Q4_K, step.reshape(rows, -1).repeat(32, axis=1))


def quantize_q6_k(w):
    """[rows, cols] float (cols a multiple of 256) -> uint8 [rows, cols / 256 * 210]."""
    rows, cols = w.shape
    x = w.astype(np.float32).reshape(-1, 16, 16)
    scale = np.abs(x).max(axis=-1) / 31
    d = _fp16(scale.max(axis=-1) / 127)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(df > 0, np.round(scale / df), 0), 0, 127).astype(np.int8)
        step = (df * sc)[..., None]
        q = np.where(step > 0, np.round(x / step), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [block, half, s, l]
    low, high = q & 15, q >> 4
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=-1)
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    blocks = np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8),
                             d.reshape(-1, 1).view(np.uint8)], axis=1)
    return _checked(blocks.reshape(rows, -1), w, Q.Q6_K, step.reshape(rows, -1).repeat(16, axis=1))


def _checked(blocks, w, qtype, step):
    """`blocks`, after checking gguf dequantizes them to w within half a step (plus the clipping
    of the 6-bit scales, a little more)."""
    back = gguf.quants.dequantize(blocks, qtype).reshape(w.shape)
    err = np.abs(back - w)
    assert np.all(err <= 0.75 * step + 1e-6 * np.abs(w).max()), f"{qtype.name} packing is wrong: max error {err.max()}"
    return blocks


def quantize(w, qtype):
    """Any type of a Q4_K_M file: gguf's quantizer where it has one, else the ones above."""
    if qtype == Q.Q4_K:
        return quantize_q4_k(w)
    if qtype == Q.Q6_K:
        return quantize_q6_k(w)
    return gguf.quants.quantize(w, qtype)


def random_blocks(rows, cols, qtype, rng):
    """Random bytes in every field of every block (all bit patterns of scales and quants), with
    the fp16 scales replaced by finite values of a plausible size."""
    block_weights, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block_weights, block_bytes), dtype=np.uint8)
    halves = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q4_K: [0, 2], Q.Q6_K: [208]}[qtype]
    for offset in halves:
        raw[:, offset:offset + 2] = _fp16(rng.uniform(-0.02, 0.02, size=raw.shape[0])).reshape(-1, 1).view(np.uint8)
    return raw.reshape(rows, -1)
