#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets, corpus/<target>/: a few small valid inputs each (and a
few near misses). Run it again after changing the formats; libFuzzer mutates from these.

Protobuf messages are encoded by hand (a few lines below), so that no generated Python code is needed.
PNG and WAV files are written by hand too; the JPEG seeds need Pillow (python3-pil), and are skipped
without it."""

import io
import json
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


# ---- protobuf wire format
def varint(v):
    v &= (1 << 64) - 1  # negative int32/int64 are ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_varint(field, v):
    return varint(field << 3) + varint(v)


def f_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(field << 3 | 2) + varint(len(b)) + b


def f_float(field, v):
    return varint(field << 3 | 5) + struct.pack("<f", v)


def f_packed(field, values):
    return f_bytes(field, b"".join(varint(v) for v in values))


# ---- safetensors
def safetensors(tensors, metadata=None, pad=True):
    """tensors: (name, dtype, shape, bytes)."""
    header, data, offset = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        data += blob
        offset += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    while pad and (len(h) + 8) % 8:
        h += b" "
    return struct.pack("<Q", len(h)) + h + data


def safetensors_corpus():
    t = "safetensors_header_fuzz"
    write(t, "two_tensors", safetensors(
        [("model.layers.0.self_attn.q_proj.weight", "BF16", [2, 3], bytes(range(12))),
         ("model.norm.weight", "F32", [4], struct.pack("<4f", 1, 2, 3, 4))], metadata={"format": "pt"}))
    write(t, "empty_header", safetensors([]))
    write(t, "scalar_f16", safetensors([("s", "F16", [], b"\x00\x3c")], pad=False))
    write(t, "zero_size", safetensors([("z", "F32", [0, 5], b""), ("b", "BF16", [1, 1, 1], b"\x80\x3f")]))
    write(t, "bad_dtype", safetensors([("i", "I64", [1], bytes(8))]))


# ---- config.json
def text_config(layers, pattern=6):
    return {
        "model_type": "gemma4_unified_text", "hidden_size": 64, "intermediate_size": 128, "vocab_size": 512,
        "num_hidden_layers": layers, "num_attention_heads": 4, "head_dim": 16, "num_key_value_heads": 2,
        "global_head_dim": 32, "num_global_key_value_heads": 1,
        "layer_types": ["full_attention" if i % pattern == pattern - 1 else "sliding_attention" for i in range(layers)],
        "attention_k_eq_v": True, "sliding_window": 16,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}},
        "rms_norm_eps": 1e-6, "final_logit_softcapping": 30.0, "max_position_embeddings": 4096,
        "num_kv_shared_layers": 0, "enable_moe_block": False, "hidden_size_per_layer_input": 0,
    }


def config_corpus():
    t = "model_config_fuzz"
    write(t, "nested_tiny.json", json.dumps({
        "architectures": ["Gemma4UnifiedForConditionalGeneration"], "model_type": "gemma4_unified",
        "text_config": text_config(6), "image_token_id": 258880, "eos_token_id": [1, 106]}, indent=1))
    flat = text_config(4, pattern=2)
    del flat["layer_types"], flat["rope_parameters"]
    flat.update({"sliding_window_pattern": 2, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                 "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0})
    write(t, "flat_gemma3_style.json", json.dumps(flat, indent=1))
    single = text_config(2, pattern=2)
    single["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    single["attention_k_eq_v"] = False
    write(t, "single_rope.json", json.dumps(single))
    big = text_config(48)
    big.update({"hidden_size": 3840, "intermediate_size": 15360, "vocab_size": 262144, "num_attention_heads": 16,
                "head_dim": 256, "num_key_value_heads": 8, "global_head_dim": 512, "sliding_window": 1024,
                "max_position_embeddings": 262144})
    write(t, "gemma4_12b.json", json.dumps({"model_type": "gemma4_unified", "text_config": big}))


# ---- tokenizer.json
SPECIAL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 100: "<|channel>", 101: "<channel|>",
           105: "<|turn>", 106: "<turn|>"}
MERGES = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("i", "n"), ("e", "r"), ("o", "r"), ("▁", "w"),
          ("▁w", "or"), ("l", "d"), ("▁wor", "ld"), ("l", "l"), ("e", "ll"), ("H", "ell"), ("Hell", "o"),
          ("u", "s"), ("us", "er"), ("m", "o"), ("mo", "d"), ("mod", "el"), ("e", "l"), ("t", "h"),
          ("th", "o"), ("u", "g"), ("ug", "ht"), ("h", "t"), ("tho", "ught"), ("▁", "▁"), ("\n", "\n")]


def tiny_gemma():
    """Gemma's pipeline (tokenizer.json of the 12B: normalizer, split, byte fallback, <bos> template) on a
    vocabulary of a few hundred ids, with the chat markers at their real ids."""
    vocab = {tok: i for i, tok in SPECIAL.items()}
    vocab["<mask>"] = 4
    pieces = ["▁", "\n", "!", ",", ".", "?", "'", "H", "W", "T"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [str(d) for d in range(10)]
    for a, b in MERGES:
        if a + b not in pieces:
            pieces.append(a + b)
    free = [i for i in range(5, 200) if i not in SPECIAL]
    for i, p in zip(free, pieces):
        vocab[p] = i
    for b in range(256):
        vocab["<0x%02X>" % b] = 200 + b
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in sorted(SPECIAL.items())]
    added.append({"id": 4, "content": "<mask>", "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": False})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in MERGES]},
    }


def other_features():
    """What Gemma's file does not use: legacy "a b" merges, a Sequence normalizer with Prepend, Split
    behaviours, added-token flags, a template token found through special_tokens, ignore_merges."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "c": 5, "ab": 6, "abc": 7, "_": 8, "_a": 9, "-": 10}
    return {
        "added_tokens": [
            {"id": 1, "content": "<s>", "special": True},
            {"id": 2, "content": "</s>", "special": True, "lstrip": True, "rstrip": True},
            {"id": 11, "content": "ab c", "normalized": True, "single_word": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "_"}, {"type": "Replace", "pattern": {"String": " "}, "content": "_"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated"},
            {"type": "Split", "pattern": {"String": "_"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"String": "c"}, "behavior": "Contiguous"}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<start>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "special_tokens": {"<start>": {"id": "<start>", "ids": [1]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "_"},
                                                      "content": " "}]},
        "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True, "vocab": vocab, "merges": ["a b", "ab c", "_ a"]},
    }


