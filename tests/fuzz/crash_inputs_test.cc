// Every input of tests/fuzz/crashes/ (inputs on which a fuzz target once failed in project code; README.md
// there lists the defects) fed through the same public API as its fuzz target, in the ordinary build:
// each must now give the precise error, naming the field, instead of an exception, undefined behaviour
// or a huge allocation. A file added to crashes/ without a test here fails EveryCrashInputHasATest.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "engine/media/audio.h"
#include "engine/media/image.h"
#include "engine/media/media_limits.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/internal.pb.h"
#include "worker/frame_check.h"

namespace layerpipe {
namespace {

// Compiled in by tests/fuzz/tests.cmake.
const std::string kCrashes = LAYERPIPE_FUZZ_CRASHES_DIR;

std::string CrashPath(const std::string& name) { return kCrashes + "/" + name; }

std::string ReadCrash(const std::string& name) {
  std::ifstream in(CrashPath(name), std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << CrashPath(name);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every input checked below; EveryCrashInputHasATest compares it with the directory.
const std::set<std::string>& Covered() {
  static const std::set<std::string> covered = {
      "model_config_fuzz/crash-3a8130cc1378035d8abe9c8825102d0334ff82c2",
      "model_config_fuzz/model_type_not_a_string.json",
      "model_config_fuzz/rope_type_not_a_string.json",
      "tokenizer_json_fuzz/model_type_not_a_string.json",
      "tokenizer_json_fuzz/post_processor_type_not_a_string.json",
      "tokenizer_json_fuzz/template_ids_not_numbers.json",
      "tokenizer_json_fuzz/split_behavior_not_a_string.json",
      "tokenizer_json_fuzz/split_invert_not_a_boolean.json",
      "tokenizer_json_fuzz/template_ids_outside_the_vocabulary.json",
      "tokenizer_json_fuzz/vocab_id_2147483646_allocates_32GiB.json",
      "step_frame_fuzz/pos0_int64_max_overflows",
      "safetensors_header_fuzz/dimension_above_int64_max",
      "image_decode_fuzz/png_itxt_claims_1_8GB.png",
      "wav_decode_fuzz/wav_list_chunk_hang.wav",
      "wav_decode_fuzz/wav_float64_past_float_range.wav",
      "wav_decode_fuzz/wav_8960hz_half_sample_length.wav",
      "wav_decode_fuzz/wav_list_entry_minus_8_hang.wav",
      "wav_decode_fuzz/wav_list_type_read_as_entry_hang.wav",
  };
  return covered;
}

void ExpectStatus(const absl::Status& st, absl::StatusCode code, const std::string& part) {
  EXPECT_EQ(st.code(), code) << st;
  EXPECT_NE(std::string(st.message()).find(part), std::string::npos) << "'" << st.message() << "' lacks '" << part
                                                                     << "'";
}

TEST(FuzzCrashInputs, EveryCrashInputHasATest) {
  std::set<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(kCrashes)) {
    if (!entry.is_regular_file() || entry.path().extension() == ".md") continue;
    found.insert(std::filesystem::relative(entry.path(), kCrashes).generic_string());
  }
  for (const std::string& f : found) EXPECT_TRUE(Covered().count(f)) << f << " has no test in crash_inputs_test.cc";
  for (const std::string& f : Covered()) EXPECT_TRUE(found.count(f)) << f << " is missing from " << kCrashes;
}

// --- model_config_fuzz: ParseModelConfig -------------------------------------------------------------

absl::Status ParseConfigCrash(const std::string& name) {
  return ParseModelConfig(ReadCrash(name), "config.json").status();
}

TEST(FuzzCrashInputs, ConfigModelTypeNotAString) {
  // engine/model/config.cc: value("model_type", std::string()) threw type_error.302.
  ExpectStatus(ParseConfigCrash("model_config_fuzz/model_type_not_a_string.json"), absl::StatusCode::kInvalidArgument,
               "config.json: key \"model_type\" must be a string, got number 1");
}

TEST(FuzzCrashInputs, ConfigModelTypeNotAStringFoundByTheFuzzer) {
  ExpectStatus(ParseConfigCrash("model_config_fuzz/crash-3a8130cc1378035d8abe9c8825102d0334ff82c2"),
               absl::StatusCode::kInvalidArgument, "key \"model_type\" must be a string, got number 512");
}

TEST(FuzzCrashInputs, ConfigRopeTypeNotAString) {
  ExpectStatus(ParseConfigCrash("model_config_fuzz/rope_type_not_a_string.json"), absl::StatusCode::kInvalidArgument,
               "key \"rope_parameters.rope_type\" must be a string, got number 1");
}

// --- tokenizer_json_fuzz: Tokenizer::Load (FromJsonText) ---------------------------------------------

absl::Status LoadTokenizerCrash(const std::string& name) { return Tokenizer::Load(CrashPath(name)).status(); }

TEST(FuzzCrashInputs, TokenizerModelTypeNotAString) {
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/model_type_not_a_string.json"),
               absl::StatusCode::kInvalidArgument, "model.type must be a string, got number 5");
}

TEST(FuzzCrashInputs, TokenizerPostProcessorTypeNotAString) {
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/post_processor_type_not_a_string.json"),
               absl::StatusCode::kInvalidArgument, "post_processor.type must be a string, got number 1");
}

TEST(FuzzCrashInputs, TokenizerTemplateIdsNotNumbers) {
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/template_ids_not_numbers.json"),
               absl::StatusCode::kInvalidArgument,
               "post_processor.special_tokens.x.ids[0] must be an integer, got string \"y\"");
}

