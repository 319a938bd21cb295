#!/usr/bin/python3
"""Self-tests of the float64 oracle: invariants that hold by construction of MODEL.md §2,
a loop-by-loop second implementation, the safetensors/config readers, and the image/audio path
of MULTIMODAL.md (target size, patches, embedders, WAV reading, soft-token placement, masks).

    /usr/bin/python3 tests/oracle/self_test.py [-v]
"""

import atexit
import copy
import dataclasses
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # keep the source tree free of __pycache__
sys.path.insert(0, HERE)
import np_checkpoint  # noqa: E402
import oracle  # noqa: E402
from np_checkpoint import FULL, SLIDING, Spec  # noqa: E402
from safetensors_np import read_header, read_safetensors  # noqa: E402

TMP = tempfile.mkdtemp(prefix="oracle_self_test_")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def build(spec, name):
    """Writes spec under TMP/name; returns (checkpoint as loaded by the oracle, weights as stored)."""
    d = os.path.join(TMP, name)
    stored = np_checkpoint.write_checkpoint(d, spec)
    return oracle.load_checkpoint(d), stored


def with_weights(ckpt, **changes):
    w = dict(ckpt.weights)
    w.update(changes)
    return dataclasses.replace(ckpt, weights=w)


def with_kind(ckpt, layer_type, **changes):
    kinds = dict(ckpt.config.kinds)
    kinds[layer_type] = dataclasses.replace(kinds[layer_type], **changes)
    return dataclasses.replace(ckpt, config=dataclasses.replace(ckpt.config, kinds=kinds))


def prompt(vocab, n, seed=0):
    return np.random.default_rng(seed).integers(3, vocab, size=n)


# ----------------------------------------------------------------------------------------------
# A second implementation: explicit loops over tokens, heads and rotary pairs, read off
# MODEL.md independently of oracle.py (it uses only the Spec, not the oracle's parsed config).
# ----------------------------------------------------------------------------------------------