def tokenizer_corpus():
    t = "tokenizer_json_fuzz"
    tiny = json.dumps(tiny_gemma(), ensure_ascii=False, separators=(",", ":"))
    write(t, "tiny_gemma.json", tiny)  # also generate_request_fuzz's tokenizer
    write(t, "tiny_gemma_with_text", tiny.encode() + b"\0" + "Hello world <|turn>user\nthe model\n\n€ ".encode() +
          b"\xff\xe2\x82")
    write(t, "other_features_with_text",
          json.dumps(other_features(), separators=(",", ":")) + "\0ab c-_a </s> abc")


# ---- StepFrame (proto/internal.proto)
def sampling(temperature=None, top_k=None, top_p=None, min_p=None, penalty=None, seed=None):
    out = b""
    if temperature is not None:
        out += f_float(1, temperature)
    if top_k is not None:
        out += f_varint(2, top_k)
    if top_p is not None:
        out += f_float(3, top_p)
    if min_p is not None:
        out += f_float(4, min_p)
    if penalty is not None:
        out += f_float(5, penalty)
    if seed is not None:
        out += f_varint(6, seed)
    return out


def step_slice(seq_id, pos0, ids, sample=False, sp=None, rng_skip=0, top_logprobs=0, score=False,
               return_logits=False, next_id=0):
    out = f_varint(1, seq_id) + f_varint(2, pos0) + f_packed(3, ids)
    if sample:
        out += f_varint(4, 1)
    if sp is not None:
        out += f_bytes(5, sp)
    if rng_skip:
        out += f_varint(6, rng_skip)
    if top_logprobs:
        out += f_varint(7, top_logprobs)
    if score:
        out += f_varint(8, 1)
    if return_logits:
        out += f_varint(9, 1)
    if next_id:
        out += f_varint(10, next_id)
    return out


