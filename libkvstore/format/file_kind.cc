// RecognizeFileKind / NotSafetensorsMessage: the files mistaken for
// prompt-cache files, named from their first bytes.
#include "kvstore/file_kind.h"

#include <cstdint>
#include <cstring>

#include "kvstore/safetensors.h"
#include "kvstore/zstd_seekable.h"

namespace kvstore {
namespace {

uint64_t LoadLittleEndian(std::span<const std::byte> bytes, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

// True when the bytes pass the first checks of docs/format.md §3 (H1-H3,
// J1's '{'): a safetensors file, or a damaged one, but never another format.
bool CouldStartSafetensors(std::span<const std::byte> file) {
  if (file.size() < 9) return false;
  const uint64_t n = LoadLittleEndian(file, 8);
  return n <= kMaxSafetensorsHeaderSize && n <= file.size() - 8 && file[8] == std::byte{'{'};
}

bool StartsWith(std::span<const std::byte> file, std::string_view magic) {
  return file.size() >= magic.size() && std::memcmp(file.data(), magic.data(), magic.size()) == 0;
}

// JSON text: '{' or '[' first (after a UTF-8 BOM and whitespace), and no
// byte below 0x20 other than whitespace in the first 16 bytes.
bool LooksLikeJson(std::span<const std::byte> file) {
  const std::span<const std::byte> head = file.first(std::min<size_t>(file.size(), 16));
  size_t i = StartsWith(head, "\xEF\xBB\xBF") ? 3 : 0;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  for (size_t k = i; k < head.size(); ++k) {
    const char c = static_cast<char>(head[k]);
    if (static_cast<unsigned char>(c) < 0x20 && !space(c)) return false;
  }
  while (i < head.size() && space(static_cast<char>(head[i]))) ++i;
  return i < head.size() && (head[i] == std::byte{'{'} || head[i] == std::byte{'['});
}

// Inline code in messages.
std::string Command(std::string_view text) { return "`" + std::string(text) + "`"; }

}  // namespace

FileKind RecognizeFileKind(std::span<const std::byte> file) {
  if (CouldStartSafetensors(file)) return FileKind::kUnknown;
  if (IsBytePlaneContent(file)) return FileKind::kBytePlaneContent;
  if (IsZstdFrame(file)) return HasSeekTableFooter(file) ? FileKind::kSeekableZstd : FileKind::kZstdStream;
  if (StartsWith(file, "\x1F\x8B")) return FileKind::kGzip;
  if (file.size() >= 4 && LoadLittleEndian(file, 4) == kGgufMagic) return FileKind::kGguf;
  if (file.size() >= 4 && LoadLittleEndian(file, 4) == kLlamaStateMagic) return FileKind::kLlamaState;
  if (LooksLikeJson(file)) return FileKind::kJson;
  return FileKind::kUnknown;
}

std::string NotSafetensorsMessage(std::string_view path, FileKind kind) {
  const std::string p(path);
  std::string looks;
  switch (kind) {
    case FileKind::kUnknown: return "";
    case FileKind::kBytePlaneContent:
      looks = "a byte-plane compressed prompt cache unpacked by `zstd -d`, which cannot undo the byte planes "
              "(docs/format.md §6.2); give kvtool the compressed file as it is, or unpack it with " +
              Command("kvtool convert COMPRESSED -o OUT --decompress");
      break;
    case FileKind::kSeekableZstd:
      looks = "a compressed prompt-cache file; kvtool and kvstore.load read it as it is, and " +
              Command("kvtool convert " + p + " -o OUT --decompress") + " writes the plain safetensors file";
      break;
    case FileKind::kZstdStream:
      looks = "zstd-compressed data as the zstd tool writes it (kvstore's compressed files end with a seek "
              "table); decompress it with " + Command("zstd -d " + p) + " first";
      break;
    case FileKind::kGzip:
      looks = "gzip-compressed data; decompress it with " + Command("gzip -d " + p) + " first";
      break;
    case FileKind::kGguf:
      looks = "a GGUF model file, not a cache; a llama.cpp conversion takes it as the model: " +
              Command("kvtool convert STATE -o OUT --model " + p);
      break;
    case FileKind::kJson:
      looks = "JSON text, not a cache; a conversion takes a model's config.json as " + Command("--model") +
              " and a token list as " + Command("--tokens");
      break;
    case FileKind::kLlamaState:
      looks = "a llama.cpp sequence-state (slot) file; " + Command("kvtool inspect " + p) + " shows it and " +
              Command("kvtool convert " + p + " -o OUT --model MODEL") + " converts it (docs/llama-cpp.md)";
      break;
  }
  return p + ": not a safetensors file: it looks like " + looks;
}

}  // namespace kvstore
