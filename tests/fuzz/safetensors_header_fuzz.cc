// libFuzzer target: the safetensors header parser (SafetensorsFile::Open). The input is a whole file,
// [u64 header length][JSON header][tensor data]; it is written to a memfd and opened through
// /proc/self/fd, so the parser maps it exactly as it maps a checkpoint shard.
//
// Checked on every accepted file: each tensor's shape has non-negative dimensions, its byte count is
// elements × dtype size and fits in the file's data section, and all its bytes are read (a pointer past the
// mapping faults).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/model/safetensors.h"

namespace {

int MemFd() {
  static const int fd = [] {
    int f = memfd_create("safetensors_fuzz", MFD_CLOEXEC);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  return fd;
}

void Check(bool ok, const char* what, const std::string& tensor) {
  if (ok) return;
  std::fprintf(stderr, "safetensors_header_fuzz: tensor %s: %s\n", tensor.c_str(), what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = MemFd();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = layerpipe::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;

  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);  // accepted, so at least 8 bytes
  const uint64_t data_size = size - 8 - header_len;
  volatile uint8_t sink = 0;
  for (const auto& [name, t] : (*file)->tensors()) {
    Check(t.name == name, "name differs from its key", name);
    Check((*file)->Find(name) == &t, "Find does not return it", name);
    uint64_t elems = 1;
    for (int64_t d : t.shape) {
      Check(d >= 0, "negative dimension", name);
      elems *= static_cast<uint64_t>(d);
    }
    Check(elems * layerpipe::DTypeSize(t.dtype) == t.nbytes, "byte count is not elements × dtype size", name);
    Check(t.NumElements() >= 0 && static_cast<uint64_t>(t.NumElements()) == elems, "NumElements disagrees", name);
    Check(t.nbytes <= data_size, "more bytes than the data section", name);
    for (size_t i = 0; i < t.nbytes; ++i) sink = sink + t.data[i];
    (void)t.ShapeString();
    (void)layerpipe::DTypeName(t.dtype);
  }
  return 0;
}
