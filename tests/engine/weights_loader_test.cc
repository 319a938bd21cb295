// Loader error handling: every broken checkpoint gives an error naming the file and the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/model/bf16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model/safetensors.h"
#include "engine/model/tiled_rows.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

namespace fs = std::filesystem;

using testing_util::RewriteTensors;

absl::Status LoadAll(const std::string& dir) {
  auto c = LoadModelConfig(dir);
  if (!c.ok()) return c.status();
  return ModelWeights::Load(dir, *c, {0, c->num_layers, true, true}).status();
}

void ExpectMentions(const absl::Status& st, std::initializer_list<std::string> needles) {
  ASSERT_FALSE(st.ok());
  for (const std::string& n : needles) {
    EXPECT_NE(std::string(st.message()).find(n), std::string::npos) << "'" << n << "' not in: " << st;
  }
}

RandomCheckpointOptions SingleFile() {
  auto o = testing_util::SmallModel();
  o.shards = 1;
  return o;
}

TEST(WeightsLoaderTest, LoadsShardedAndSingleFileCheckpoints) {
  EXPECT_TRUE(LoadAll(testing_util::MakeCheckpoint("sharded", testing_util::SmallModel())).ok());
  const std::string single = testing_util::MakeCheckpoint("single", SingleFile());
  EXPECT_TRUE(fs::exists(single + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(single + "/model.safetensors.index.json"));
  EXPECT_TRUE(LoadAll(single).ok());
  auto flat = testing_util::SmallModel();
  flat.flat_config = true;
  EXPECT_TRUE(LoadAll(testing_util::MakeCheckpoint("flat", flat)).ok());
}

TEST(WeightsLoaderTest, LayerRangeOpensOnlyItsShards) {
  auto o = testing_util::SmallModel();
  o.shards = o.layers + 1;  // shard 1 = embedding, shard i+2 = layer i
  const std::string dir = testing_util::MakeCheckpoint("ranges", o);
  auto c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok());
  // Remove the shards of the embedding and of layer 0: a middle stage does not need them.
  fs::remove(dir + "/model-00001-of-00006.safetensors");
  fs::remove(dir + "/model-00002-of-00006.safetensors");
  auto mid = ModelWeights::Load(dir, *c, {2, 4, false, false});
  EXPECT_TRUE(mid.ok()) << mid.status();
  ExpectMentions(ModelWeights::Load(dir, *c, {0, 2, false, false}).status(), {"model-00002-of-00006.safetensors"});
  ExpectMentions(ModelWeights::Load(dir, *c, {4, 5, false, true}).status(), {"model-00001-of-00006.safetensors"});
}

TEST(WeightsLoaderTest, TruncatedFileNamesFileAndTensor) {
  const std::string dir = testing_util::MakeCheckpoint("trunc", SingleFile());
  const std::string path = dir + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 100);
  ExpectMentions(LoadAll(dir), {path, "tensor "});
  fs::resize_file(path, 5);
  ExpectMentions(LoadAll(dir), {path, "truncated"});
}

TEST(WeightsLoaderTest, CorruptHeaderIsAnError) {
  const std::string dir = testing_util::MakeCheckpoint("corrupt", SingleFile());
  const std::string path = dir + "/model.safetensors";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("#garbage#", 9);
  }
  ExpectMentions(LoadAll(dir), {path, "JSON"});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t huge = uint64_t{1} << 40;
    f.write(reinterpret_cast<const char*>(&huge), 8);
  }
  ExpectMentions(LoadAll(dir), {path, "header length"});
}

TEST(WeightsLoaderTest, MissingTensorIsNamed) {
  const std::string dir = testing_util::MakeCheckpoint("missing", SingleFile());
  RewriteTensors(dir + "/model.safetensors",
                 [](TensorBlob& b) { return b.name != "model.language_model.layers.3.mlp.up_proj.weight"; });
  ExpectMentions(LoadAll(dir), {"model.language_model.layers.3.mlp.up_proj.weight", "missing"});
}

