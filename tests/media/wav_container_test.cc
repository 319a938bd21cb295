// The WAV container as DecodeAudio reads it (engine/media/wav_chunks.h): the chunk table is walked by
// the project and libsndfile sees only the "fmt " chunk and the samples, so the metadata that hangs
// libsndfile 1.2.0 changes nothing; RIFX, RF64 and the streamed and never-closed data sizes decode as
// the plain file does; a table that does not fit is refused with the chunk named.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/media/audio.h"
#include "gtest/gtest.h"
#include "tests/media/media_writers.h"

namespace layerpipe {
namespace {

using media_test::ExpectInvalid;
using media_test::WritePcm16;
using media_test::WriteWav;

std::vector<int16_t> Ramp(int n) {
  std::vector<int16_t> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<int16_t>(i * 311 - 9000));
  return v;
}

void PutUint32Le(std::string* wav, size_t pos, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*wav)[pos + i] = static_cast<char>(v >> (8 * i));
}

// `wav` with `chunk` inserted at `at` (a chunk boundary), the RIFF size grown to match.
std::string WithChunkAt(std::string wav, size_t at, const std::string& chunk) {
  wav.insert(at, chunk);
  PutUint32Le(&wav, 4, static_cast<uint32_t>(wav.size() - 8));
  return wav;
}

std::string WithChunkBeforeData(const std::string& wav, const std::string& chunk) {
  const size_t data = wav.find("data");
  EXPECT_NE(data, std::string::npos);
  return WithChunkAt(wav, data, chunk);
}

std::vector<float> DecodeOk(const std::string& wav) {
  auto samples = DecodeAudio(wav, MediaLimits{});
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<float>{};
}

// Each of these LIST chunks fits in its file, and each made libsndfile 1.2.0's sf_open loop forever
// (wav_decode_fuzz, tests/fuzz/crashes/wav_decode_fuzz): an entry of 0xfffffff8 bytes (-8 once added
// to a 32-bit count), and a LIST whose type is not INFO, which libsndfile reads as an entry whose size
// is the 4 bytes after it (0xfffffff7, padded to 0xfffffff8). Were they parsed, this test would hang.
TEST(WavContainer, MetadataIsNotParsed) {
  const std::string pcm = WritePcm16(16000, 1, Ramp(300));
  const std::vector<float> plain = DecodeOk(pcm);
  ASSERT_EQ(plain.size(), 300u);
  const std::string title("LIST\x16\0\0\0INFOINAM\x0a\0\0\0a recorder", 30);
  const std::string entry_minus_eight("LIST\x10\0\0\0INFOI\xff\xff\xff\xf8\xff\xff\xff\xff\x75\x7a\x7a", 24);
  const std::string type_read_as_entry("LIST\x10\0\0\0\x01\0\xa4\0\xf7\xff\xff\xff\0\0\0\0\0\0\0\0", 24);
  const std::string odd_junk("junk\x03\0\0\0abc\0", 12);
  for (const std::string& chunk : {title, entry_minus_eight, type_read_as_entry, odd_junk}) {
    EXPECT_EQ(DecodeOk(WithChunkBeforeData(pcm, chunk)), plain) << chunk.substr(0, 4);
  }
  // The first "fmt " is the format (as libsndfile reads it): a second one, at 8 kHz, changes nothing.
  const std::string fmt = pcm.substr(pcm.find("fmt "), 24);
  std::string second_fmt = fmt;
  PutUint32Le(&second_fmt, 12, 8000);
  EXPECT_EQ(DecodeOk(WithChunkAt(pcm, pcm.size(), second_fmt)), plain);
  // And the first "data" chunk holds the samples.
  EXPECT_EQ(DecodeOk(WithChunkAt(pcm, pcm.size(), std::string("data\x04\0\0\0\x01\x02\x03\x04", 12))), plain);
}

TEST(WavContainer, BigEndianAndRf64DecodeAsThePlainFile) {
  std::vector<double> values;
  for (int i = 0; i < 700; ++i) values.push_back((i % 97) / 100.0 - 0.4);
  const std::vector<float> plain = DecodeOk(WriteWav(16000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_24, values));
  ASSERT_EQ(plain.size(), 700u);

  const std::string rifx = WriteWav(16000, 1, SF_FORMAT_WAV | SF_FORMAT_PCM_24 | SF_ENDIAN_BIG, values);
  ASSERT_EQ(rifx.substr(0, 4), "RIFX");
  EXPECT_EQ(DecodeOk(rifx), plain);

  // libsndfile writes RF64 with the data size in "ds64" and 0xffffffff in the "data" chunk; a chunk
  // after the samples shows that the size is taken from "ds64" rather than read to the end.
  const std::string rf64 = WriteWav(16000, 1, SF_FORMAT_RF64 | SF_FORMAT_PCM_24, values);
  ASSERT_EQ(rf64.substr(0, 4), "RF64");
  ASSERT_NE(rf64.find("ds64"), std::string::npos);
  ASSERT_EQ(rf64.substr(rf64.find("data") + 4, 4), "\xff\xff\xff\xff");
  EXPECT_EQ(DecodeOk(rf64), plain);
  EXPECT_EQ(DecodeOk(rf64 + std::string("junk\x06\0\0\0abcdef", 14)), plain);
}

