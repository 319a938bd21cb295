#!/usr/bin/python3
"""Self-tests of the float64 oracle: invariants that hold by construction of MODEL.md §2,
a loop-by-loop second implementation, and the safetensors/config readers.

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
    return oracle.Checkpoint(ckpt.config, w)


def with_kind(ckpt, layer_type, **changes):
    kinds = dict(ckpt.config.kinds)
    kinds[layer_type] = dataclasses.replace(kinds[layer_type], **changes)
    return oracle.Checkpoint(dataclasses.replace(ckpt.config, kinds=kinds), ckpt.weights)


def prompt(vocab, n, seed=0):
    return np.random.default_rng(seed).integers(3, vocab, size=n)


# ----------------------------------------------------------------------------------------------
# A second implementation: explicit loops over tokens, heads and rotary pairs, read off
# MODEL.md independently of oracle.py (it uses only the Spec, not the oracle's parsed config).
# ----------------------------------------------------------------------------------------------

def naive_forward(spec, w, ids):
    eps = spec.eps
    n = len(ids)

    def norm(x, g=None):
        out = x / math.sqrt(float(np.dot(x, x)) / x.size + eps)
        return out if g is None else out * g

    s32 = struct.unpack("<I", struct.pack("<f", math.sqrt(spec.hidden)))[0]
    s32 = (s32 + 0x7FFF + ((s32 >> 16) & 1)) & 0xFFFF0000
    scale = struct.unpack("<f", struct.pack("<I", s32))[0]

    h = [w["embed_tokens.weight"][t] * scale for t in ids]
    for li, t in enumerate(spec.types()):
        L = lambda name: w[f"layers.{li}.{name}"]  # noqa: E731
        full = t == FULL
        hd = spec.global_head_dim if full else spec.head_dim
        kvh = spec.global_kv_heads if full else spec.kv_heads
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
                keys = [k for k in range(qpos + 1) if full or qpos - k < spec.window]
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
                    self.assertEqual(sorted(ckpt.weights), sorted(stored))
                    for n, v in stored.items():
                        np.testing.assert_array_equal(ckpt.weights[n], v, err_msg=f"{name}: {n}")
                    files = os.listdir(os.path.join(TMP, name))
                    self.assertEqual("model.safetensors.index.json" in files, shards > 1)
                    if dtype == "BF16":
                        logits = oracle.forward(ckpt, ids)
                        if reference is None:
                            reference = logits
                        # Same weights whatever the config style, prefix or sharding.
                        np.testing.assert_array_equal(logits, reference, err_msg=name)
        self.assertIsNotNone(reference)

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


if __name__ == "__main__":
    unittest.main()
