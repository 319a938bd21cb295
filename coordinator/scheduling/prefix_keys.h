// Where the prefix cache may cut a prompt, and the name of each cut: every 256-token page boundary
// (kv::kPageTokens, so a full layer's pages below it are whole and shareable) that does not fall inside
// an image (its soft tokens see each other both ways on sliding layers, so they must run in one pass),
// up to the prompt's last token (which is always prefilled: it yields the first token's logits).
// A cut's digest chains SHA-256 over the ids before it and the bytes of every image and audio clip that
// starts before it, so two prompts share a name only when every input to the cut's KV is the same.
#ifndef LAYERPIPE_COORDINATOR_SCHEDULING_PREFIX_KEYS_H_
#define LAYERPIPE_COORDINATOR_SCHEDULING_PREFIX_KEYS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/soft_tokens.h"

namespace layerpipe {

struct PrefixCut {
  int64_t length = 0;  // positions before the cut
  std::string digest;  // 32 bytes
};

// The cuts of `prompt` (whose soft tokens `soft` fills; audio of samples_per_token samples a token), in
// increasing length.
std::vector<PrefixCut> PrefixCuts(const std::vector<int32_t>& prompt, const std::vector<SoftSpan>& soft,
                                  int64_t samples_per_token);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_SCHEDULING_PREFIX_KEYS_H_