// The embedders: loaded by the stage that embeds only; a config that declares them needs their tensors.
TEST(WeightsLoaderTest, EmbeddersAreLoadedByTheEmbeddingStageAndRequired) {
  RandomCheckpointOptions o = SingleFile();
  o.vocab = 262144;
  const std::string dir = testing_util::MakeCheckpoint("embedders", o);
  auto c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->vision.present && c->audio.present);
  auto first = ModelWeights::Load(dir, *c, {0, 2, /*embedding=*/true, false});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE((*first)->vision(), nullptr);
  EXPECT_EQ((*first)->vision()->patch_dense.cols, 48 * 48 * 3);
  EXPECT_EQ((*first)->vision()->pos_embedding.size(), size_t{1120 * 2} * 96);
  ASSERT_NE((*first)->audio_projection(), nullptr);
  EXPECT_EQ((*first)->audio_projection()->cols, 640);
  auto later = ModelWeights::Load(dir, *c, {2, 5, false, true});
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ((*later)->vision(), nullptr);
  EXPECT_EQ((*later)->audio_projection(), nullptr);
  RewriteTensors(dir + "/model.safetensors", [](TensorBlob& b) { return b.name != "model.vision_embedder.pos_norm.bias"; });
  ExpectMentions(LoadAll(dir), {"model.vision_embedder.pos_norm.bias", "missing"});
  // Without the embedding, a stage never opens them.
  EXPECT_TRUE(ModelWeights::Load(dir, *c, {2, 5, false, true}).ok());
}

TEST(WeightsLoaderTest, MisshapenTensorIsNamed) {
  const std::string dir = testing_util::MakeCheckpoint("shape", SingleFile());
  RewriteTensors(dir + "/model.safetensors", [](TensorBlob& b) {
    if (b.name == "model.language_model.layers.1.self_attn.k_proj.weight") b.shape = {b.shape[1], b.shape[0]};
    return true;
  });
  ExpectMentions(LoadAll(dir), {"model.language_model.layers.1.self_attn.k_proj.weight", "[96,64]", "[64,96]"});
}

TEST(WeightsLoaderTest, IndexPointingToAMissingShardIsAnError) {
  const std::string dir = testing_util::MakeCheckpoint("noshard", testing_util::SmallModel());
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  ExpectMentions(LoadAll(dir), {"model-00002-of-00002.safetensors"});
}