TEST(FuzzCrashInputs, TokenizerSplitBehaviorNotAString) {
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/split_behavior_not_a_string.json"),
               absl::StatusCode::kInvalidArgument, "pre_tokenizer Split behavior must be a string, got number 1");
}

TEST(FuzzCrashInputs, TokenizerSplitInvertNotABoolean) {
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/split_invert_not_a_boolean.json"),
               absl::StatusCode::kInvalidArgument, "pre_tokenizer Split invert must be a boolean, got number 1");
}

TEST(FuzzCrashInputs, TokenizerTemplateIdsOutsideTheVocabulary) {
  // Was accepted: Encode(text, true) returned -5 and 99999 with a vocabulary of one token.
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/template_ids_outside_the_vocabulary.json"),
               absl::StatusCode::kInvalidArgument,
               "post_processor.special_tokens.x.ids[0] = -5 is outside the vocabulary [0, 1)");
}

TEST(FuzzCrashInputs, TokenizerVocabIdNearInt32MaxIsRefusedWithoutAllocating) {
  // Was a 32 GiB id table from an 87-byte file.
  ExpectStatus(LoadTokenizerCrash("tokenizer_json_fuzz/vocab_id_2147483646_allocates_32GiB.json"),
               absl::StatusCode::kInvalidArgument,
               "model.vocab entry 'a' has id 2147483646, which leaves more than 1048576 ids without a token");
}

// --- step_frame_fuzz: StepFrame::ParseFromArray + CheckFrameContent ----------------------------------