TEST(WavContainer, DataSizesThatDoNotCountTheSamples) {
  const std::string pcm = WritePcm16(16000, 1, Ramp(100));
  const std::vector<float> plain = DecodeOk(pcm);
  const size_t data = pcm.find("data");
  ASSERT_NE(data, std::string::npos);
  // Streamed: 0xffffffff, read to the end.
  std::string streamed = pcm;
  PutUint32Le(&streamed, data + 4, 0xffffffff);
  EXPECT_EQ(DecodeOk(streamed), plain);
  // A recorder that never closed its file: RIFF size 8 and data size 0, read to the end.
  std::string never_closed = pcm;
  PutUint32Le(&never_closed, 4, 8);
  PutUint32Le(&never_closed, data + 4, 0);
  EXPECT_EQ(DecodeOk(never_closed), plain);
  // A data size of 0 in a closed file is no samples.
  std::string empty = pcm.substr(0, data + 8);
  PutUint32Le(&empty, 4, static_cast<uint32_t>(empty.size() - 8));
  PutUint32Le(&empty, data + 4, 0);
  ExpectInvalid(DecodeAudio(empty, MediaLimits{}).status(), "empty audio");
}

TEST(WavContainer, RefusesATableThatDoesNotFit) {
  const std::string pcm = WritePcm16(16000, 1, std::vector<int16_t>(100, 7));
  ExpectInvalid(DecodeAudio(pcm + std::string("junk\xe8\x03\0\0abc", 11), MediaLimits{}).status(),
                absl::StrFormat("WAV file: chunk \"junk\" of 1000 bytes at byte %d runs past the end of the file (%d "
                                "bytes)", pcm.size(), pcm.size() + 11));
  // The first LIST of this 108-byte file (found by wav_decode_fuzz) fits; the second claims 0xffff0010
  // bytes, and libsndfile 1.2.0 did not return from sf_open on it.
  const std::string list_past_the_end(
      "\x52\x49\x46\x46\x9c\x00\x00\x00\x57\x41\x56\x45\x66\x6d\x74\x20\x10\x00\x00\x00\x01\x00\x02\x00"
      "\x40\x1f\xdf\x00\x80\x4c\x49\x53\x54\x00\x08\x00\x4c\x49\x53\x54\x10\x00\x00\x00\x49\x4e\x46\xb1"
      "\xb6\xac\xb9\xab\xfc\x00\x09\x08\x66\x00\x08\x00\x4c\x49\x53\x54\x10\x00\xff\xff\xff\xff\xff\xff"
      "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
      "\xff\xff\xff\xff\xff\xff\xff\xff\xdf\xff\xff\xff",
      108);
  ExpectInvalid(DecodeAudio(list_past_the_end, MediaLimits{}).status(),
                "WAV file: chunk \"LIST\" of 4294901776 bytes at byte 60 runs past the end of the file (108 bytes)");
}

TEST(WavContainer, RefusesAFileWithoutFormatOrSamples) {
  const std::string pcm = WritePcm16(16000, 1, Ramp(10));
  std::string no_fmt = pcm;
  no_fmt.replace(no_fmt.find("fmt "), 4, "fmX ");
  ExpectInvalid(DecodeAudio(no_fmt, MediaLimits{}).status(), "WAV file: no \"fmt \" chunk");
  std::string no_data = pcm;
  no_data.replace(no_data.find("data"), 4, "dat@");
  ExpectInvalid(DecodeAudio(no_data, MediaLimits{}).status(), "WAV file: no \"data\" chunk");
  // A "fmt " chunk too short for libsndfile is its error, passed on.
  std::string short_fmt = pcm.substr(0, 12) + std::string("fmt \x04\0\0\0\x01\0\x01\0", 12) +
                          pcm.substr(pcm.find("data"));
  PutUint32Le(&short_fmt, 4, static_cast<uint32_t>(short_fmt.size() - 8));
  ExpectInvalid(DecodeAudio(short_fmt, MediaLimits{}).status(), "WAV file: ");
}

}  // namespace
}  // namespace layerpipe
