// media_probe FILE DECODED.raw PREPARED.raw: DecodeImage and PrepareImage of FILE (default limits),
// each written as int64 width, int64 height (little-endian) and the RGB bytes, for media_vs_pillow.py.
// On an error it prints "error: <message>" and exits 2, so the script can compare refusals too.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "engine/media/image.h"

namespace {

bool Write(const std::string& path, const layerpipe::RgbImage& image) {
  std::ofstream out(path, std::ios::binary);
  const int64_t header[2] = {image.width, image.height};
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(image.rgb.data()), static_cast<std::streamsize>(image.rgb.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: media_probe FILE DECODED.raw PREPARED.raw\n";
    return 1;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "media_probe: cannot read " << argv[1] << "\n";
    return 1;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const layerpipe::MediaLimits limits;
  auto decoded = layerpipe::DecodeImage(bytes, limits);
  if (!decoded.ok()) {
    std::cout << "error: " << decoded.status().message() << "\n";
    return 2;
  }
  auto prepared = layerpipe::PrepareImage(bytes, limits);
  if (!prepared.ok()) {
    std::cout << "error: " << prepared.status().message() << "\n";
    return 2;
  }
  if (!Write(argv[2], *decoded) || !Write(argv[3], *prepared)) {
    std::cerr << "media_probe: cannot write the output\n";
    return 1;
  }
  std::cout << "ok " << decoded->width << "x" << decoded->height << " -> " << prepared->width << "x"
            << prepared->height << "\n";
  return 0;
}
