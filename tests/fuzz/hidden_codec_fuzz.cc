// libFuzzer target: the hidden-state codec (DecodeHidden, EncodeHidden). The input is
// [dtype: 1 byte][rows: int16 LE][hidden_size: int16 LE][payload]: DecodeHidden(dtype, payload, rows,
// hidden_size), the arguments a worker passes from a frame. 16-bit sizes cover the real range (rows are at
// most kMaxRowsPerFrame, 8192) and negative values without overflowing rows × hidden_size.
//
// Checked: DecodeHidden accepts exactly the payloads of rows × hidden_size values of a known dtype;
// f32 decodes bit for bit, bf16 to the value's upper half; EncodeHidden gives the payload back (NaNs
// quietened, as bf16.h says); and the payload read as floats encodes to bf16 (the AVX2 path for all
// but the last 15 values) exactly as the scalar F32ToBf16 does.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/bf16.h"
#include "transport/hidden_codec.h"

namespace {

using layerpipe::internal::v1::HiddenDType;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "hidden_codec_fuzz: %s\n", what);
  std::abort();
}

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const auto dtype = static_cast<HiddenDType>(static_cast<int8_t>(data[0]));
  const int64_t rows = static_cast<int16_t>(Load16(data + 1));
  const int64_t width = static_cast<int16_t>(Load16(data + 3));
  const std::string payload(reinterpret_cast<const char*>(data + 5), size - 5);

  const int64_t elem = layerpipe::HiddenDTypeBytes(dtype);
  const bool known = dtype == layerpipe::internal::v1::HIDDEN_F32 || dtype == layerpipe::internal::v1::HIDDEN_BF16;
  Check(known ? elem > 0 : elem == 0, "HiddenDTypeBytes");
  auto decoded = layerpipe::DecodeHidden(dtype, payload, rows, width);
  const bool fits = known && static_cast<int64_t>(payload.size()) == rows * width * elem;
  Check(decoded.ok() == fits, decoded.ok() ? "accepted a payload of the wrong size" : "refused a valid payload");
  if (!decoded.ok()) {
    Check(!decoded.status().message().empty(), "an error without a message");
  } else {
    const std::vector<float>& values = *decoded;
    const int64_t n = rows * width;
    Check(static_cast<int64_t>(values.size()) == n, "decoded the wrong number of values");
    std::string again;
    if (n >= 0) layerpipe::EncodeHidden(values.data(), rows, width, dtype, &again);
    if (dtype == layerpipe::internal::v1::HIDDEN_F32) {
      Check(n == 0 || std::memcmp(values.data(), payload.data(), payload.size()) == 0, "f32 not bit for bit");
      Check(again == payload, "f32 does not encode back to its payload");
    } else {
      Check(again.size() == payload.size(), "bf16 encodes to another size");
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = Load16(reinterpret_cast<const uint8_t*>(payload.data()) + 2 * i);
        uint32_t bits;
        std::memcpy(&bits, &values[i], 4);
        Check(bits == static_cast<uint32_t>(h) << 16, "bf16 is not the value's upper half");
        const bool nan = (h & 0x7fff) > 0x7f80;
        const uint16_t want = nan ? static_cast<uint16_t>(h | 0x0040) : h;
        Check(Load16(reinterpret_cast<const uint8_t*>(again.data()) + 2 * i) == want,
              "bf16 does not encode back to its payload");
      }
    }
  }

  // The payload as floats, encoded to bf16: the vector path must agree with the scalar one.
  const int64_t count = static_cast<int64_t>(payload.size() / 4);
  std::vector<float> floats(static_cast<size_t>(count));
  if (count > 0) std::memcpy(floats.data(), payload.data(), static_cast<size_t>(count) * 4);
  std::string bf16;
  layerpipe::EncodeHidden(floats.data(), 1, count, layerpipe::internal::v1::HIDDEN_BF16, &bf16);
  Check(static_cast<int64_t>(bf16.size()) == 2 * count, "bf16 encoding of the wrong size");
  for (int64_t i = 0; i < count; ++i) {
    Check(Load16(reinterpret_cast<const uint8_t*>(bf16.data()) + 2 * i) == layerpipe::F32ToBf16(floats[i]),
          "the AVX2 bf16 rounding differs from F32ToBf16");
  }
  auto back = layerpipe::DecodeHidden(layerpipe::internal::v1::HIDDEN_BF16, bf16, 1, count);
  Check(back.ok() && static_cast<int64_t>(back->size()) == count, "its own bf16 encoding does not decode");
  return 0;
}