def step_frame(slices, release=(), dtype=0, hidden=b"", on_link=False, epoch=1, step_id=7, secret=b""):
    out = f_varint(1, epoch) + f_varint(2, step_id)
    for s in slices:
        out += f_bytes(3, s)
    if release:
        out += f_packed(4, release)
    if dtype:
        out += f_varint(5, dtype)
    if hidden:
        out += f_bytes(6, hidden)
    if on_link:
        out += f_varint(7, 1)
    if secret:
        out += f_bytes(8, secret)
    return out


def bf16(values):
    return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in values)


def frame_corpus():
    t = "step_frame_fuzz"
    write(t, "first_stage_prefill", step_frame(
        [step_slice(1, 0, [2, 10, 11, 12], sample=True, sp=sampling(0.7, 40, 0.95, 0.0, 1.1, 42))]))
    write(t, "later_stage_bf16", step_frame(
        [step_slice(1, 4, [13], sample=True), step_slice(2, 0, [2, 20], rng_skip=3, top_logprobs=5)],
        release=[9], dtype=1, hidden=bf16([0.5, -1.0, 2.0, 0.0] * 3), secret=bytes(range(16))))
    write(t, "score_f32", step_frame(
        [step_slice(5, 0, [2, 30, 31], score=True, next_id=-1, return_logits=True)],
        dtype=0, hidden=struct.pack("<12f", *range(12))))
    write(t, "on_link", step_frame([step_slice(3, 10, [40, 41])], on_link=True, epoch=2, step_id=1 << 40))
    write(t, "release_only", step_frame([], release=[1, 2, 3]))


# ---- hidden codec: [dtype][rows int16][hidden_size int16][payload]
def codec(dtype, rows, width, payload):
    return struct.pack("<bhh", dtype, rows, width) + payload


def codec_corpus():
    t = "hidden_codec_fuzz"
    write(t, "f32_2x3", codec(0, 2, 3, struct.pack("<6f", 1.5, -2.0, 0.0, 1e-40, float("inf"), 3.25)))
    special = [float("nan"), float("-inf"), 1e-39, -0.0, 65504.0, 3.0e38, 1.0 / 3.0, 0.1]
    write(t, "bf16_4x8", codec(1, 4, 8, bf16(special * 4)))
    write(t, "f32_as_bf16_20", codec(1, 2, 20, struct.pack("<20f", *[(i - 10) / 7.0 for i in range(20)])))
    write(t, "unknown_dtype", codec(5, 1, 1, b"\0\0\0\0"))
    write(t, "negative_dims", codec(0, -1, -1, b"\0\0\x80\x3f"))


# ---- GenerateRequest (proto/layerpipe.proto)
def request_corpus():
    t = "generate_request_fuzz"
    write(t, "prompt_sampled", f_bytes(1, "Hello world") + f_varint(5, 16) +
          f_bytes(6, sampling(0.7, 40, 0.95, None, None, 1)) + f_bytes(7, "\n\n") + f_bytes(7, "ld"))
    write(t, "chat_with_system", f_bytes(1, "the model") + f_varint(3, 1) + f_bytes(4, "be terse") +
          f_varint(5, 8) + f_packed(8, [106, 1]) + f_varint(9, 5))
    write(t, "ids_penalty", f_bytes(2, f_packed(1, [2, 20, 21, 22, 1])) + f_varint(5, 4) +
          f_bytes(6, sampling(1.0, None, None, 0.05, 1.1, 7)))
    write(t, "greedy_stop_strings", f_bytes(1, "the the thought") + f_varint(5, 64) + f_bytes(7, "tho") +
          f_bytes(7, "\u20ac") + f_bytes(7, ""))


