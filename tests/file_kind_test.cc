// RecognizeFileKind / NotSafetensorsMessage, and the errors a prompt-cache
// open gives for files of those kinds (each magic spelled as bytes).
#include "kvstore/file_kind.h"

#include "kvstore/prompt_cache_file.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::Bytes;
using ::kvstore::testing::HasCode;
using std::string_literals::operator""s;

struct Case {
  const char* name;
  std::string bytes;
  FileKind kind;
  const char* looks_like;  // what the message names
};

// A little-endian u64, as a safetensors header length.
std::string U64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return out;
}

std::vector<Case> Cases() {
  return {
      {"byte-plane content", "KVBP\x01\x02\0\0"s + U64(120) + "{\"__metadata__\":", FileKind::kBytePlaneContent,
       "it looks like a byte-plane compressed prompt cache unpacked by `zstd -d`"},
      // zstd -c of "hello\n": magic 28 B5 2F FD, no seek table at the end.
      {"zstd stream", "\x28\xB5\x2F\xFD\x24\x06\x31\0\0hello\n\x7C\x3A\x23\x13"s, FileKind::kZstdStream,
       "it looks like zstd-compressed data as the zstd tool writes it"},
      // gzip -c of "hello\n" (mtime 0).
      {"gzip", "\x1F\x8B\x08\0\0\0\0\0\0\x03\xCB\x48\xCD\xC9\xC9\xE7\x02\0\x20\x30\x3A\x36\x06\0\0\0"s, FileKind::kGzip,
       "it looks like gzip-compressed data; decompress it with `gzip -d "},
      {"gguf", "GGUF\x03\0\0\0\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0"s, FileKind::kGguf,
       "it looks like a GGUF model file, not a cache"},
      {"json object", "{\"architectures\": [\"LlamaForCausalLM\"]}\n", FileKind::kJson, "it looks like JSON text"},
      {"json list after a BOM and spaces", "\xEF\xBB\xBF  \n[1, 2, 3]", FileKind::kJson, "it looks like JSON text"},
      {"llama.cpp state", "qsgg\x02\0\0\0\x14\0\0\0"s, FileKind::kLlamaState,
       "it looks like a llama.cpp sequence-state (slot) file"},
  };
}

TEST(FileKindTest, EachMagicIsRecognised) {
  const std::vector<Case> cases = Cases();
  ASSERT_EQ(cases.size(), 7u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(RecognizeFileKind(Bytes(c.bytes)), c.kind);
    EXPECT_THAT(NotSafetensorsMessage("x.bin", c.kind),
                ::testing::StartsWith(std::string("x.bin: not a safetensors file: ") + c.looks_like));
  }
}

TEST(FileKindTest, MessagesNameTheCommand) {
  EXPECT_EQ(NotSafetensorsMessage("x.bin", FileKind::kLlamaState),
            "x.bin: not a safetensors file: it looks like a llama.cpp sequence-state (slot) file; "
            "`kvtool inspect x.bin` shows it and `kvtool convert x.bin -o OUT --model MODEL` converts it "
            "(docs/llama-cpp.md)");
  EXPECT_EQ(NotSafetensorsMessage("p.zst", FileKind::kZstdStream),
            "p.zst: not a safetensors file: it looks like zstd-compressed data as the zstd tool writes it "
            "(kvstore's compressed files end with a seek table); decompress it with `zstd -d p.zst` first");
  EXPECT_EQ(NotSafetensorsMessage("x", FileKind::kUnknown), "");
}

TEST(FileKindTest, SafetensorsStartsAndOtherBytesAreUnknown) {
  // A header length of 0x8B1F spells gzip's magic: a safetensors start wins.
  std::string gzip_like = U64(0x8B1F) + "{" + std::string(0x8B1F - 1, ' ');
  EXPECT_EQ(RecognizeFileKind(Bytes(gzip_like)), FileKind::kUnknown);
  // ... and so does a header length whose low byte is '{'.
  std::string brace = U64(0x7B) + "{" + std::string(0x7A, ' ');
  EXPECT_EQ(RecognizeFileKind(Bytes(brace)), FileKind::kUnknown);
  EXPECT_EQ(RecognizeFileKind(Bytes("this is not a safetensors file at all")), FileKind::kUnknown);
  EXPECT_EQ(RecognizeFileKind(Bytes("")), FileKind::kUnknown);
  EXPECT_EQ(RecognizeFileKind(Bytes("\x1F")), FileKind::kUnknown);
  // JSON-looking text with a NUL in its first bytes is not JSON.
  EXPECT_EQ(RecognizeFileKind(Bytes("{\"a\0\0\0\0\0\0\0\0\0"s)), FileKind::kUnknown);
}

// Opening each kind as a prompt cache fails with the message (Corruption, as
// the safetensors error it replaces; NotSupported for a llama.cpp state,
// which kvtool reads with other commands).
TEST(FileKindTest, PromptCacheOpenNamesTheKind) {
  std::unique_ptr<Env> env = NewMemEnv();
  size_t checked = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_OK(WriteStringAtomic(env.get(), "/x.bin", Bytes(c.bytes)));
    const StatusCode code = c.kind == FileKind::kLlamaState ? StatusCode::kNotSupported : StatusCode::kCorruption;
    const std::string want = std::string("/x.bin: not a safetensors file: ") + c.looks_like;
    EXPECT_THAT(ReadPromptCacheInfo(env.get(), "/x.bin"), HasCode(code, want));
    EXPECT_THAT(LoadPromptCache(env.get(), "/x.bin"), HasCode(code, want));
    EXPECT_THAT(VerifyPromptCacheFile(env.get(), "/x.bin"), HasCode(code, want));
    ++checked;
  }
  EXPECT_EQ(checked, 7u);
  // Unrecognised bytes keep the safetensors rule they break.
  ASSERT_OK(WriteStringAtomic(env.get(), "/t", Bytes("this is not a safetensors file at all")));
  EXPECT_THAT(ReadPromptCacheInfo(env.get(), "/t"), HasCode(StatusCode::kResourceExhausted, "/t: safetensors H2"));
}

// A compressed prompt cache whose seek table is damaged is reported as such,
// not as a zstd stream: its footer is still kvstore's.
TEST(FileKindTest, DamagedContainerKeepsItsError) {
  std::unique_ptr<Env> env = NewMemEnv();
  SavePromptCacheOptions zstd;
  zstd.compression_level = 1;
  ASSERT_OK(SavePromptCache(env.get(), "/c", testing::SmallCache(), {}, zstd));
  std::vector<std::byte> bytes = testing::FileBytes(env.get(), "/c");
  ASSERT_EQ(RecognizeFileKind(bytes), FileKind::kSeekableZstd);
  bytes[bytes.size() - 9] ^= std::byte{0x40};  // the footer's frame count
  ASSERT_OK(WriteStringAtomic(env.get(), "/c", bytes));
  Result<PromptCacheInfo> info = ReadPromptCacheInfo(env.get(), "/c");
  EXPECT_THAT(info, HasCode(StatusCode::kCorruption, "/c: zstd seek table"));
  EXPECT_THAT(std::string(info.status().message()), ::testing::Not(::testing::HasSubstr("not a safetensors")));
  EXPECT_THAT(NotSafetensorsMessage("/c", FileKind::kSeekableZstd),
              ::testing::HasSubstr("it looks like a compressed prompt-cache file; kvtool and kvstore.load read it"));
}

}  // namespace
}  // namespace kvstore
