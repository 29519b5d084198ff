"""Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS blocks packed from float weights, for tests:
the `gguf` package dequantizes these types but has no quantizer for them. Plain round-to-nearest (llama.cpp searches its
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
  Q5_K: Q4_K's fields, then 32 bytes qh before the nibbles: weight l of sub-block j has its
        fifth bit at bit j of qh[l]; weight = d·sc[j]·q − dmin·m[j], q in 0..31
  Q2_K: 16 bytes sc | m << 4 | 64 bytes qs | fp16 d | fp16 dmin; sub-blocks of 16,
        weight = d·sc·q − dmin·m; in each half of 128, weight 32s + l at bits 2s of qs[32 half + l]
  Q3_K: 32 bytes hmask | 64 bytes qs (as Q2_K) | 12 bytes of 16 6-bit scales | fp16 d;
        weight = d·(sc − 32)·(field − (hmask[l] bit 4 half + s ? 0 : 4)); scale j's low 4 bits in
        the low (j < 8) or high nibble of byte j mod 8, its top 2 at bits 2 (j div 4) of byte 8 + j mod 4
  IQ4_NL: fp16 d | 16 bytes of nibbles as Q4_0's; weight = d·kvalues[q]
  IQ4_XS: fp16 d | u16 scales_h | 4 bytes scales_l | 128 bytes of nibbles, 16 per sub-block j of
        32 as IQ4_NL's; ls = nibble j of scales_l | (bits 2j of scales_h) << 4;
        weight = d·(ls − 32)·kvalues[q]
"""
import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

QK_K = 256
# ggml-common.h kvalues_iq4nl.
IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


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


def _min_scales(x, levels, scale_bits):
    """Round-to-nearest d·sc·q − dmin·m for sub-blocks x [n, subs, size]: the fp16 d, dmin [n, 1],
    the integer sc, m [n, subs] of `scale_bits` bits and q [n, subs, size] in 0..levels."""
    top = (1 << scale_bits) - 1
    lo = np.minimum(x.min(axis=-1), 0)           # the offset is -dmin·m with m >= 0
    scale = (x.max(axis=-1) - lo) / levels
    d = _fp16(scale.max(axis=-1) / top)
    dmin = _fp16(-lo.min(axis=-1) / top)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(df > 0, np.round(scale / df), 0), 0, top).astype(np.uint8)
        m = np.clip(np.where(dminf > 0, np.round(-lo / dminf), 0), 0, top).astype(np.uint8)
        step = (df * sc)[..., None]
        q = np.where(step > 0, np.round((x + (dminf * m)[..., None]) / step), 0)
    return d, dmin, sc, m, np.clip(q, 0, levels).astype(np.uint8), step


def _two_bit_fields(q):
    """q [n, 256] of 2 bits as Q2_K/Q3_K's 64 bytes: weight 128h + 32s + l at bits 2s of byte 32h + l."""
    q = q.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


def quantize_q5_k(w):
    """[rows, cols] float (cols a multiple of 256) -> uint8 [rows, cols / 256 * 176]."""
    rows, cols = w.shape
    d, dmin, sc, m, q, step = _min_scales(w.astype(np.float32).reshape(-1, 8, 32), 31, 6)
    qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        qh |= ((q[:, j] >> 4) << j).astype(np.uint8)
    low = (q & 15).reshape(-1, 4, 2, 32)
    qs = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.reshape(-1, 1).view(np.uint8), dmin.reshape(-1, 1).view(np.uint8),
                             _pack_q4_k_scales(sc, m), qh, qs], axis=1)
    # A 6-bit sub-block scale rounded down moves the top of 31 codes by up to 15 of d: some clip.
    return _checked(blocks.reshape(rows, -1), w, Q.Q5_K, 2 * step.reshape(rows, -1).repeat(32, axis=1))


def quantize_q2_k(w):
    """[rows, cols] float (cols a multiple of 256) -> uint8 [rows, cols / 256 * 84]."""
    rows, cols = w.shape
    d, dmin, sc, m, q, step = _min_scales(w.astype(np.float32).reshape(-1, 16, 16), 3, 4)
    blocks = np.concatenate([sc | (m << 4), _two_bit_fields(q.reshape(-1, 256)), d.reshape(-1, 1).view(np.uint8),
                             dmin.reshape(-1, 1).view(np.uint8)], axis=1)
    # 4-bit scales and mins round coarsely: the codes clip by up to a step more.
    return _checked(blocks.reshape(rows, -1), w, Q.Q2_K, 2 * step.reshape(rows, -1).repeat(16, axis=1))


