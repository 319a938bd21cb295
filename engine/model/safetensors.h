// Memory-mapped safetensors checkpoints: one file, or shards listed in model.safetensors.index.json.
#ifndef LAYERPIPE_ENGINE_MODEL_SAFETENSORS_H_
#define LAYERPIPE_ENGINE_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/huge_pages.h"

namespace layerpipe {

// Floating dtypes hold weights; the integer ones hold a quantized checkpoint's packed values and shapes
// (engine/model/compressed_tensors.h).
enum class DType { kBF16, kF16, kF32, kI32, kI64 };

// Whether a tensor of `d` holds real numbers (what norms, scalars and unquantized matrices need).
inline bool IsFloatDType(DType d) { return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32; }

const char* DTypeName(DType d);
size_t DTypeSize(DType d);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping
  size_t nbytes = 0;
  std::string file;  // for error messages

  int64_t NumElements() const;
  std::string ShapeString() const;
};

// Read-only mmap of a whole file. Pages are faulted in on first touch, so mapping a 24 GB checkpoint
// costs nothing until a layer's tensors are read.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class SafetensorsFile {
 public:
  // Parses and bounds-checks the header; every error names the file (and the tensor).
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const TensorInfo* Find(std::string_view name) const;
  const std::map<std::string, TensorInfo, std::less<>>& tensors() const { return tensors_; }
  const MappedFile& mapping() const { return *file_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
};

// All tensors of a checkpoint directory. With an index, only the shards that hold a wanted tensor are
// opened, so a worker serving a layer range maps only what it needs.
class Checkpoint {
 public:
  using NameFilter = std::function<bool(std::string_view)>;
  // huge_pages: copy the wanted tensors of each shard into anonymous memory in huge pages
  // (engine/model/huge_pages.h) and let the page cache drop the file's pages; otherwise they are read
  // in place from the mapping.
  // in_place (optional): wanted tensors that stay in the mapping even with huge_pages, and are not
  // paged in at load: a reader that reads them once (quantization at load) and then releases them
  // (ReleasePages).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir, const NameFilter& wanted,
                                                          bool huge_pages = false, const NameFilter& in_place = nullptr);

  const TensorInfo* Find(std::string_view name) const;
  bool Has(std::string_view name) const { return Find(name) != nullptr; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
  // With huge pages: the copies and what they point into.
  std::vector<std::unique_ptr<HugePageBuffer>> buffers_;
  std::deque<TensorInfo> copies_;
};

// Drops the pages of a tensor read in place from this process's memory (they fault back in from the
// file if it is read again): what quantization at load does once a matrix is quantized, so that a
// worker's resident weights are the quantized bytes.
void ReleasePages(const TensorInfo& t);

// One tensor to be written by WriteSafetensors.
struct TensorBlob {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

absl::Status WriteSafetensors(const std::string& path, const std::vector<const TensorBlob*>& tensors);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_SAFETENSORS_H_
