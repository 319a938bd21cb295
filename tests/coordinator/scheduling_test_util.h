// Requests and a small model config for the scheduling unit tests.
#ifndef LAYERPIPE_TESTS_COORDINATOR_SCHEDULING_TEST_UTIL_H_
#define LAYERPIPE_TESTS_COORDINATOR_SCHEDULING_TEST_UTIL_H_

#include <memory>
#include <vector>

#include "coordinator/request.h"
#include "engine/model/config.h"
#include "nlohmann/json.hpp"

namespace layerpipe::testing_scheduling {

// 4 layers (sliding, sliding, sliding, full), window 8, 2 KV heads x 16 (full: 1 x 32).
inline ModelConfig SmallConfig() {
  nlohmann::json c = {{"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"vocab_size", 1000},
                      {"num_hidden_layers", 4},
                      {"num_attention_heads", 4},
                      {"head_dim", 16},
                      {"num_key_value_heads", 2},
                      {"global_head_dim", 32},
                      {"num_global_key_value_heads", 1},
                      {"layer_types", {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}},
                      {"attention_k_eq_v", true},
                      {"sliding_window", 8},
                      {"max_position_embeddings", 4096}};
  return *ParseModelConfig(c.dump(), "test");
}

inline std::shared_ptr<Request> MakeRequest(uint64_t id, int prompt_tokens, int max_new_tokens = 4,
                                            RequestKind kind = RequestKind::kGenerate) {
  auto r = std::make_shared<Request>();
  r->id = id;
  r->kind = kind;
  for (int i = 0; i < prompt_tokens; ++i) r->prompt.push_back(2 + i % 50);
  r->max_new_tokens = max_new_tokens;
  return r;
}

// A request admitted and prefilled, waiting to feed its next decode token.
inline std::shared_ptr<Request> Decoding(uint64_t id, int prompt_tokens, int generated) {
  auto r = MakeRequest(id, prompt_tokens, generated + 4);
  r->state = RequestState::kDecoding;
  for (int i = 0; i < generated; ++i) r->generated.push_back(100 + i);
  r->sent = r->fed = r->known() - 1;
  return r;
}

inline std::shared_ptr<Request> Prefilling(uint64_t id, int prompt_tokens) {
  auto r = MakeRequest(id, prompt_tokens);
  r->state = RequestState::kPrefilling;
  return r;
}

}  // namespace layerpipe::testing_scheduling

#endif  // LAYERPIPE_TESTS_COORDINATOR_SCHEDULING_TEST_UTIL_H_