def quantize_q3_k(w):
    """[rows, cols] float (cols a multiple of 256) -> uint8 [rows, cols / 256 * 110]."""
    rows, cols = w.shape
    x = w.astype(np.float32).reshape(-1, 16, 16)
    extreme = np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)[..., 0]
    scale = -extreme / 4                                            # the extreme maps to code -4
    d = _fp16(np.abs(scale).max(axis=-1) / 31)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(df > 0, np.round(scale / df), 0), -32, 31).astype(np.int32)
        step = (df * sc)[..., None]
        q = np.where(step != 0, np.round(x / step), 0)
    q = np.clip(q, -4, 3).astype(np.int32).reshape(-1, 256)
    field = (q + 4) & 3
    high = (q >= 0).astype(np.uint8).reshape(-1, 2, 4, 32)          # [block, half, s, l]
    hmask = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for half in range(2):
        for s in range(4):
            hmask |= high[:, half, s] << (4 * half + s)
    v = (sc + 32).astype(np.uint8)                                  # [n, 16], 6 bits
    scales = np.zeros((q.shape[0], 12), dtype=np.uint8)
    scales[:, 0:8] = (v[:, 0:8] & 15) | ((v[:, 8:16] & 15) << 4)
    for j in range(16):
        scales[:, 8 + j % 4] |= (v[:, j] >> 4) << (2 * (j // 4))
    blocks = np.concatenate([hmask, _two_bit_fields(field), scales, d.reshape(-1, 1).view(np.uint8)], axis=1)
    # Codes end at 3 on the far side of the extreme's -4: a weight there clips by up to a step.
    return _checked(blocks.reshape(rows, -1), w, Q.Q3_K, 2 * np.abs(step).reshape(rows, -1).repeat(16, axis=1))


def _nearest_iq4(x, step):
    """Nibbles of the kvalues nearest x / step."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(step != 0, x / step, 0)
    return np.abs(t[..., None] - IQ4_NL_VALUES).argmin(axis=-1).astype(np.uint8)


def _half_split_nibbles(q):
    """q [n, 32] as 16 bytes: weight l < 16 low, l + 16 high."""
    return q[..., :16] | (q[..., 16:] << 4)


def quantize_iq4_nl(w):
    """[rows, cols] float (cols a multiple of 32) -> uint8 [rows, cols / 32 * 18]."""
    rows, cols = w.shape
    x = w.astype(np.float32).reshape(-1, 32)
    extreme = np.take_along_axis(x, np.abs(x).argmax(axis=-1)[:, None], axis=-1)
    d = _fp16(-extreme[:, 0] / 127)                                # the extreme maps to -127
    step = d.astype(np.float32)[:, None]
    blocks = np.concatenate([d.reshape(-1, 1).view(np.uint8), _half_split_nibbles(_nearest_iq4(x, step))], axis=1)
    return _checked(blocks.reshape(rows, -1), w, Q.IQ4_NL, _iq4_gap(step, rows, 32))


def quantize_iq4_xs(w):
    """[rows, cols] float (cols a multiple of 256) -> uint8 [rows, cols / 256 * 136]."""
    rows, cols = w.shape
    x = w.astype(np.float32).reshape(-1, 8, 32)
    extreme = np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)[..., 0]
    scale = -extreme / 127
    d = _fp16(np.abs(scale).max(axis=-1) / 32)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = (np.clip(np.where(df > 0, np.round(scale / df), 0), -32, 31) + 32).astype(np.uint16)
    step = (df * (ls.astype(np.float32) - 32))[..., None]
    qs = _half_split_nibbles(_nearest_iq4(x, step)).reshape(-1, 128)
    scales_h = np.zeros(ls.shape[0], dtype=np.uint16)
    for j in range(8):
        scales_h |= (ls[:, j] >> 4) << (2 * j)
    scales_l = ((ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)).astype(np.uint8)
    blocks = np.concatenate([d.reshape(-1, 1).view(np.uint8), scales_h.reshape(-1, 1).view(np.uint8), scales_l, qs],
                            axis=1)
    return _checked(blocks.reshape(rows, -1), w, Q.IQ4_XS, _iq4_gap(step, rows, 32))


def _iq4_gap(step, rows, repeat):
    """The checking bound's step for the IQ4 codebook: its widest gap is 24 steps, and a weight
    beyond its top value 113 (while the scale maps the extreme to −127) clips by up to 14."""
    return 28 * np.abs(step).reshape(rows, -1).repeat(repeat, axis=1)


def _checked(blocks, w, qtype, step):
    """`blocks`, after checking gguf dequantizes them to w within half a step (plus the clipping
    of the rounded sub-block scales, a little more)."""
    back = gguf.quants.dequantize(blocks, qtype).reshape(w.shape)
    err = np.abs(back - w)
    assert np.all(err <= 0.75 * step + 1e-6 * np.abs(w).max()), f"{qtype.name} packing is wrong: max error {err.max()}"
    return blocks


def quantize(w, qtype):
    """Any type kuiper reads: the packers above where gguf has no quantizer, else gguf's."""
    packers = {Q.Q2_K: quantize_q2_k, Q.Q3_K: quantize_q3_k, Q.Q4_K: quantize_q4_k, Q.Q5_K: quantize_q5_k,
               Q.Q6_K: quantize_q6_k, Q.IQ4_NL: quantize_iq4_nl, Q.IQ4_XS: quantize_iq4_xs}
    return packers[qtype](w) if qtype in packers else gguf.quants.quantize(w, qtype)


def random_blocks(rows, cols, qtype, rng):
    """Random bytes in every field of every block (all bit patterns of scales and quants), with
    the fp16 scales replaced by finite values of a plausible size."""
    block_weights, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block_weights, block_bytes), dtype=np.uint8)
    halves = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q8_0: [0], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.IQ4_NL: [0], Q.Q2_K: [80, 82],
              Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_XS: [0]}[qtype]
    for offset in halves:
        raw[:, offset:offset + 2] = _fp16(rng.uniform(-0.02, 0.02, size=raw.shape[0])).reshape(-1, 1).view(np.uint8)
    return raw.reshape(rows, -1)
