#!/usr/bin/env python3
"""engine/media against Pillow, the reference Hugging Face's processor decodes with.

Generates a varied image set in a temporary directory (PNG and JPEG; RGB, RGBA, L, LA, P with and
without transparency, 1/2/4-bit, 16-bit; gradients, noise, sharp edges and near-constant areas; large
and small downscales, upscales, extreme aspect ratios, images already at their target size, EXIF
orientations 2..8) and runs media_probe on each. Checks:
  - decoded == ImageOps.exif_transpose(im).convert("RGB"), exactly (16-bit gray: the high byte, where
    Pillow, opening it as mode I, clips at 255);
  - prepared has the target size of MULTIMODAL.md's rule, and is byte-identical to the decoded image when
    that is already the target size;
  - prepared vs Pillow's resize((W', H'), Image.BICUBIC) of the decoded image: |diff| <= 1 per value,
    and at most MAX_DIFFERING of the values off by one (the implementation follows Pillow's fixed-point
    path, so the report should say 0; an off-by-one in its rounding moves about half the values);
  - a file Pillow refuses (truncated) is refused, one it accepts (trailing bytes) is accepted.
Exits 1 on any failure."""

import argparse
import io
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zlib

import numpy as np
from PIL import Image, ImageOps, PngImagePlugin

warnings.simplefilter("ignore")  # Pillow's palette-transparency notes
MAX_DIFFERING = 0.001  # share of an image's values allowed to differ (by 1) from Pillow's resize


def target_size(h, w, max_soft_tokens=280, block=48):
    """MULTIMODAL.md "Target size" (Hugging Face's get_aspect_ratio_preserving_size)."""
    factor = math.sqrt(max_soft_tokens * block * block / (h * w))
    th = int(math.floor(factor * h / block)) * block
    tw = int(math.floor(factor * w / block)) * block
    if th == 0:
        th, tw = block, min(int(math.floor(w / h)) * block, max_soft_tokens * block)
    elif tw == 0:
        th, tw = min(int(math.floor(h / w)) * block, max_soft_tokens * block), block
    return th, tw


def content(h, w, seed):
    """Smooth gradients, a noisy band, sharp edges (checkerboard, a box with a line through it, thin
    lines) and a near-constant patch, as uint8 RGB."""
    rng = np.random.RandomState(seed)
    x = np.arange(w, dtype=np.float32)[None, :]
    y = np.arange(h, dtype=np.float32)[:, None]
    img = np.empty((h, w, 3), np.float32)
    img[..., 0] = x * (255.0 / max(w - 1, 1))
    img[..., 1] = y * (255.0 / max(h - 1, 1))
    img[..., 2] = 128 + 100 * np.sin(x / 17.0 + y / 23.0)
    r0, r1 = int(h * 0.55) + 1, int(h * 0.7)
    if r1 > r0:
        img[r0:r1] = rng.randint(0, 256, (r1 - r0, w, 3))
    ch, cw = (h + 2) // 3, (w + 2) // 3
    img[:ch, :cw] = ((((np.arange(ch)[:, None] // 4) + (np.arange(cw)[None, :] // 4)) % 2) * 255)[..., None]
    b0, b1, c0, c1 = int(h * 0.1) + 1, int(h * 0.4), int(w * 0.5) + 1, int(w * 0.8)
    img[b0:b1, c0:c1] = [250, 20, 20]
    img[b0:b1, int(w * 0.65)] = 0
    f0, f1 = int(h * 0.75) + 1, int(w * 0.75) + 1
    img[f0:, f1:] = 200 + rng.randint(-1, 2, (max(h - f0, 0), max(w - f1, 0), 3))
    img[::7, (np.arange(w) % 50) < 2] = 255
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def save(im, fmt, **kw):
    if fmt == "PNG":
        kw.setdefault("compress_level", 1)  # fast; the decoder does not care
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def raw_png(w, h, color_type, depth, rows, plte=None):
    """A PNG written by hand, for what Pillow cannot write: 16-bit RGB/RGBA/LA, 2/4-bit gray, palette
    indices past the PLTE. rows: list of bytes, one per row, without the filter byte."""
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0))
    if plte is not None:
        out += png_chunk(b"PLTE", plte)
    out += png_chunk(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows)))
    return out + png_chunk(b"IEND", b"")


def pack_bits(values, depth):
    """Rows of small ints, packed `depth` bits each, most significant first."""
    per = 8 // depth
    rows = []
    for row in values:
        padded = list(row) + [0] * (-len(row) % per)
        rows.append(bytes(sum(v << (8 - depth * (i + 1)) for i, v in enumerate(padded[k:k + per]))
                          for k in range(0, len(padded), per)))
    return rows


def exif_bytes(orientation):
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


