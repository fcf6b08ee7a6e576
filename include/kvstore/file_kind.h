// Naming the files people mistake for prompt-cache files: a byte-plane file
// unpacked by `zstd -d`, a `.zst` the zstd tool made, gzip, a GGUF model, a
// JSON file, a llama.cpp sequence-state file. PromptCacheReader::Open (and so
// every whole-file function, kvtool and the Python package) uses this when a
// file fails as safetensors, so the error says what the file looks like and
// which command handles it instead of quoting the safetensors rule it broke.
//
// Thread safety: pure functions.
#ifndef KVSTORE_FILE_KIND_H_
#define KVSTORE_FILE_KIND_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvstore {

// The magics of the kinds named by their first four bytes, as little-endian
// u32s (the engines' readers check them too).
inline constexpr uint32_t kGgufMagic = 0x46554747;        // "GGUF"
inline constexpr uint32_t kLlamaStateMagic = 0x67677371;  // 'ggsq'

enum class FileKind {
  kUnknown,           // none below: a safetensors file, or something unrecognised
  kBytePlaneContent,  // "KVBP" 01 02 00 00: a byte-plane container after `zstd -d` (docs/format.md §6.2)
  kSeekableZstd,      // a zstd frame and the seek table's footer: kvstore's compressed container (§6)
  kZstdStream,        // a zstd frame without that footer (the zstd tool's output)
  kGzip,              // 1F 8B
  kGguf,              // "GGUF": a llama.cpp model file
  kJson,              // '{' or '[' after optional whitespace (and UTF-8 BOM), no NUL in the first bytes
  kLlamaState,        // "ggsq" as a little-endian u32: llama.cpp sequence state (§7)
};

// What `file` (its whole bytes: the zstd check reads the last 4) looks like.
// Looks at the first 16 bytes, and only when they cannot start a safetensors
// file (a header length over the limit or past the end, or no '{' after
// it), so a safetensors file whose header length happens to spell a magic
// is never misnamed: kUnknown then.
FileKind RecognizeFileKind(std::span<const std::byte> file);

// "<path>: not a safetensors file: it looks like <what>; <what to do>", the
// advice naming `path` in the command that handles such a file, e.g.
// "x.bin: not a safetensors file: it looks like a llama.cpp sequence-state
// (slot) file; `kvtool inspect x.bin` shows it and `kvtool convert x.bin -o
// OUT --model MODEL` converts it (docs/llama-cpp.md)". Empty for kUnknown.
std::string NotSafetensorsMessage(std::string_view path, FileKind kind);

}  // namespace kvstore

#endif  // KVSTORE_FILE_KIND_H_
