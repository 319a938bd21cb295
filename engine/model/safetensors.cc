#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "nlohmann/json.hpp"
#include "common/json_shown.h"

namespace layerpipe {
namespace {

// Reads every page of [data, data + n) so that the mapping is backed by memory before the first step
// needs it (the kernel reads ahead on the madvise hint).
void PageIn(const uint8_t* data, size_t n) {
  if (n == 0) return;
  const size_t page = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  madvise(reinterpret_cast<void*>(begin), reinterpret_cast<uintptr_t>(data) + n - begin, MADV_WILLNEED);
  volatile uint8_t sink = 0;
  for (size_t off = 0; off < n; off += page) sink = sink + data[off];
  sink = sink + data[n - 1];
}

using json = nlohmann::json;

// Tensors in a huge-page copy start on 64-byte boundaries, as vector loads like.
size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

absl::Status ReadFully(int fd, uint8_t* out, size_t n, off_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t got = pread(fd, out, std::min<size_t>(n, size_t{1} << 30), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::DataLossError(absl::StrCat(path, ": read failed at offset ", offset, ": ",
                                              got < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    out += got;
    offset += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

// A header larger than this is corrupt, not a checkpoint (the 12B's is ~100 KB).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// Elements one tensor may have: 2^48 (half a petabyte of BF16).
constexpr uint64_t kMaxElements = uint64_t{1} << 48;


absl::StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "F32") return DType::kF32;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", s, " (expected BF16, F16, F32, I32 or I64)"));
}

}  // namespace

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "?";
}

size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": stat failed: ", std::strerror(e)));
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(e)));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  auto bad = [&](const std::string& msg) { return absl::DataLossError(absl::StrCat(path, ": ", msg)); };
  const MappedFile& m = **mapped;
  if (m.size() < 8) return bad(absl::StrCat("truncated: ", m.size(), " bytes, no safetensors header"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, m.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > m.size() - 8) {
    return bad(absl::StrCat("header length ", header_len, " exceeds the file size ", m.size(),
                            " (truncated or not a safetensors file)"));
  }
  json header = json::parse(m.data() + 8, m.data() + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  const uint8_t* base = m.data() + 8 + header_len;
  const uint64_t data_size = m.size() - 8 - header_len;

  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  // Not a structured binding: clang before 16 cannot capture one in the lambda below.
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& entry = item.value();
    if (name == "__metadata__") continue;
    auto tbad = [&bad, &name](const std::string& msg) { return bad(absl::StrCat("tensor ", name, ": ", msg)); };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return tbad("header entry lacks dtype, shape or data_offsets");
    }
    if (!entry["dtype"].is_string()) return tbad("dtype is not a string");
    auto dtype = ParseDType(entry["dtype"].get<std::string>());
    if (!dtype.ok()) return tbad(std::string(dtype.status().message()));
    TensorInfo t;
    t.name = name;
    t.dtype = *dtype;
    t.file = path;
    const json& shape = entry["shape"];
    if (!shape.is_array()) return tbad("shape is not a list");
    // Every dimension, and the product of the non-zero ones, is at most kMaxElements, so that neither
    // the element count nor any product of dimensions a caller forms can overflow int64.
    uint64_t elems = 1, nonzero = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      const json& d = shape[i];
      if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0)) {
        return tbad(absl::StrCat("shape[", i, "] is not a non-negative integer: ", Shown(d)));
      }
      const uint64_t v = d.is_number_unsigned() ? d.get<uint64_t>() : static_cast<uint64_t>(d.get<int64_t>());
      if (v > kMaxElements || (v > 0 && nonzero > kMaxElements / v)) {
        return tbad(absl::StrCat("shape has more than ", kMaxElements, " elements (dimension ", i, " of ", shape.size(),
                                 " is ", v, ")"));
      }
      if (v > 0) nonzero *= v;
      elems *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const json& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return tbad("data_offsets must be two non-negative integers");
    }
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return tbad(absl::StrCat("data [", begin, ", ", end, ") lies outside the file's ", data_size,
                               " data bytes (truncated file?)"));
    }
    if (end - begin != elems * DTypeSize(t.dtype)) {
      return tbad(absl::StrCat("holds ", end - begin, " bytes but shape ", t.ShapeString(), " of ",
                               DTypeName(t.dtype), " needs ", elems * DTypeSize(t.dtype)));
    }
    t.data = base + begin;
    t.nbytes = end - begin;
    file->tensors_.emplace(name, std::move(t));
  }
  file->file_ = std::move(*mapped);
  return file;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir, const NameFilter& wanted,
                                                              bool huge_pages, const NameFilter& in_place) {
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  ckpt->dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string, std::less<>> index_map;  // tensor -> shard
  if (std::ifstream in(index_path, std::ios::binary); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    json idx = json::parse(ss.str(), nullptr, false);
    if (idx.is_discarded() || !idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object()) {
      return absl::DataLossError(absl::StrCat(index_path, ": not a JSON object with a \"weight_map\""));
    }
    std::set<std::string> needed;
    for (auto& [name, shard] : idx["weight_map"].items()) {
      if (!shard.is_string()) {
        return absl::DataLossError(absl::StrCat(index_path, ": weight_map entry ", name, " is not a file name"));
      }
      std::string s = shard.get<std::string>();
      if (s.find('/') != std::string::npos) {
        return absl::DataLossError(absl::StrCat(index_path, ": shard name ", s, " must be a plain file name"));
      }
      index_map.emplace(name, s);
      if (wanted(name)) needed.insert(s);
    }
    shard_names.assign(needed.begin(), needed.end());
  } else {
    shard_names.push_back("model.safetensors");
  }
  for (size_t i = 0; i < shard_names.size(); ++i) {
    const std::string& shard = shard_names[i];
    auto f = SafetensorsFile::Open(dir + "/" + shard);
    if (!f.ok()) return f.status();
    size_t wanted_bytes = 0, copy_bytes = 0, all_bytes = 0;
    const auto read_start = std::chrono::steady_clock::now();
    std::vector<const TensorInfo*> mine;
    for (const auto& [name, info] : (*f)->tensors()) {
      all_bytes += info.nbytes;
      if (!wanted(name)) continue;
      auto it = index_map.find(name);
      if (!index_map.empty() && (it == index_map.end() || it->second != shard)) continue;
      wanted_bytes += info.nbytes;
      if (in_place && in_place(name)) {
        ckpt->by_name_.emplace(info.name, &info);
        continue;
      }
      mine.push_back(&info);
      copy_bytes += RoundUp64(info.nbytes);
    }
    std::string where = "in place";
    if (huge_pages && !mine.empty()) {
      auto buffer = HugePageBuffer::Allocate(copy_bytes);
      if (!buffer.ok()) return buffer.status();
      // Read with pread rather than copied from the mapping: no page faults on the file's pages.
      const MappedFile& mapping = (*f)->mapping();
      const int fd = ::open(mapping.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return absl::NotFoundError(absl::StrCat(mapping.path(), ": cannot open: ", std::strerror(errno)));
      size_t offset = 0;
      absl::Status read_status;
      for (const TensorInfo* info : mine) {
        TensorInfo& copy = ckpt->copies_.emplace_back(*info);
        copy.data = (*buffer)->data() + offset;
        read_status = ReadFully(fd, (*buffer)->data() + offset, info->nbytes,
                                static_cast<off_t>(info->data - mapping.data()), mapping.path());
        if (!read_status.ok()) break;
        offset += RoundUp64(info->nbytes);
        ckpt->by_name_.emplace(copy.name, &copy);
      }
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the copy is what is read from now on
      ::close(fd);
      if (!read_status.ok()) return read_status;
      where = absl::StrFormat("copied, %.0f of %.0f MiB in huge pages", (*buffer)->huge_bytes() / 1048576.0,
                              (*buffer)->size() / 1048576.0);
      ckpt->buffers_.push_back(std::move(*buffer));
    } else {
      for (const TensorInfo* info : mine) {
        ckpt->by_name_.emplace(info->name, info);
        PageIn(info->data, info->nbytes);
      }
    }
    // One line per shard, so that the load of a large checkpoint can be followed; the pages are read
    // here, at load, rather than by the first request.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - read_start).count();
    LP_LOG(INFO) << absl::StrFormat(
        "read %s (shard %zu of %zu): %zu tensors, %.2f of its %.2f GB in %.2f s (%.2f GB/s), %s", shard, i + 1,
        shard_names.size(), mine.size(), wanted_bytes / 1e9, all_bytes / 1e9, seconds,
        seconds > 0 ? wanted_bytes / 1e9 / seconds : 0.0, where);
    ckpt->files_.push_back(std::move(*f));
  }
  for (const auto& [name, shard] : index_map) {
    if (wanted(name) && !ckpt->by_name_.count(name)) {
      return absl::DataLossError(
          absl::StrCat(dir, "/", shard, ": tensor ", name, " is listed in the index but missing from the shard"));
    }
  }
  return ckpt;
}

void ReleasePages(const TensorInfo& t) {
  if (t.nbytes == 0) return;
  // Whole pages only: a page shared with a neighbouring tensor would fault back in at its next read.
  const uintptr_t page = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(t.data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(t.data) + t.nbytes) & ~(page - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

const TensorInfo* Checkpoint::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<const TensorBlob*>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorBlob* t : tensors) {
    header[t->name] = {{"dtype", DTypeName(t->dtype)}, {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string h = header.dump();
  // Data starts 8-byte aligned so mapped tensors are aligned.
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create"));
  uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const TensorBlob* t : tensors) {
    out.write(reinterpret_cast<const char*>(t->bytes.data()), static_cast<std::streamsize>(t->bytes.size()));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed (disk full?)"));
  return absl::OkStatus();
}

}  // namespace layerpipe