def cases():
    """(name, file bytes, expect_gray16_high_byte)."""
    out = []
    rgb = lambda h, w, s: Image.fromarray(content(h, w, s))
    # Sizes: small and large downscales, upscales, extreme aspect ratios, already at target.
    for h, w in [(750, 1000), (1536, 2048), (23, 17), (1, 1), (3, 5), (60, 4000), (10, 3000), (2000, 10),
                 (768, 768), (672, 912), (800, 800), (251, 333)]:
        out.append((f"png_rgb_{w}x{h}", save(rgb(h, w, h + w), "PNG"), False))
    base = rgb(300, 400, 1)
    alpha = Image.fromarray(content(300, 400, 2)[:, :, 0])
    rgba = base.copy()
    rgba.putalpha(alpha)
    out.append(("png_rgba", save(rgba, "PNG"), False))
    out.append(("png_l", save(base.convert("L"), "PNG"), False))
    la = base.convert("L")
    la.putalpha(alpha)
    out.append(("png_la", save(la.convert("LA"), "PNG"), False))
    out.append(("png_rgb_trns", save(base, "PNG", transparency=(250, 20, 20)), False))
    out.append(("png_l_trns", save(base.convert("L"), "PNG", transparency=200), False))
    out.append(("png_1bit", save(base.convert("1"), "PNG"), False))
    pal = base.quantize(256)
    out.append(("png_p256", save(pal, "PNG"), False))
    out.append(("png_p256_trns_index", save(pal, "PNG", transparency=3), False))
    out.append(("png_p256_trns_table", save(pal, "PNG", transparency=bytes(range(0, 256, 2))), False))
    out.append(("png_p16_4bit", save(base.quantize(16), "PNG"), False))
    out.append(("png_p4_2bit", save(base.quantize(4), "PNG"), False))
    rgba_p = rgba.quantize(64)  # a palette whose tRNS comes from the alpha
    out.append(("png_p_from_rgba", save(rgba_p, "PNG"), False))
    wide = np.linspace(0, 65535, 300 * 400).reshape(300, 400).astype(np.uint16)
    out.append(("png_gray16", save(Image.fromarray(wide), "PNG"), True))
    c16 = (content(200, 300, 3).astype(np.uint16) * 257 + np.random.RandomState(3).randint(0, 257, (200, 300, 3))).astype(">u2")
    out.append(("png_rgb16", raw_png(300, 200, 2, 16, [r.tobytes() for r in c16]), False))
    a16 = np.concatenate([c16, c16[:, :, :1]], axis=2)
    out.append(("png_rgba16", raw_png(300, 200, 6, 16, [r.tobytes() for r in a16]), False))
    out.append(("png_la16", raw_png(300, 200, 4, 16, [r.tobytes() for r in c16[:, :, :2]]), False))
    g = content(40, 50, 4)[:, :, 1]
    out.append(("png_gray2", raw_png(50, 40, 0, 2, pack_bits(g >> 6, 2)), False))
    out.append(("png_gray4", raw_png(50, 40, 0, 4, pack_bits(g >> 4, 4)), False))
    out.append(("png_palette_past_plte", raw_png(16, 16, 3, 8, [bytes(range(r * 16, r * 16 + 16)) for r in range(16)],
                                                 plte=bytes([255, 0, 0, 0, 255, 0, 0, 0, 255])), False))
    # Orientation, on a non-square image so that a wrong swap shows.
    for o in range(2, 9):
        out.append((f"png_exif_orientation_{o}", save(base, "PNG", exif=exif_bytes(o)), False))
        out.append((f"jpeg_exif_orientation_{o}", save(base, "JPEG", quality=90, exif=exif_bytes(o)), False))
    raw = exif_bytes(6)[6:].hex()
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type exif", "\nexif\n%8d\n" % (len(raw) // 2) +
                  "\n".join(raw[i:i + 72] for i in range(0, len(raw), 72)) + "\n")
    out.append(("png_raw_profile_orientation_6", save(base, "PNG", pnginfo=info), False))
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description '
                  'xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="8"/></rdf:RDF></x:xmpmeta>')
    out.append(("png_xmp_orientation_8", save(base, "PNG", pnginfo=info), False))
    # JPEG: subsamplings, progressive, gray, CMYK (Adobe-inverted), odd sizes, a large downscale.
    out.append(("jpeg_420_1000x750", save(rgb(750, 1000, 5), "JPEG", quality=90), False))
    out.append(("jpeg_444_333x251", save(rgb(251, 333, 6), "JPEG", quality=95, subsampling=0), False))
    out.append(("jpeg_422_517x389", save(rgb(389, 517, 7), "JPEG", quality=80, subsampling=1), False))
    out.append(("jpeg_progressive", save(rgb(480, 640, 8), "JPEG", quality=85, progressive=True), False))
    out.append(("jpeg_gray", save(rgb(300, 400, 9).convert("L"), "JPEG", quality=90), False))
    out.append(("jpeg_cmyk", save(rgb(200, 300, 10).convert("CMYK"), "JPEG", quality=90), False))
    out.append(("jpeg_3200x2400", save(rgb(2400, 3200, 11), "JPEG", quality=85), False))
    out.append(("jpeg_768x768", save(rgb(768, 768, 12), "JPEG", quality=90), False))
    out.append(("jpeg_extreme_48x6000", save(rgb(48, 6000, 13), "JPEG", quality=90), False))
    return out


