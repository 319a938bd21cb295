// A small multimodal checkpoint and a prompt with one image and one audio clip, for the tests that
// run soft tokens through a backend (the CUDA tests hold the CUDA backend to the CPU engine with them).
#ifndef LAYERPIPE_TESTS_ENGINE_MULTIMODAL_TEST_UTIL_H_
#define LAYERPIPE_TESTS_ENGINE_MULTIMODAL_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/soft_tokens.h"
#include "tools/checkpoint/checkpoint_writer.h"

namespace layerpipe::testing_util {

inline constexpr int32_t kImageId = 258880, kAudioId = 258881;

// Small enough to score prompts with images quickly; the vocabulary holds the soft-token ids, and the
// window (3) is shorter than the prompt's image. `types`: one letter per layer, 'f' full, else sliding.
inline RandomCheckpointOptions MultimodalModel(const std::string& types) {
  RandomCheckpointOptions o;
  o.hidden = 32;
  o.intermediate = 64;
  o.vocab = 262144;
  o.heads = 2;
  o.head_dim = 16;
  o.kv_heads = 1;
  o.global_head_dim = 32;
  o.global_kv_heads = 1;
  o.window = 3;
  o.max_positions = 4096;
  o.seed = 11;
  o.shards = 1;
  for (char c : types) o.layer_types.push_back(c == 'f' ? LayerType::kFull : LayerType::kSliding);
  o.layers = static_cast<int>(o.layer_types.size());
  return o;
}

// 20 ids: text, an image of 2 x 3 blocks (96 x 144 pixels) framed by boi / eoi, text, 4 audio frames
// framed by boa / eoa, text.
struct MultimodalPrompt {
  std::vector<int32_t> ids;
  std::vector<uint8_t> rgb;
  std::vector<float> samples;
  std::vector<SoftSpan> spans;
  int64_t image_begin = 0;
};

inline MultimodalPrompt MakeMultimodalPrompt(uint32_t seed) {
  MultimodalPrompt p;
  std::mt19937 rng(seed);
  p.rgb.resize(96 * 144 * 3);
  for (uint8_t& v : p.rgb) v = static_cast<uint8_t>(rng() & 0xff);
  p.samples.resize(4 * 640);
  for (float& s : p.samples) s = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1000.0f;
  p.ids = {2, 17, 29, 255999};
  p.image_begin = static_cast<int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), 6, kImageId);
  p.ids.insert(p.ids.end(), {258882, 40, 256000});
  const int64_t audio_begin = static_cast<int64_t>(p.ids.size());
  p.ids.insert(p.ids.end(), 4, kAudioId);
  p.ids.insert(p.ids.end(), {258883, 51, 52});
  SoftSpan image;
  image.kind = SoftSpan::Kind::kImage;
  image.offset = p.image_begin;
  image.count = 6;
  image.image = ImageView{96, 144, p.rgb.data()};
  SoftSpan audio;
  audio.kind = SoftSpan::Kind::kAudio;
  audio.offset = audio_begin;
  audio.count = 4;
  audio.samples = p.samples.data();
  p.spans = {image, audio};
  return p;
}

// The same prompt with the image's last block (rows 48..95, columns 96..143) changed: on sliding layers
// only, the image's first soft token sees it.
inline MultimodalPrompt WithLastBlockChanged(MultimodalPrompt p) {
  for (int64_t r = 48; r < 96; ++r) {
    for (int64_t c = 96; c < 144; ++c) p.rgb[(r * 144 + c) * 3] ^= 0x80;
  }
  p.spans[0].image.rgb = p.rgb.data();
  p.spans[1].samples = p.samples.data();
  return p;
}

}  // namespace layerpipe::testing_util

#endif  // LAYERPIPE_TESTS_ENGINE_MULTIMODAL_TEST_UTIL_H_