# ---- images (image_decode_fuzz): small PNGs of every color type and metadata path, and JPEGs
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(w, h, color_type, depth, raw, chunks=(), interlace=0):
    """raw: the filtered scanlines (each starting with its filter byte), as libpng inflates them."""
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, interlace))
    for kind, data in chunks:
        out += png_chunk(kind, data)
    return out + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")


def rows(w, h, bytes_per_pixel, seed=1):
    return b"".join(bytes([y % 5]) + bytes((x * 31 + y * 17 + seed) & 0xFF for x in range(w * bytes_per_pixel))
                    for y in range(h))


def adam7(w, h, pixel):
    """Interlaced 8-bit RGB scanlines: the seven passes, each row with filter byte 0."""
    out = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        xs = range(x0, w, dx)
        if not xs:
            continue
        for y in range(y0, h, dy):
            out += b"\0" + b"".join(pixel(x, y) for x in xs)
    return out


def tiff_orientation(o):
    """Little-endian TIFF, IFD0 with Orientation = o (what eXIf holds; APP1 adds "Exif\0\0")."""
    return b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHII", 0x0112, 3, 1, o) + \
        struct.pack("<I", 0)


def image_corpus():
    t = "image_decode_fuzz"
    write(t, "rgb_8x8.png", png(8, 8, 2, 8, rows(8, 8, 3)))
    write(t, "rgba_4x4_exif6.png", png(4, 4, 6, 8, rows(4, 4, 4), [(b"eXIf", tiff_orientation(6))]))
    write(t, "gray1_9x3.png", png(9, 3, 0, 1, rows(2, 3, 1)))
    write(t, "gray_alpha16_3x2.png", png(3, 2, 4, 16, rows(3, 2, 4)))
    write(t, "rgb16_3x3_trns.png", png(3, 3, 2, 16, rows(3, 3, 6), [(b"tRNS", bytes(6))]))
    write(t, "palette2_5x4_trns.png", png(5, 4, 3, 2, rows(2, 4, 1),
                                          [(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255])), (b"tRNS", b"\0\x80")]))
    write(t, "interlaced_9x9.png", png(9, 9, 2, 8, adam7(9, 9, lambda x, y: bytes([x * 20, y * 20, 99])),
                                       interlace=1))
    hexed = (b"Exif\0\0" + tiff_orientation(8)).hex()
    write(t, "raw_profile_exif.png", png(2, 3, 2, 8, rows(2, 3, 3), [
        (b"tEXt", b"Raw profile type exif\0\nexif\n%8d\n" % (len(hexed) // 2) + hexed.encode() + b"\n")]))
    write(t, "xmp_orientation.png", png(3, 2, 0, 8, rows(3, 2, 1), [
        (b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0<x:xmpmeta><rdf:Description tiff:Orientation=\"5\"/></x:xmpmeta>")]))
    try:
        from PIL import Image
    except ImportError:
        print("make_corpus.py: no Pillow, JPEG seeds of image_decode_fuzz left out")
        return
    def jpeg(im, **kw):
        buf = io.BytesIO()
        im.save(buf, "JPEG", **kw)
        return buf.getvalue()
    im = Image.frombytes("RGB", (16, 16), bytes((i * 7) & 0xFF for i in range(16 * 16 * 3)))
    write(t, "baseline_420_exif3.jpg", jpeg(im, quality=75, exif=b"Exif\0\0" + tiff_orientation(3)))
    write(t, "progressive_444.jpg", jpeg(im.resize((16, 8)), quality=60, progressive=True, subsampling=0))
    write(t, "gray_8x8.jpg", jpeg(im.convert("L").resize((8, 8)), quality=50))
    write(t, "cmyk_8x8.jpg", jpeg(im.convert("CMYK").resize((8, 8)), quality=50))


# ---- WAV (wav_decode_fuzz): the encodings DecodeAudio reads, at 16 kHz and other rates
def wav(rate, channels, fmt_tag, bits, data, extra_fmt=b"", chunks=(), magic=b"RIFF", sizes_in_ds64=False):
    e = ">" if magic == b"RIFX" else "<"
    block = channels * bits // 8
    fmt = struct.pack(e + "HHIIHH", fmt_tag, channels, rate, rate * block, block, bits) + extra_fmt
    body = b"WAVE" + struct.pack(e + "4sI", b"fmt ", len(fmt)) + fmt
    for kind, payload in chunks:
        body += struct.pack(e + "4sI", kind, len(payload)) + payload + b"\0" * (len(payload) % 2)
    data_size = 0xFFFFFFFF if sizes_in_ds64 else len(data)  # RF64: the real size is in "ds64"
    body += struct.pack(e + "4sI", b"data", data_size) + data
    return magic + struct.pack(e + "I", 0xFFFFFFFF if sizes_in_ds64 else len(body)) + body


def wav_corpus():
    t = "wav_decode_fuzz"
    sine = [int(12000 * ((i % 40) - 20) / 20) for i in range(64)]
    write(t, "pcm16_mono_16k.wav", wav(16000, 1, 1, 16, struct.pack("<64h", *sine)))
    write(t, "pcm8_stereo_8k.wav", wav(8000, 2, 1, 8, bytes((i * 9) & 0xFF for i in range(96)),
                                       chunks=[(b"LIST", b"INFOISFT\x04\0\0\0fuzz")]))
    write(t, "float32_44k.wav", wav(44100, 1, 3, 32, struct.pack("<48f", *[v / 32768 for v in sine[:48]]),
                                    extra_fmt=b"\0\0", chunks=[(b"fact", struct.pack("<I", 48))]))
    guid_pcm = bytes.fromhex("0100000000001000800000aa00389b71")
    write(t, "pcm24_extensible_48k.wav", wav(48000, 2, 0xFFFE, 24, bytes((i * 13) & 0xFF for i in range(120)),
                                             extra_fmt=struct.pack("<HHI", 22, 24, 3) + guid_pcm))
    write(t, "ulaw_8k.wav", wav(8000, 1, 7, 8, bytes(range(0, 256, 4)), extra_fmt=b"\0\0"))
    write(t, "double_22k.wav", wav(22050, 1, 3, 64, struct.pack("<16d", *[v / 32768 for v in sine[:16]])))
    write(t, "pcm16_empty.wav", wav(16000, 1, 1, 16, b""))
    write(t, "pcm16_rifx_16k.wav", wav(16000, 1, 1, 16, struct.pack(">32h", *sine[:32]), magic=b"RIFX"))
    rf64_data = struct.pack("<32h", *sine[32:])
    ds64 = struct.pack("<QQQI", 0, len(rf64_data), 32, 0)  # RIFF size (unused), data size, frames, no table
    write(t, "pcm16_rf64_16k.wav", wav(16000, 1, 1, 16, rf64_data, chunks=[(b"ds64", ds64)], magic=b"RF64",
                                       sizes_in_ds64=True))


def main():
    for target in ("safetensors_header_fuzz", "model_config_fuzz", "tokenizer_json_fuzz", "step_frame_fuzz",
                   "hidden_codec_fuzz", "generate_request_fuzz", "image_decode_fuzz", "wav_decode_fuzz"):
        shutil.rmtree(os.path.join(CORPUS, target), ignore_errors=True)
    safetensors_corpus()
    config_corpus()
    tokenizer_corpus()
    frame_corpus()
    codec_corpus()
    request_corpus()
    image_corpus()
    wav_corpus()


if __name__ == "__main__":
    main()