// F32 and F16 tensors load; values exactly representable in bf16 give bit-identical logits.
TEST(WeightsLoaderTest, F32AndF16TensorsGiveTheSameResults) {
  const std::string ref_dir = testing_util::MakeCheckpoint("dtype_ref", SingleFile());
  const std::string dir = testing_util::MakeCheckpoint("dtype", SingleFile());
  int n = 0;
  RewriteTensors(dir + "/model.safetensors", [&](TensorBlob& b) {
    const size_t count = b.bytes.size() / 2;
    const uint16_t* src = reinterpret_cast<const uint16_t*>(b.bytes.data());
    std::vector<uint8_t> out;
    if (n++ % 2 == 0) {
      out.resize(count * 4);
      for (size_t i = 0; i < count; ++i) {
        float f = Bf16ToF32(src[i]);
        std::memcpy(out.data() + 4 * i, &f, 4);
      }
      b.dtype = DType::kF32;
    } else {
      // bf16 values with small exponents are exact in f16 only sometimes; norms/scalars near 1 are.
      if (b.shape.size() != 1) return true;
      out.resize(count * 2);
      for (size_t i = 0; i < count; ++i) {
        uint16_t h = _cvtss_sh(Bf16ToF32(src[i]), 0);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      b.dtype = DType::kF16;
    }
    b.bytes = std::move(out);
    return true;
  });
  std::vector<int32_t> ids = {2, 10, 20, 30, 40, 50, 60, 70};
  auto a = Engine::Load(ref_dir, {});
  auto b = Engine::Load(dir, {});
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  auto la = (*a)->Score(ids);
  auto lb = (*b)->Score(ids);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(0, std::memcmp(la->data(), lb->data(), la->size() * 4));
}

TEST(WeightsLoaderTest, MissingConfigIsNamed) {
  const std::string dir = testing_util::TempDir("noconfig");
  ExpectMentions(LoadAll(dir), {dir + "/config.json"});
}

// Weights copied into huge pages are the mapped bytes, in memory of their own, and the engine's logits
// do not depend on where its weights live.
TEST(WeightsLoaderTest, HugePageCopiesHoldTheMappedBytes) {
  const std::string dir = testing_util::MakeCheckpoint("huge_pages", testing_util::SmallModel());
  auto c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  const WeightSelection all{0, c->num_layers, true, true};
  auto mapped = ModelWeights::Load(dir, *c, all, {.huge_pages = false});
  auto copied = ModelWeights::Load(dir, *c, all, {.huge_pages = true});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_TRUE(copied.ok()) << copied.status();
  auto same = [](const WeightMatrix& a, const WeightMatrix& b) {
    ASSERT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.cols, b.cols);
    EXPECT_NE(a.data, b.data);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u);
    EXPECT_EQ(a.format, b.format);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0);
  };
  same((*mapped)->embed_tokens(), (*copied)->embed_tokens());
  for (int l = 0; l < c->num_layers; ++l) {
    const LayerWeights &a = (*mapped)->layer(l), &b = (*copied)->layer(l);
    for (auto m : {&LayerWeights::q_proj, &LayerWeights::k_proj, &LayerWeights::o_proj, &LayerWeights::gate_proj,
                   &LayerWeights::up_proj, &LayerWeights::down_proj}) {
      same(a.*m, b.*m);
    }
    EXPECT_EQ(a.q_norm, b.q_norm);
  }
  std::vector<float> logits[2];
  for (bool huge : {false, true}) {
    EngineOptions o;
    o.precision = Precision::kFp32;
    o.huge_pages = huge;
    auto e = Engine::Load(dir, o);
    ASSERT_TRUE(e.ok()) << e.status();
    auto kv = (*e)->NewSequence();
    const std::vector<int32_t> ids = {2, 17, 33, 5, 9};
    StepInput in{kv.get(), ids};
    auto r = (*e)->Step({&in, 1});
    ASSERT_TRUE(r.ok()) << r.status();
    logits[huge] = std::move(r->front());
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// TileRowsInPlace puts every element where TiledOffset says, for partial row groups too.
TEST(WeightsLoaderTest, TiledOrderIsTheDocumentedOne) {
  for (int64_t rows : {1, 2, 3, 17, 48, 49, 100}) {
    for (int64_t cols : {2, 6, 32, 96}) {
      std::vector<uint16_t> m(rows * cols);
      for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint16_t>(i);
      std::vector<uint16_t> t = m;
      TileRowsInPlace(t.data(), rows, cols);
      std::vector<bool> seen(m.size(), false);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t at = TiledOffset(r, c, rows, cols);
          ASSERT_GE(at, 0);
          ASSERT_LT(at, rows * cols);
          EXPECT_EQ(t[at], m[r * cols + c]) << rows << "x" << cols << " (" << r << ", " << c << ")";
          seen[at] = true;
        }
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), true), rows * cols);
      // ReadRowF32 reads a tiled row back in column order (bits compared: these values include NaNs).
      const WeightMatrix tiled = WeightMatrix::Bf16(t.data(), rows, cols, WeightLayout::kTiled);
      std::vector<float> row(cols);
      for (int64_t r = 0; r < rows; ++r) {
        ReadRowF32(tiled, r, row.data());
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(std::bit_cast<uint32_t>(row[c]) >> 16, m[r * cols + c]) << rows << "x" << cols << " (" << r << ", " << c << ")";
        }
      }
      // A group's first pair of k: its rows' first two values back to back.
      const int64_t group = std::min(rows, kTileRows);
      for (int64_t i = 0; i < 2 * group; ++i) EXPECT_EQ(t[i], m[(i / 2) * cols + i % 2]);
    }
  }
}