def naive_forward(spec, w, ids, soft_rows=None, blocks=()):
    """soft_rows: {position: vector} replacing the scaled embedding there; blocks: [(start, end))
    image blocks, whose tokens see each other on sliding layers (MULTIMODAL.md, Masks)."""
    eps = spec.eps
    n = len(ids)
    block_of = {p: b for b, (s, e) in enumerate(blocks) for p in range(s, e)}

    def norm(x, g=None):
        out = x / math.sqrt(float(np.dot(x, x)) / x.size + eps)
        return out if g is None else out * g

    s32 = struct.unpack("<I", struct.pack("<f", math.sqrt(spec.hidden)))[0]
    s32 = (s32 + 0x7FFF + ((s32 >> 16) & 1)) & 0xFFFF0000
    scale = struct.unpack("<f", struct.pack("<I", s32))[0]

    h = [w["embed_tokens.weight"][t] * scale for t in ids]
    for p, vec in (soft_rows or {}).items():
        h[p] = np.array(vec, dtype=np.float64)
    for li, t in enumerate(spec.types()):
        L = lambda name: w[f"layers.{li}.{name}"]  # noqa: E731
        full = t == FULL
        hd = spec.global_head_dim if full else spec.head_dim
        kvh = spec.full_kv_heads() if full else spec.kv_heads
        theta = spec.full_theta if full else spec.sliding_theta
        pairs = int(spec.partial_rotary * hd / 2) if full else hd // 2

        def rotate(vec, pos):
            out = vec.copy()
            for i in range(hd // 2):
                ang = pos * theta ** (-2.0 * i / hd) if i < pairs else 0.0
                a, b = vec[i], vec[i + hd // 2]
                out[i] = a * math.cos(ang) - b * math.sin(ang)
                out[i + hd // 2] = b * math.cos(ang) + a * math.sin(ang)
            return out

        Q, K, V = [], [], []
        for p in range(n):
            a = norm(h[p], L("input_layernorm.weight"))
            qp = L("self_attn.q_proj.weight") @ a
            kp = L("self_attn.k_proj.weight") @ a
            vp = kp if (full and spec.k_eq_v) else L("self_attn.v_proj.weight") @ a
            Q.append([rotate(norm(qp[j * hd:(j + 1) * hd], L("self_attn.q_norm.weight")), p)
                      for j in range(spec.heads)])
            K.append([rotate(norm(kp[g * hd:(g + 1) * hd], L("self_attn.k_norm.weight")), p)
                      for g in range(kvh)])
            V.append([norm(vp[g * hd:(g + 1) * hd]) for g in range(kvh)])
        new_h = []
        for qpos in range(n):
            heads_out = []
            for j in range(spec.heads):
                g = j // (spec.heads // kvh)
                if full:
                    keys = list(range(qpos + 1))
                else:
                    keys = [k for k in range(n) if (k <= qpos or block_of.get(k, -1) == block_of.get(qpos, -2))
                            and qpos - k < spec.window]
                sc = np.array([float(np.dot(Q[qpos][j], K[k][g])) for k in keys])
                e = np.exp(sc - sc.max())
                pr = e / e.sum()
                heads_out.append(sum(pr[i] * V[k][g] for i, k in enumerate(keys)))
            o = L("self_attn.o_proj.weight") @ np.concatenate(heads_out)
            x = h[qpos] + norm(o, L("post_attention_layernorm.weight"))
            m = norm(x, L("pre_feedforward_layernorm.weight"))
            gate = L("mlp.gate_proj.weight") @ m
            gelu = np.array([0.5 * z * (1 + math.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
                             for z in gate])
            f = L("mlp.down_proj.weight") @ (gelu * (L("mlp.up_proj.weight") @ m))
            x = x + norm(f, L("post_feedforward_layernorm.weight"))
            new_h.append(x * L("layer_scalar")[0])
        h = new_h
    out = []
    for p in range(n):
        z = w["embed_tokens.weight"] @ norm(h[p], w["norm.weight"])
        out.append(spec.softcap * np.tanh(z / spec.softcap))
    return np.array(out)


class NaiveAgreement(unittest.TestCase):
    def check(self, spec, name, n):
        ckpt, stored = build(spec, name)
        ids = prompt(spec.vocab, n, seed=spec.seed)
        np.testing.assert_allclose(oracle.forward(ckpt, ids), naive_forward(spec, stored, ids), rtol=0, atol=1e-9)

    def test_window_keqv_gqa(self):
        self.check(Spec(layers=3, hidden=48, intermediate=80, heads=4, head_dim=8, kv_heads=2,
                        global_head_dim=16, global_kv_heads=1, vocab=64, window=3,
                        layer_types=(SLIDING, FULL, SLIDING), k_eq_v=True, partial_rotary=0.5, seed=11),
                   "naive_a", 9)

    def test_no_keqv_full_first(self):
        self.check(Spec(layers=2, hidden=40, intermediate=64, heads=6, head_dim=8, kv_heads=3,
                        global_head_dim=12, global_kv_heads=2, vocab=50, window=4,
                        layer_types=(FULL, SLIDING), k_eq_v=False, partial_rotary=0.25, seed=12),
                   "naive_b", 8)


class Masks(unittest.TestCase):
    spec = Spec(layers=4, hidden=64, intermediate=96, heads=4, head_dim=16, kv_heads=2,
                global_head_dim=32, global_kv_heads=1, vocab=128, window=6, full_period=2, seed=3)

    @classmethod
    def setUpClass(cls):
        cls.ckpt, _ = build(cls.spec, "masks")
        cls.ids = prompt(cls.spec.vocab, 20, seed=4)
        cls.ref = oracle.forward(cls.ckpt, cls.ids)

    def test_causal(self):
        for t in (0, 1, 5, 6, 7, 13, 19):
            np.testing.assert_allclose(oracle.forward(self.ckpt, self.ids[:t + 1]), self.ref[:t + 1],
                                       rtol=0, atol=1e-10, err_msg=f"prefix {t + 1}")
        changed = self.ids.copy()
        changed[12:] = (changed[12:] + 7) % self.spec.vocab
        out = oracle.forward(self.ckpt, changed)
        np.testing.assert_allclose(out[:12], self.ref[:12], rtol=0, atol=1e-10)
        self.assertGreater(np.abs(out[12:] - self.ref[12:]).max(), 0.1)

    def test_window_inert_when_covering_prompt(self):
        n = len(self.ids)
        wide = oracle.forward(with_kind(self.ckpt, SLIDING, window=n), self.ids)
        unbounded = oracle.forward(with_kind(self.ckpt, SLIDING, window=None), self.ids)
        np.testing.assert_array_equal(wide, unbounded)
        # q - k < window: with window n-1 only the last query loses a key (key 0).
        short = oracle.forward(with_kind(self.ckpt, SLIDING, window=n - 1), self.ids)
        np.testing.assert_array_equal(short[:-1], unbounded[:-1])
        self.assertGreater(np.abs(short[-1] - unbounded[-1]).max(), 1e-3)

    def test_window_boundary(self):
        kind = self.ckpt.config.kinds[SLIDING]
        m = oracle.visible(np.arange(10.0), kind)
        for q in range(10):
            self.assertEqual([k for k in range(10) if m[q, k]], list(range(max(0, q - 5), q + 1)))
        full = oracle.visible(np.arange(10.0), self.ckpt.config.kinds[FULL])
        np.testing.assert_array_equal(full, np.tril(np.ones((10, 10), bool)))

    def test_window_matters(self):
        unbounded = oracle.forward(with_kind(self.ckpt, SLIDING, window=None), self.ids)
        diff = np.abs(unbounded - self.ref).max(axis=1)
        self.assertEqual(diff[:6].max(), 0.0)   # the first `window` positions see everything anyway
        self.assertGreater(diff[6:].max(), 0.1)


class LayerScalar(unittest.TestCase):
    def test_scalar_changes_output_except_on_last_layer(self):
        spec = Spec(layers=3, hidden=64, intermediate=96, heads=4, head_dim=16, kv_heads=2, vocab=100,
                    window=32, full_period=3, seed=5)
        ckpt, _ = build(spec, "scalar")
        ids = prompt(spec.vocab, 12)
        ones = {f"layers.{i}.layer_scalar": np.ones(1) for i in range(3)}
        base = oracle.forward(with_weights(ckpt, **ones), ids)
        doubled = oracle.forward(with_weights(ckpt, **{**ones, "layers.0.layer_scalar": np.array([2.0])}), ids)
        self.assertGreater(np.abs(doubled - base).max(), 0.1)
        # The final norm removes a uniform scale of the stream, so the last layer's scalar only
        # matters through eps.
        last = oracle.forward(with_weights(ckpt, **{**ones, "layers.2.layer_scalar": np.array([2.0])}), ids)
        np.testing.assert_allclose(last, base, rtol=0, atol=1e-4)


class Rotary(unittest.TestCase):
    def full_kind(self):
        cfg = oracle.parse_config(np_checkpoint.full_config(Spec(head_dim=256, global_head_dim=512,
                                                                 kv_heads=8, global_kv_heads=1, heads=16,
                                                                 layers=6, full_period=6)))
        return cfg.kinds[FULL], cfg.kinds[SLIDING]

    def test_proportional_quarter_of_512(self):
        full, _ = self.full_kind()
        self.assertEqual(full.rotated_pairs, 64)
        inv = oracle.inverse_frequencies(full)
        np.testing.assert_allclose(inv[:64], 1e6 ** (-2.0 * np.arange(64) / 512), rtol=1e-15)
        self.assertTrue(np.all(inv[64:] == 0.0))
        x = np.random.default_rng(0).normal(size=(3, 2, 512))
        y = oracle.apply_rotary(x, np.array([0.0, 1.0, 77.0]), full)
        np.testing.assert_array_equal(y[0], x[0])                       # position 0: identity
        for p in (1, 2):
            np.testing.assert_array_equal(y[p][:, 64:256], x[p][:, 64:256])
            np.testing.assert_array_equal(y[p][:, 320:512], x[p][:, 320:512])
            self.assertTrue(np.all(np.abs(y[p][:, 1:64] - x[p][:, 1:64]) > 0))
            self.assertTrue(np.all(np.abs(y[p][:, 257:320] - x[p][:, 257:320]) > 0))
            # dim j pairs with j + 256: the pair's length is kept.
            np.testing.assert_allclose(y[p][:, :256] ** 2 + y[p][:, 256:] ** 2,
                                       x[p][:, :256] ** 2 + x[p][:, 256:] ** 2, rtol=1e-12)

    def test_sliding_rotates_every_pair(self):
        _, sliding = self.full_kind()
        self.assertEqual(sliding.rotated_pairs, 128)
        inv = oracle.inverse_frequencies(sliding)
        np.testing.assert_allclose(inv, 10000.0 ** (-np.arange(0, 256, 2) / 256.0), rtol=1e-15)

    def test_rotate_half_angle(self):
        _, sliding = self.full_kind()
        x = np.zeros((1, 1, 256))
        x[0, 0, 3] = 1.0                      # dim 3 rotates into dim 3 + 128
        y = oracle.apply_rotary(x, np.array([5.0]), sliding)
        ang = 5.0 * 10000.0 ** (-6.0 / 256)
        self.assertAlmostEqual(y[0, 0, 3], math.cos(ang), places=14)
        self.assertAlmostEqual(y[0, 0, 131], math.sin(ang), places=14)
        self.assertEqual(np.count_nonzero(y), 2)

    def test_scores_depend_on_relative_position_only(self):
        full, sliding = self.full_kind()
        rng = np.random.default_rng(1)
        for kind in (full, sliding):
            q = rng.normal(size=(1, 1, kind.head_dim))
            k = rng.normal(size=(1, 1, kind.head_dim))
            s = [float(np.sum(oracle.apply_rotary(q, np.array([p + 9.0]), kind) *
                              oracle.apply_rotary(k, np.array([p]), kind))) for p in (0.0, 3.0, 1000.0)]
            np.testing.assert_allclose(s, s[0], rtol=1e-9)


class AttentionValues(unittest.TestCase):
    """With q_norm = 0 every score is 0, so attention averages v over the visible keys."""

    def check(self, k_eq_v, layer_type):
        spec = Spec(layers=2, hidden=48, intermediate=64, heads=4, head_dim=8, kv_heads=2,
                    global_head_dim=8, global_kv_heads=2, vocab=64, window=3,
                    layer_types=(layer_type, layer_type), k_eq_v=k_eq_v, seed=9)
        ckpt, _ = build(spec, f"values_{k_eq_v}_{layer_type}")
        cfg = ckpt.config
        kind = cfg.kinds[layer_type]
        lw = dict((n[len("layers.0."):], v) for n, v in ckpt.weights.items() if n.startswith("layers.0."))
        lw["self_attn.q_norm.weight"] = np.zeros(8)
        a = np.random.default_rng(2).normal(size=(7, 48))
        got = oracle.attention(a, np.arange(7.0), cfg, kind, lw)
        src = "self_attn.k_proj.weight" if kind.v_from_raw_key else "self_attn.v_proj.weight"
        raw = (a @ lw[src].T).reshape(7, 2, 8)
        v = raw / np.sqrt(np.mean(raw ** 2, axis=-1, keepdims=True) + spec.eps)
        want = np.zeros((7, 4, 8))
        for q in range(7):
            first = 0 if layer_type == FULL else max(0, q - spec.window + 1)
            for j in range(4):
                want[q, j] = v[first:q + 1, j // 2].mean(axis=0)
        np.testing.assert_allclose(got, want.reshape(7, 32) @ lw["self_attn.o_proj.weight"].T, rtol=0, atol=1e-12)
        return ckpt

    def test_full_k_eq_v_uses_raw_key_projection(self):
        ckpt = self.check(True, FULL)
        self.assertNotIn("layers.0.self_attn.v_proj.weight", ckpt.weights)

    def test_full_without_k_eq_v_uses_v_proj(self):
        self.check(False, FULL)

    def test_sliding_uses_v_proj_and_window(self):
        self.check(True, SLIDING)

    def test_first_position_ignores_q_and_k_norm(self):
        # Position 0 attends only to itself, so its output is v0: with k_eq_v it must follow
        # k_proj, and must not follow k_norm (v is taken before k_norm and rope).
        spec = Spec(layers=1, hidden=48, intermediate=64, heads=4, head_dim=8, kv_heads=2,
                    global_head_dim=8, global_kv_heads=2, vocab=64, layer_types=(FULL,), k_eq_v=True, seed=10)
        ckpt, _ = build(spec, "first_position")
        ids = prompt(64, 5)
        base = oracle.forward(ckpt, ids)
        rng = np.random.default_rng(3)
        knorm = oracle.forward(with_weights(ckpt, **{"layers.0.self_attn.k_norm.weight": rng.uniform(0.1, 2, 8)}), ids)
        np.testing.assert_allclose(knorm[0], base[0], rtol=0, atol=1e-12)
        self.assertGreater(np.abs(knorm[1:] - base[1:]).max(), 1e-3)
        kproj = ckpt.weights["layers.0.self_attn.k_proj.weight"] * rng.uniform(0.5, 1.5, (16, 1))
        moved = oracle.forward(with_weights(ckpt, **{"layers.0.self_attn.k_proj.weight": kproj}), ids)
        self.assertGreater(np.abs(moved[0] - base[0]).max(), 1e-3)


class HeadAndScale(unittest.TestCase):
    def test_softcap_bounds_logits(self):
        spec = Spec(layers=2, hidden=64, intermediate=96, vocab=200, embed_std=1.0, seed=6, full_period=2)
        ckpt, _ = build(spec, "softcap")
        logits = oracle.forward(ckpt, prompt(200, 6))
        self.assertLess(np.abs(logits).max(), 30.0)
        self.assertGreater(np.abs(logits).max(), 25.0)   # the cap is actually engaged
        uncapped = oracle.forward(oracle.Checkpoint(dataclasses.replace(ckpt.config, softcap=None),
                                                    ckpt.weights), prompt(200, 6))
        self.assertGreater(np.abs(uncapped).max(), 30.0)
        np.testing.assert_allclose(logits, 30 * np.tanh(uncapped / 30), rtol=1e-14)

    def test_embedding_scale_is_bf16(self):
        self.assertEqual(oracle.bf16_round(math.sqrt(3840)), 62.0)
        self.assertEqual(oracle.bf16_round(math.sqrt(96)), 9.8125)
        self.assertEqual(oracle.bf16_round(math.sqrt(160)), 12.625)

    def test_norm_weight_as_stored(self):
        x = np.array([[3.0, -4.0]])
        np.testing.assert_allclose(oracle.rms(x, np.array([2.0, 0.5]), eps=0.0),
                                   [[3 / math.sqrt(12.5) * 2, -4 / math.sqrt(12.5) * 0.5]], rtol=1e-15)


class Readers(unittest.TestCase):
    def test_bf16_bits(self):
        path = os.path.join(TMP, "bits.safetensors")
        np_checkpoint.write_safetensors(path, {"t": np.array([1.0, -2.0, 0.1, 1 + 2 ** -8, 1 + 3 * 2 ** -8])}, "BF16")
        header, start = read_header(path)
        self.assertEqual(header["t"], {"dtype": "BF16", "shape": [5], "data_offsets": [0, 10]})
        with open(path, "rb") as f:
            f.seek(start)
            bits = struct.unpack("<5H", f.read(10))
        # 0.1f = 0x3DCCCCCD rounds up; 1 + 2^-8 is a tie and goes to even (1.0).
        self.assertEqual(bits, (0x3F80, 0xC000, 0x3DCD, 0x3F80, 0x3F82))
        np.testing.assert_array_equal(read_safetensors(path)["t"], [1.0, -2.0, 0.10009765625, 1.0, 1.015625])

    def test_hand_written_file(self):
        # A file assembled byte by byte, independent of the writer.
        header = json.dumps({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
                             "b": {"dtype": "F32", "shape": [1, 1], "data_offsets": [4, 8]},
                             "__metadata__": {"x": "y"}}).encode()
        path = os.path.join(TMP, "hand.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + struct.pack("<2e", 0.5, -3.0) + struct.pack("<f", 7.25))
        got = read_safetensors(path)
        np.testing.assert_array_equal(got["a"], [0.5, -3.0])
        np.testing.assert_array_equal(got["b"], [[7.25]])
        self.assertEqual(got["a"].dtype, np.float64)

    def test_dtypes_shards_prefixes_configs(self):
        base = Spec(layers=2, hidden=32, intermediate=48, heads=2, head_dim=8, kv_heads=1, global_head_dim=16,
                    global_kv_heads=1, vocab=40, seed=8)
        ids = prompt(40, 6)
        reference = None
        for dtype in ("F32", "F16", "BF16"):
            for shards in (1, 3):
                for flat, legacy, prefix in ((False, False, "model.language_model."),
                                             (True, True, "model."), (True, False, "model.language_model.")):
                    spec = dataclasses.replace(base, dtype=dtype, shards=shards, flat_config=flat,
                                               legacy_rope_keys=legacy, prefix=prefix)
                    name = f"rd_{dtype}_{shards}_{flat}_{legacy}_{prefix}"
                    ckpt, stored = build(spec, name)
                    loaded = {**ckpt.weights, **ckpt.media}
                    self.assertEqual(sorted(loaded), sorted(stored))
                    self.assertEqual(len(ckpt.media), 11)
                    for n, v in stored.items():
                        np.testing.assert_array_equal(loaded[n], v, err_msg=f"{name}: {n}")
                    files = os.listdir(os.path.join(TMP, name))
                    self.assertEqual("model.safetensors.index.json" in files, shards > 1)
                    if dtype == "BF16":
                        logits = oracle.forward(ckpt, ids)
                        if reference is None:
                            reference = logits
                        # Same weights whatever the config style, prefix or sharding.
                        np.testing.assert_array_equal(logits, reference, err_msg=name)
        self.assertIsNotNone(reference)

    def test_full_kv_heads_follow_k_eq_v(self):
        # HF counts num_global_key_value_heads for full layers only with k_eq_v; without it, num_key_value_heads.
        for k_eq_v, want in ((True, 1), (False, 2)):
            spec = Spec(layers=2, hidden=32, intermediate=48, heads=4, head_dim=8, kv_heads=2,
                        global_head_dim=8, global_kv_heads=1, vocab=40, layer_types=(SLIDING, FULL), k_eq_v=k_eq_v)
            d = os.path.join(TMP, f"full_kv_{k_eq_v}")
            np_checkpoint.write_checkpoint(d, spec, np_checkpoint.random_weights(spec))
            ckpt = oracle.load_checkpoint(d)
            self.assertEqual(ckpt.config.kinds[FULL].kv_heads, want)
            self.assertEqual(ckpt.weights["layers.1.self_attn.k_proj.weight"].shape, (want * 8, 32))

    def test_extra_v_proj_rejected(self):
        spec = Spec(layers=2, hidden=32, intermediate=48, heads=2, head_dim=8, kv_heads=1, vocab=40, k_eq_v=True)
        w = np_checkpoint.random_weights(spec)
        w["layers.1.self_attn.v_proj.weight"] = np.zeros((32, 32))
        d = os.path.join(TMP, "extra_v")
        np_checkpoint.write_checkpoint(d, spec, w)
        with self.assertRaisesRegex(ValueError, "v_proj"):
            oracle.load_checkpoint(d)

    def test_unsupported_features_rejected(self):
        raw = np_checkpoint.full_config(Spec())
        bad = copy.deepcopy(raw)
        bad["text_config"]["num_kv_shared_layers"] = 4
        with self.assertRaisesRegex(ValueError, "num_kv_shared_layers"):
            oracle.parse_config(bad)
        bad = copy.deepcopy(raw)
        bad["text_config"]["rope_parameters"][FULL]["rope_type"] = "yarn"
        with self.assertRaisesRegex(ValueError, "yarn"):
            oracle.parse_config(bad)

    def test_cli(self):
        spec = Spec(layers=2, hidden=32, intermediate=48, heads=2, head_dim=8, kv_heads=1, vocab=40, seed=2)
        ckpt, _ = build(spec, "cli")
        out = os.path.join(TMP, "cli.npy")
        subprocess.run([sys.executable, os.path.join(HERE, "oracle.py"), "--model", os.path.join(TMP, "cli"),
                        "--ids", "2,5,9,33", "--out", out], check=True, capture_output=True)
        np.testing.assert_array_equal(np.load(out), oracle.forward(ckpt, [2, 5, 9, 33]))


class PrecisionCalibration(unittest.TestCase):
    """An fp32 / bf16 rounding of every activation stays inside the bounds check_engine.py applies."""

    def test_bounds_are_reachable(self):
        spec = Spec(layers=4, hidden=96, intermediate=160, heads=4, head_dim=16, kv_heads=2, vocab=512,
                    window=8, full_period=2, seed=21)
        ckpt, _ = build(spec, "calibration")
        ids = prompt(512, 40)
        ref = oracle.forward(ckpt, ids)
        f32 = np.abs(oracle.forward(ckpt, ids, act=lambda x: np.asarray(x, np.float32).astype(np.float64)) - ref)
        b16 = np.abs(oracle.forward(ckpt, ids, act=oracle.bf16_round) - ref).max(axis=1)
        self.assertLess(f32.max(), 2e-3)
        self.assertLess(np.median(b16), 0.35)
        self.assertLess(b16.max(), 1.0)


# ----------------------------------------------------------------------------------------------
# Images and audio (MULTIMODAL.md)
# ----------------------------------------------------------------------------------------------

IMG, AUD = oracle.IMAGE_TOKEN, oracle.AUDIO_TOKEN


def mm_spec(**changes):
    base = dict(layers=4, hidden=32, intermediate=48, heads=2, head_dim=8, kv_heads=1, global_head_dim=16,
                global_kv_heads=1, vocab=oracle.EOA_TOKEN + 1, window=3,
                layer_types=(SLIDING, FULL, SLIDING, SLIDING), seed=31)
    base.update(changes)
    return Spec(**base)


def save_image(name, array, mode=None, **kwargs):
    from PIL import Image
    path = os.path.join(TMP, name)
    Image.fromarray(array, mode).save(path, **kwargs)
    return path


def naive_embed_image(m, pixels, eps=1e-5, rms_eps=1e-6):
    """Loops over blocks, rows, columns and channels; statistics with math.fsum."""
    rows, cols = pixels.shape[0] // 48, pixels.shape[1] // 48
    out = []

    def ln(v, w, b):
        mean = math.fsum(v) / len(v)
        var = math.fsum((x - mean) ** 2 for x in v) / len(v)
        return np.array([(x - mean) / math.sqrt(var + eps) for x in v]) * w + b

    for y in range(rows):
        for x in range(cols):
            vec = [pixels[y * 48 + r, x * 48 + c, ch] / 255.0 for r in range(48) for c in range(48) for ch in range(3)]
            t = ln(vec, m["model.vision_embedder.patch_ln1.weight"], m["model.vision_embedder.patch_ln1.bias"])
            t = m["model.vision_embedder.patch_dense.weight"] @ t + m["model.vision_embedder.patch_dense.bias"]
            t = ln(t, m["model.vision_embedder.patch_ln2.weight"], m["model.vision_embedder.patch_ln2.bias"])
            t = t + m["model.vision_embedder.pos_embedding"][x, 0] + m["model.vision_embedder.pos_embedding"][y, 1]
            t = ln(t, m["model.vision_embedder.pos_norm.weight"], m["model.vision_embedder.pos_norm.bias"])
            t = t / math.sqrt(math.fsum(v * v for v in t) / len(t) + rms_eps)
            out.append(m["model.embed_vision.embedding_projection.weight"] @ t)
    return np.array(out)


class TargetSize(unittest.TestCase):
    def test_square_is_768(self):
        for side in (1, 47, 100, 768, 1000, 4032):
            self.assertEqual(oracle.target_size(side, side), (768, 768), side)

    def test_known_sizes(self):
        # f = sqrt(645120 / (H·W)), H' = floor(f·H/48)·48 (MULTIMODAL.md).
        self.assertEqual(oracle.target_size(300, 500), (576, 1008))       # 12 x 21 = 252 tokens
        self.assertEqual(oracle.target_size(1200, 900), (912, 672))       # 19 x 14 = 266
        self.assertEqual(oracle.target_size(864, 672), (864, 672))        # already there
        self.assertEqual(oracle.target_size(672, 960), (672, 960))        # f = 1 exactly: 280 tokens

    def test_multiples_within_budget(self):
        rng = np.random.default_rng(0)
        for h, w in rng.integers(1, 5000, size=(400, 2)):
            th, tw = oracle.target_size(int(h), int(w))
            self.assertEqual((th % 48, tw % 48), (0, 0), (h, w))
            self.assertGreaterEqual(min(th, tw), 48)
            self.assertLessEqual((th // 48) * (tw // 48), 280, (h, w, th, tw))
            if th > 48 and tw > 48:   # the ordinary rule keeps the aspect to within a block
                self.assertLess(abs(th / tw - h / w) / (h / w), 48.0 / min(th, tw) + 1e-9, (h, w, th, tw))

    def test_side_rounding_to_zero(self):
        # 10 x 5000: f·10/48 < 1, so H' = 48 and W' = min(floor(5000/10)·48, 280·48).
        self.assertEqual(oracle.target_size(10, 5000), (48, 280 * 48))
        self.assertEqual(oracle.target_size(5000, 10), (280 * 48, 48))
        self.assertEqual(oracle.target_size(1, 281), (48, 280 * 48))       # f·1/48 = 0.9996
        self.assertEqual(oracle.target_size(1, 279), (48, 279 * 48))       # f·1/48 = 1.0018: ordinary rule
        self.assertEqual(oracle.target_size(20, 3000), (48, 204 * 48))     # f·20/48 = 1.37: ordinary rule
        # Another budget: 70 tokens.
        self.assertEqual(oracle.target_size(100, 100, max_soft_tokens=70), (384, 384))
        self.assertEqual(oracle.target_size(1, 100, max_soft_tokens=70), (48, 70 * 48))


class PrepareImage(unittest.TestCase):
    def test_no_resize_at_target_size(self):
        px = np.random.default_rng(1).integers(0, 256, size=(768, 768, 3), dtype=np.uint8)
        got = oracle.prepare_image(save_image("exact.png", px))
        np.testing.assert_array_equal(got, px)
        self.assertEqual(got.dtype, np.uint8)

    def test_bicubic_resize(self):
        from PIL import Image
        px = np.random.default_rng(2).integers(0, 256, size=(300, 500, 3), dtype=np.uint8)
        got = oracle.prepare_image(save_image("small.png", px))
        self.assertEqual(got.shape, (576, 1008, 3))
        want = np.array(Image.fromarray(px).resize((1008, 576), getattr(Image, "Resampling", Image).BICUBIC))
        np.testing.assert_array_equal(got, want)

    def test_alpha_dropped_gray_expanded(self):
        rng = np.random.default_rng(3)
        rgba = rng.integers(0, 256, size=(768, 768, 4), dtype=np.uint8)
        np.testing.assert_array_equal(oracle.prepare_image(save_image("rgba.png", rgba, "RGBA")), rgba[..., :3])
        gray = rng.integers(0, 256, size=(768, 768), dtype=np.uint8)
        np.testing.assert_array_equal(oracle.prepare_image(save_image("gray.png", gray, "L")),
                                      np.repeat(gray[..., None], 3, axis=2))

    def test_exif_orientation(self):
        from PIL import Image
        px = np.random.default_rng(4).integers(0, 256, size=(672, 864, 3), dtype=np.uint8)   # stored 864 wide
        exif = Image.Exif()
        exif[0x0112] = 6          # rotate 90° clockwise to display
        path = save_image("rot.png", px, exif=exif.tobytes())
        got = oracle.prepare_image(path)
        self.assertEqual(got.shape, (864, 672, 3))                       # displayed 672 wide, no resize
        np.testing.assert_array_equal(got, np.rot90(px, k=-1))


class Patches(unittest.TestCase):
    def test_order_and_flattening(self):
        # 2 rows x 3 columns of blocks; each value encodes its (y, x, channel).
        y, x, c = np.mgrid[0:96, 0:144, 0:3]
        px = ((y * 7 + x * 3 + c * 50) % 256).astype(np.uint8)
        patches, pos = oracle.image_patches(px)
        self.assertEqual(patches.shape, (6, 6912))
        np.testing.assert_array_equal(pos, [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]])   # (X, Y)
        for n in range(6):
            X, Y = n % 3, n // 3
            for r, col, ch in ((0, 0, 0), (0, 0, 2), (0, 1, 0), (1, 0, 0), (47, 47, 2), (5, 30, 1)):
                self.assertEqual(patches[n, (r * 48 + col) * 3 + ch], px[Y * 48 + r, X * 48 + col, ch] / 255.0)
        self.assertEqual(patches.min(), 0.0)
        self.assertLessEqual(patches.max(), 1.0)
        self.assertEqual(oracle.image_soft_tokens(px), 6)

    def test_rejects_unaligned(self):
        with self.assertRaises(ValueError):
            oracle.image_patches(np.zeros((96, 100, 3), np.uint8))


class MediaEmbedders(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spec = mm_spec(hidden=24)
        cls.ckpt, cls.stored = build(cls.spec, "media_embed")

    def test_tensors_and_config(self):
        m = self.ckpt.media
        self.assertEqual(m["model.vision_embedder.pos_embedding"].shape, (1120, 2, 24))
        self.assertEqual(m["model.vision_embedder.patch_dense.weight"].shape, (24, 6912))
        self.assertEqual(m["model.embed_audio.embedding_projection.weight"].shape, (24, 640))
        self.assertEqual(self.ckpt.media_config, oracle.MediaConfig())
        with open(os.path.join(TMP, "media_embed", "config.json")) as f:
            raw = json.load(f)
        self.assertEqual(raw["vision_config"]["model_patch_size"], 48)
        self.assertEqual(raw["audio_config"]["audio_samples_per_token"], 640)
        self.assertEqual(raw["image_token_id"], IMG)
        text_only, _ = build(dataclasses.replace(self.spec, multimodal=False), "media_none")
        self.assertEqual(text_only.media, {})
        with self.assertRaisesRegex(ValueError, "vision"):
            oracle.embed_image(text_only, np.zeros((48, 48, 3), np.uint8))

    def test_image_against_loops(self):
        rng = np.random.default_rng(5)
        px = rng.integers(0, 256, size=(96, 144, 3)).astype(np.uint8)
        px[:48, :48] = 230                                   # an exactly constant block
        px[48:, 96:] = 12
        px[50, 100, 1] = 13                                  # and a near-constant one
        np.testing.assert_allclose(oracle.embed_image(self.ckpt, px), naive_embed_image(self.ckpt.media, px),
                                   rtol=0, atol=1e-10)

    def test_layer_norm_eps_and_accuracy(self):
        # A near-constant patch at a high level: the two-pass variance is exact to float64
        # rounding, and eps 1e-5 (not 1e-6) enters.
        v = np.full(6912, 230 / 255.0)
        v[::500] += 1 / 255.0
        mean = math.fsum(v) / v.size
        var = math.fsum((x - mean) ** 2 for x in v) / v.size
        want = (v - mean) / math.sqrt(var + 1e-5)
        np.testing.assert_allclose(oracle.layer_norm(v, 1.0, 0.0, 1e-5), want, rtol=1e-9, atol=0)
        px = np.full((48, 48, 3), 200, np.uint8)
        px[0, :10, 0] = 201
        base = oracle.embed_image(self.ckpt, px)
        other = oracle.embed_image(dataclasses.replace(
            self.ckpt, media_config=dataclasses.replace(self.ckpt.media_config, layer_norm_eps=1e-6)), px)
        self.assertGreater(np.abs(other - base).max(), 0.05)

    def test_position_axes(self):
        # Moving a block changes its soft token only through pos_embedding[X,0] + pos_embedding[Y,1].
        rng = np.random.default_rng(6)
        tile = rng.integers(0, 256, size=(48, 48, 3)).astype(np.uint8)
        px = np.zeros((96, 96, 3), np.uint8)
        px[:48, 48:] = tile                                   # X = 1, Y = 0
        m = dict(self.ckpt.media)
        table = m["model.vision_embedder.pos_embedding"].copy()
        table[1, 0] = table[0, 0]                             # make X = 1 look like X = 0 ...
        m["model.vision_embedder.pos_embedding"] = table
        moved = dataclasses.replace(self.ckpt, media=m)
        at_origin = np.zeros((96, 96, 3), np.uint8)
        at_origin[:48, :48] = tile
        np.testing.assert_allclose(oracle.embed_image(moved, px)[1], oracle.embed_image(moved, at_origin)[0],
                                   rtol=0, atol=1e-12)       # ... and the tile at (1,0) equals it at (0,0)
        self.assertGreater(np.abs(oracle.embed_image(self.ckpt, px)[1]
                                  - oracle.embed_image(self.ckpt, at_origin)[0]).max(), 0.01)

    def test_soft_token_scale(self):
        # np_checkpoint.media_init keeps every stage O(1): soft tokens have about unit RMS.
        px = np.random.default_rng(7).integers(0, 256, size=(96, 96, 3)).astype(np.uint8)
        for soft in (oracle.embed_image(self.ckpt, px),
                     oracle.embed_audio(self.ckpt, np.random.default_rng(8).normal(0, 0.1, 3000))):
            r = np.sqrt(np.mean(soft ** 2, axis=1))
            self.assertTrue(np.all((r > 0.4) & (r < 2.5)), r)

    def test_audio_frames(self):
        rng = np.random.default_rng(9)
        w = self.ckpt.media["model.embed_audio.embedding_projection.weight"]
        for n, t in ((640, 1), (641, 2), (1280, 2), (40000, 63)):
            s = rng.normal(0, 0.2, n)
            soft = oracle.embed_audio(self.ckpt, s)
            self.assertEqual(soft.shape, (t, 24))
            self.assertEqual(oracle.audio_soft_tokens(s), t)
            padded = np.zeros(t * 640)
            padded[:n] = s
            for k in (0, t - 1):
                f = padded[k * 640:(k + 1) * 640]
                want = w @ (f / math.sqrt(math.fsum(f * f) / 640 + 1e-6))
                np.testing.assert_allclose(soft[k], want, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(oracle.embed_audio(self.ckpt, np.zeros(640)), np.zeros((1, 24)))


def wav_bytes(fmt_tag, channels, rate, bits, data, extensible=False, extra_chunks=b""):
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else fmt_tag, channels, rate, rate * align, align, bits)
    if extensible:
        guid_tail = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", fmt_tag) + guid_tail
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra_chunks
    body += b"data" + struct.pack("<I", len(data)) + data + (b"\x00" if len(data) % 2 else b"")
    return b"RIFF" + struct.pack("<I", len(body)) + body


class Audio(unittest.TestCase):
    def write(self, name, raw):
        path = os.path.join(TMP, name)
        with open(path, "wb") as f:
            f.write(raw)
        return path

    def test_pcm16_mono_and_stereo(self):
        import wave
        pcm = np.array([[0, 1], [-32768, 32767], [16384, -16384], [100, 300]], dtype="<i2")
        for channels in (1, 2):
            path = os.path.join(TMP, f"pcm{channels}.wav")
            with wave.open(path, "wb") as f:
                f.setnchannels(channels)
                f.setsampwidth(2)
                f.setframerate(16000)
                f.writeframes((pcm if channels == 2 else pcm[:, 0]).tobytes())
            got = oracle.load_audio(path)
            want = pcm.astype(np.float64) / 32768.0
            np.testing.assert_array_equal(got, want.mean(axis=1) if channels == 2 else want[:, 0])

    def test_float32_plain_and_extensible(self):
        x = np.array([[0.5, -0.25], [0.1, 0.3], [-1.0, 1.0]], dtype="<f4")
        odd_chunk = b"LIST" + struct.pack("<I", 3) + b"abc" + b"\x00"       # odd size, padded
        for ext in (False, True):
            path = self.write(f"f32_{ext}.wav", wav_bytes(3, 2, 16000, 32, x.tobytes(), ext, odd_chunk))
            np.testing.assert_array_equal(oracle.load_audio(path), x.astype(np.float64).mean(axis=1))
        path = self.write("f32_mono.wav", wav_bytes(3, 1, 16000, 32, x[:, 0].tobytes()))
        np.testing.assert_array_equal(oracle.load_audio(path), x[:, 0].astype(np.float64))

    def test_refused(self):
        with self.assertRaisesRegex(ValueError, "44100"):
            oracle.load_audio(self.write("rate.wav", wav_bytes(1, 1, 44100, 16, b"\x00\x00" * 4)))
        with self.assertRaisesRegex(ValueError, "format"):
            oracle.load_audio(self.write("pcm24.wav", wav_bytes(1, 1, 16000, 24, b"\x00" * 6)))
        with self.assertRaisesRegex(ValueError, "RIFF"):
            oracle.load_audio(self.write("junk.wav", b"not a wav file at all"))


class SoftTokens(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spec = mm_spec()
        cls.ckpt, cls.stored = build(cls.spec, "soft_tokens")
        rng = np.random.default_rng(10)
        cls.px = rng.integers(0, 256, size=(96, 144, 3)).astype(np.uint8)     # 6 soft tokens
        cls.px2 = rng.integers(0, 256, size=(48, 96, 3)).astype(np.uint8)     # 2
        cls.audio = rng.normal(0, 0.1, 1500)                                   # 3
        cls.ids = ([2, 7, 8, oracle.BOI_TOKEN] + [IMG] * 6 + [oracle.EOI_TOKEN, 9, oracle.BOA_TOKEN] + [AUD] * 3
                   + [oracle.EOA_TOKEN, 10, oracle.BOI_TOKEN] + [IMG] * 2 + [oracle.EOI_TOKEN, 11, 12])

    def test_replace_exactly_the_placeholder_rows(self):
        h, spans = oracle.embed_inputs(self.ckpt, self.ids, images=[self.px, self.px2], audios=[self.audio])
        self.assertEqual(spans.image, ((4, 10), (19, 21)))
        self.assertEqual(spans.audio, ((13, 16),))
        text = self.ckpt.weights["embed_tokens.weight"][self.ids] * oracle.bf16_round(math.sqrt(self.spec.hidden))
        soft = np.zeros(len(self.ids), bool)
        soft[4:10] = soft[13:16] = soft[19:21] = True
        np.testing.assert_array_equal(h[~soft], text[~soft])
        np.testing.assert_array_equal(h[4:10], oracle.embed_image(self.ckpt, self.px))      # not scaled
        np.testing.assert_array_equal(h[19:21], oracle.embed_image(self.ckpt, self.px2))
        np.testing.assert_array_equal(h[13:16], oracle.embed_audio(self.ckpt, self.audio))

    def test_text_only_path_unchanged(self):
        # Without media the placeholders are ordinary ids: forward equals the loop implementation.
        np.testing.assert_allclose(oracle.forward(self.ckpt, self.ids),
                                   naive_forward(self.spec, self.stored, self.ids), rtol=0, atol=1e-9)

    def test_against_loops_with_blocks(self):
        soft = {}
        for start, item in ((4, oracle.embed_image(self.ckpt, self.px)), (13, oracle.embed_audio(self.ckpt, self.audio)),
                            (19, oracle.embed_image(self.ckpt, self.px2))):
            soft.update({start + i: v for i, v in enumerate(item)})
        want = naive_forward(self.spec, self.stored, self.ids, soft, blocks=((4, 10), (19, 21)))
        got = oracle.forward(self.ckpt, self.ids, images=[self.px, self.px2], audios=[self.audio])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)

    def test_mismatches_raise(self):
        short = [t for i, t in enumerate(self.ids) if i != 5]                # a 5-token run for 6 tokens
        with self.assertRaisesRegex(ValueError, "5 tokens"):
            oracle.forward(self.ckpt, short, images=[self.px, self.px2], audios=[self.audio])
        with self.assertRaisesRegex(ValueError, "2 runs"):
            oracle.forward(self.ckpt, self.ids, images=[self.px], audios=[self.audio])
        with self.assertRaisesRegex(ValueError, "audio"):
            oracle.forward(self.ckpt, self.ids, images=[self.px, self.px2], audios=[])
        with self.assertRaisesRegex(ValueError, "gives 2 soft tokens"):
            oracle.forward(self.ckpt, self.ids, images=[self.px2, self.px], audios=[self.audio])

    def test_oracle_cli_with_media(self):
        import wave
        # A copy whose vision_config budget is 10 soft tokens: the 144x96 image is then at its
        # target size (f = 1.29: 2 x 3 blocks), so the CLI run stays small.
        src_dir, budget_dir = os.path.join(TMP, "soft_tokens"), os.path.join(TMP, "soft_tokens_budget10")
        shutil.copytree(src_dir, budget_dir, dirs_exist_ok=True)
        with open(os.path.join(budget_dir, "config.json")) as f:
            raw = json.load(f)
        raw["vision_config"]["num_soft_tokens"] = 10
        with open(os.path.join(budget_dir, "config.json"), "w") as f:
            json.dump(raw, f)
        ckpt = oracle.load_checkpoint(budget_dir)
        self.assertEqual(ckpt.media_config.max_soft_tokens, 10)
        img = save_image("cli.png", self.px)
        np.testing.assert_array_equal(oracle.prepare_image(img, max_soft_tokens=10), self.px)
        wav = os.path.join(TMP, "cli.wav")
        with wave.open(wav, "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(16000)
            f.writeframes(np.round(self.audio * 32767).astype("<i2").tobytes())
        ids = self.ids[:17]                                  # the first image and the audio
        out = os.path.join(TMP, "cli_media.npy")
        done = subprocess.run([sys.executable, os.path.join(HERE, "oracle.py"), "--model", budget_dir,
                               "--ids", ",".join(map(str, ids)), "--image", img, "--audio", wav, "--out", out],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        want = oracle.forward(ckpt, ids, images=[self.px], audios=[oracle.load_audio(wav)])
        np.testing.assert_array_equal(np.load(out), want)


class ImageMasks(unittest.TestCase):
    def test_visible(self):
        cfg = oracle.parse_config(np_checkpoint.full_config(mm_spec()))
        sliding, full = cfg.kinds[SLIDING], cfg.kinds[FULL]          # window 3
        pos = np.arange(16.0)
        spans = ((2, 10), (12, 15))
        m = oracle.visible(pos, sliding, spans)
        self.assertTrue(m[2, 9])          # a later key of q's block, beyond the window
        self.assertTrue(m[3, 9])
        self.assertFalse(m[9, 2])         # earlier keys of the block obey the window
        self.assertTrue(m[9, 7])
        self.assertFalse(m[3, 12])        # not a key of another image block
        self.assertFalse(m[3, 10])        # nor a later text token
        self.assertFalse(m[13, 9])        # the other block's past: window
        self.assertTrue(m[14, 12] and m[12, 14])
        self.assertFalse(m[10, 11])       # text stays causal
        outside = [q for q in range(16) if not any(s <= q < e for s, e in spans)]
        plain = oracle.visible(pos, sliding)
        np.testing.assert_array_equal(m[outside], plain[outside])
        np.testing.assert_array_equal(oracle.visible(pos, full, spans), np.tril(np.ones((16, 16), bool)))

    def test_forward_sees_later_block_keys_on_sliding_layers_only(self):
        rng = np.random.default_rng(11)
        px = rng.integers(0, 256, size=(96, 240, 3)).astype(np.uint8)          # 10 soft tokens, window 3
        changed = px.copy()
        changed[48:, 192:] = 255 - changed[48:, 192:]                          # the last block only
        ids = [2, 5, oracle.BOI_TOKEN] + [IMG] * 10 + [oracle.EOI_TOKEN, 6]
        for types, moves in (((SLIDING, SLIDING), True), ((FULL, FULL), False), ((SLIDING, FULL), True)):
            ckpt, _ = build(mm_spec(layers=2, layer_types=types), f"block_mask_{types[0]}_{types[1]}")
            a = oracle.forward(ckpt, ids, images=[px])
            b = oracle.forward(ckpt, ids, images=[changed])
            np.testing.assert_array_equal(a[:3], b[:3])                         # before the block: causal
            self.assertEqual(np.abs(a[3] - b[3]).max() > 1e-6, moves, types)   # first soft token
            self.assertGreater(np.abs(a[12] - b[12]).max(), 1e-6)
            if SLIDING in types:
                causal = with_kind(ckpt, SLIDING, image_blocks_bidirectional=False)
                np.testing.assert_array_equal(oracle.forward(causal, ids, images=[px])[:12],
                                              oracle.forward(causal, ids, images=[changed])[:12])


if __name__ == "__main__":
    unittest.main()