def refusal_cases():
    """(name, bytes): files whose acceptance must agree with Pillow's."""
    jpeg = save(Image.fromarray(content(120, 160, 20)), "JPEG", quality=90)
    png = save(Image.fromarray(content(120, 160, 21)), "PNG")
    return [("jpeg_truncated_half", jpeg[:len(jpeg) // 2]), ("jpeg_without_eoi", jpeg[:-2]),
            ("jpeg_trailing_bytes", jpeg + b"trailing"), ("png_truncated_half", png[:len(png) // 2]),
            ("png_trailing_bytes", png + b"trailing")]


def read_raw(path):
    with open(path, "rb") as f:
        data = f.read()
    w, h = struct.unpack("<qq", data[:16])
    return np.frombuffer(data[16:], np.uint8).reshape(h, w, 3)


def run_probe(probe, work, name, data):
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data)
    r = subprocess.run([probe, path, path + ".decoded", path + ".prepared"], capture_output=True, text=True)
    if r.returncode == 2:
        return r.stdout.strip(), None, None
    if r.returncode != 0:
        raise RuntimeError(f"{name}: media_probe failed ({r.returncode}): {r.stderr}")
    return None, read_raw(path + ".decoded"), read_raw(path + ".prepared")


def pillow_decode(data):
    im = Image.open(io.BytesIO(data))
    return ImageOps.exif_transpose(im), np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    args = ap.parse_args()
    start = time.time()
    failures, total_values, total_differing, worst = [], 0, 0, 0
    with tempfile.TemporaryDirectory() as work:
        for name, data, gray16 in cases():
            error, decoded, prepared = run_probe(args.probe, work, name, data)
            if error:
                failures.append(f"{name}: refused: {error}")
                continue
            im, want = pillow_decode(data)
            if gray16:
                # Pillow opens 16-bit gray as mode I and convert("RGB") clips it at 255; the library
                # keeps the high byte, as Pillow does for every other 16-bit PNG.
                want = np.repeat((np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)[:, :, None], 3, axis=2)
            if decoded.shape != want.shape or not np.array_equal(decoded, want):
                bad = "shape %s vs %s" % (decoded.shape, want.shape) if decoded.shape != want.shape else \
                    "%d values differ, max %d" % ((decoded != want).sum(), np.abs(decoded.astype(int) - want).max())
                failures.append(f"{name}: decoded differs from Pillow's: {bad}")
                continue
            th, tw = target_size(*want.shape[:2])
            if prepared.shape != (th, tw, 3):
                failures.append(f"{name}: prepared is {prepared.shape[1]}x{prepared.shape[0]}, want {tw}x{th}")
                continue
            if (th, tw) == want.shape[:2]:
                if not np.array_equal(prepared, decoded):
                    failures.append(f"{name}: already at target size but not returned unchanged")
                print(f"{name:32s} {want.shape[1]}x{want.shape[0]} already at target: unchanged")
                continue
            ref = np.asarray(Image.fromarray(want).resize((tw, th), Image.BICUBIC))
            diff = np.abs(prepared.astype(int) - ref.astype(int))
            differing = int((diff > 0).sum())
            total_values += diff.size
            total_differing += differing
            worst = max(worst, int(diff.max()))
            print(f"{name:32s} {want.shape[1]}x{want.shape[0]} -> {tw}x{th}: decode exact, resize max diff "
                  f"{diff.max()}, {100.0 * differing / diff.size:.4f}% of values differ")
            if diff.max() > 1 or differing > MAX_DIFFERING * diff.size:
                failures.append(f"{name}: prepared differs from Pillow's resize by up to {diff.max()} in "
                                f"{differing} of {diff.size} values")
        for name, data in refusal_cases():
            error, _, _ = run_probe(args.probe, work, name, data)
            try:
                pillow_decode(data)
                pillow_error = None
            except Exception as e:  # Pillow raises OSError/SyntaxError for broken files
                pillow_error = str(e)
            print(f"{name:32s} library: {error or 'accepted'}; Pillow: {pillow_error or 'accepted'}")
            if (error is None) != (pillow_error is None):
                failures.append(f"{name}: library {'refused' if error else 'accepted'} it, Pillow "
                                f"{'refused' if pillow_error else 'accepted'} it")
    print(f"resize against Pillow: max diff {worst}, {total_differing} of {total_values} values differ "
          f"({100.0 * total_differing / max(total_values, 1):.5f}%); {time.time() - start:.1f} s")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