// Asked to tile, the loader stores the layer projections of a huge-page copy tiled (the embedding
// stays row-major), with the checkpoint's values; a mapped load leaves them row-major. The engine
// tiles exactly where its CPU kernel reads tiled weights, and its logits are those of the row-major
// weights, bit for bit, in both precisions.
TEST(WeightsLoaderTest, TiledLayerMatricesHoldTheMappedValues) {
  const std::string dir = testing_util::MakeCheckpoint("tiled", testing_util::SmallModel());
  auto c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  const WeightSelection all{0, c->num_layers, true, true};
  auto mapped = ModelWeights::Load(dir, *c, all, {.huge_pages = false, .tile_layer_matrices = true});
  auto tiled = ModelWeights::Load(dir, *c, all, {.huge_pages = true, .tile_layer_matrices = true});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  EXPECT_FALSE((*mapped)->matrices_tiled());
  EXPECT_TRUE((*tiled)->matrices_tiled());
  // The embedding is the tied head: tiled too, its rows read back in row order for token lookups.
  const WeightMatrix &e_rm = (*mapped)->embed_tokens(), &e_t = (*tiled)->embed_tokens();
  EXPECT_FALSE(e_rm.tiled());
  ASSERT_TRUE(e_t.tiled());
  std::vector<float> row(e_t.cols), want(e_rm.cols);
  for (int64_t r = 0; r < e_t.rows; r += 7) {
    ReadRowF32(e_t, r, row.data());
    ReadRowF32(e_rm, r, want.data());
    ASSERT_EQ(row, want) << "embedding row " << r;
    for (int64_t col = 0; col < e_rm.cols; ++col) ASSERT_EQ(want[col], Bf16ToF32(e_rm.bf16()[r * e_rm.cols + col]));
  }
  for (int l = 0; l < c->num_layers; ++l) {
    const LayerWeights &a = (*mapped)->layer(l), &b = (*tiled)->layer(l);
    for (auto m : {&LayerWeights::q_proj, &LayerWeights::k_proj, &LayerWeights::v_proj, &LayerWeights::o_proj,
                   &LayerWeights::gate_proj, &LayerWeights::up_proj, &LayerWeights::down_proj}) {
      const WeightMatrix &rm = a.*m, &t = b.*m;
      if (rm.empty()) continue;
      EXPECT_FALSE(rm.tiled());
      ASSERT_EQ(t.tiled(), CanTile(rm)) << "layer " << l;
      ASSERT_EQ(rm.rows, t.rows);
      ASSERT_EQ(rm.cols, t.cols);
      for (int64_t r = 0; r < rm.rows; ++r) {
        for (int64_t col = 0; col < rm.cols; ++col) {
          ASSERT_EQ(t.bf16()[TiledOffset(r, col, t.rows, t.cols)], rm.bf16()[r * rm.cols + col])
              << "layer " << l << " (" << r << ", " << col << ")";
        }
      }
    }
  }
  for (Precision precision : {Precision::kBf16, Precision::kFp32}) {
    std::vector<float> logits[2];
    for (bool huge : {false, true}) {
      EngineOptions o;
      o.precision = precision;
      o.huge_pages = huge;
      auto e = Engine::Load(dir, o);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ((*e)->weights().matrices_tiled(), huge);
      auto kv = (*e)->NewSequence();
      const std::vector<int32_t> ids = {2, 17, 33, 5, 9, 250, 11, 40, 3};
      StepInput in{kv.get(), ids};
      auto r = (*e)->Step({&in, 1});
      ASSERT_TRUE(r.ok()) << r.status();
      logits[huge] = std::move(r->front());
    }
    EXPECT_EQ(logits[0], logits[1]) << PrecisionName(precision);
  }
}

}  // namespace
}  // namespace layerpipe