TEST(FuzzCrashInputs, StepFramePos0NearInt64MaxDoesNotOverflow) {
  // worker/frame_check.cc: pos0 + ids_size - 1 overflowed int64 (UBSan) while formatting the error.
  const std::string bytes = ReadCrash("step_frame_fuzz/pos0_int64_max_overflows");
  internal::v1::StepFrame frame;
  ASSERT_TRUE(frame.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
  ASSERT_EQ(frame.slices_size(), 1);
  ASSERT_EQ(frame.slices(0).pos0(), INT64_MAX);
  ASSERT_EQ(frame.slices(0).ids_size(), 2);
  // The fuzz target's two shapes, as the first stage and as a later one.
  for (StageShape shape : {StageShape{3840, 262144, 131072}, StageShape{4, 300, 64}}) {
    for (bool first : {true, false}) {
      shape.first = first;
      int64_t rows = -1;
      ExpectStatus(CheckFrameContent(frame, shape, &rows), absl::StatusCode::kOutOfRange,
                   "positions 9223372036854775807..9223372036854775808 pass the model's limit of " +
                       std::to_string(shape.max_positions));
    }
  }
}

// --- safetensors_header_fuzz: SafetensorsFile::Open ---------------------------------------------------

TEST(FuzzCrashInputs, SafetensorsDimensionAboveInt64Max) {
  // Was accepted with a negative dimension: 2^63 wrapped through get<int64_t>() and skipped the size guard.
  auto file = SafetensorsFile::Open(CrashPath("safetensors_header_fuzz/dimension_above_int64_max"));
  ExpectStatus(file.status(), absl::StatusCode::kDataLoss,
               "tensor t: shape has more than 281474976710656 elements (dimension 0 of 1 is 9223372036854775808)");
}

// --- image_decode_fuzz / wav_decode_fuzz: PrepareImage, DecodeAudio -----------------------------------

TEST(FuzzCrashInputs, PngChunkClaimingGigabytesIsRefusedBeforeLibpngAllocatesIt) {
  // libpng 1.6.39 allocated an ancillary chunk's declared 1.8 GB before reading it (over its own limit it
  // only warns): the chunk lengths are now walked first.
  ExpectStatus(PrepareImage(ReadCrash("image_decode_fuzz/png_itxt_claims_1_8GB.png"), MediaLimits()).status(),
               absl::StatusCode::kInvalidArgument, "truncated PNG: chunk iTXt of 1828716628 bytes at byte 33");
}

// The WAV inputs that hung libsndfile 1.2.0 in sf_open: its LIST parser no longer sees them, as only
// the "fmt " chunk and the samples reach it (engine/media/wav_chunks.h); what each is now is asserted.
TEST(FuzzCrashInputs, WavChunkPastTheEndIsRefused) {
  // A LIST chunk of 0xffff0010 bytes in a 132-byte file.
  ExpectStatus(DecodeAudio(ReadCrash("wav_decode_fuzz/wav_list_chunk_hang.wav"), MediaLimits()).status(),
               absl::StatusCode::kInvalidArgument,
               "WAV file: chunk \"LIST\" of 4294901776 bytes at byte 60 runs past the end of the file (132 bytes)");
}

TEST(FuzzCrashInputs, WavListEntryPastItsListIsNotParsed) {
  // An INFO entry of 0xfffffff8 bytes in a 16-byte LIST; sf_open now returns, on the file's format.
  ExpectStatus(DecodeAudio(ReadCrash("wav_decode_fuzz/wav_list_entry_minus_8_hang.wav"), MediaLimits()).status(),
               absl::StatusCode::kInvalidArgument, "WAV file: File contains data in an unimplemented format");
}

TEST(FuzzCrashInputs, WavListTypeReadAsAnEntryIsNotParsed) {
  // A LIST whose type (01 00 a4 00, not INFO) libsndfile read as an entry of 0xfffffff7 bytes (found by
  // the fuzzer in fuzz_smoke, CI of 2026-12-07); sf_open now returns, on the first "fmt " (164 channels
  // at 0 Hz).
  ExpectStatus(DecodeAudio(ReadCrash("wav_decode_fuzz/wav_list_type_read_as_entry_hang.wav"), MediaLimits()).status(),
               absl::StatusCode::kInvalidArgument, "WAV file: Internal error : SF_INFO struct incomplete");
}

TEST(FuzzCrashInputs, WavWithSamplesPastFloatRangeIsRefused) {
  // Its float64 samples became infinities (UBSan); its chunk table is refused first, and non-finite
  // samples are refused too (media_test).
  ExpectStatus(DecodeAudio(ReadCrash("wav_decode_fuzz/wav_float64_past_float_range.wav"), MediaLimits()).status(),
               absl::StatusCode::kInvalidArgument,
               "WAV file: chunk \"????\" of 1879048192 bytes at byte 172 runs past the end of the file (182 bytes)");
}

TEST(FuzzCrashInputs, WavWhoseLengthIsHalfASampleAt16kHzDecodes) {
  // 49 frames at 8960 Hz, 87.5 samples at 16 kHz: the length wanted was rounded up to 88 while libsoxr
  // made 87, and DecodeAudio failed with an Internal error (fixed in ResampledLength; media_test's
  // HalfSampleLengthsComeOutAsLibsoxrRoundsThem holds it). Its broken INFO entry is not parsed.
  auto samples = DecodeAudio(ReadCrash("wav_decode_fuzz/wav_8960hz_half_sample_length.wav"), MediaLimits());
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->size(), 87u);
}

}  // namespace
}  // namespace layerpipe
