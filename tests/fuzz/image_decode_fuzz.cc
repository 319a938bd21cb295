// libFuzzer target: PrepareImage (DecodeImage, the EXIF orientation, the target size and the bicubic
// resize) on arbitrary bytes, i.e. the libpng, libjpeg and libexif use of engine/media and its own
// conversions. Seeds: corpus/image_decode_fuzz (make_corpus.py).
//
// The limits are the defaults but for the vision budget: 4 soft tokens instead of 280. With 280 every
// small input is upscaled to about 768x768, and that resize takes nearly all of the time (49 executions
// a second under the sanitizers, against several hundred); the resize runs the same code at any size.
// Likewise the decoded-pixel guard is 64 K pixels instead of 50 M: the fuzzer soon writes ~110-byte
// JPEGs whose frame header declares ~13 M pixels, which the decoder then fills (~2 s each under the
// sanitizers), and at a 1 M guard it settles on 6 x 64001 CMYK JPEGs whose resize (a 48-fold widening
// of every row) takes ~0.4 s each, a tenth of the corpus holding the rate near 180 a second. Larger
// declared sizes take the guard's refusal path, which this still covers; the decoders and the resize
// run the same code at any size.
//
// Checked: an error is InvalidArgument with a message; a success is RGB of its stated size whose sides
// are multiples of the 48-pixel block, within the budget.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/media/image.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "image_decode_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  layerpipe::MediaLimits limits;
  limits.max_soft_tokens = 4;
  limits.max_image_pixels = 1 << 16;
  auto prepared = layerpipe::PrepareImage(bytes, limits);
  if (!prepared.ok()) {
    Check(prepared.status().code() == absl::StatusCode::kInvalidArgument, "an error that is not InvalidArgument");
    Check(!prepared.status().message().empty(), "an error without a message");
    return 0;
  }
  Check(prepared->width > 0 && prepared->height > 0, "an empty image");
  Check(prepared->width % limits.block == 0 && prepared->height % limits.block == 0, "sides not in blocks");
  Check(layerpipe::ImageSoftTokens(*prepared, limits.block) <= limits.max_soft_tokens, "over the token budget");
  Check(prepared->rgb.size() == static_cast<size_t>(prepared->width * prepared->height * 3), "wrong pixel count");
  return 0;
}
