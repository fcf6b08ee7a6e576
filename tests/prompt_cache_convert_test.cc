// Streaming saves, layer-by-layer conversions and container transcoding
// (docs/format.md §5.5 and §6): same bytes as an in-memory save, input
// digests checked on the bytes copied, byte-exact container round trips,
// failures that leave the output untouched.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "kvstore/cache_convert.h"
#include "kvstore/cache_diff.h"
#include "kvstore/prompt_cache.h"
#include "kvstore/quantized_kv_cache.h"
#include "prompt_cache_testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::FileBytes;
using ::kvstore::testing::Fingerprint;
using ::kvstore::testing::HasCode;
using ::kvstore::testing::SmallCache;

// Two KVCache layers of BF16 ~N(0,1) values and a quantized one.
PromptCache BiggerCache() {
  PromptCache cache;
  for (int i = 0; i < 3; ++i) {
    auto kv = std::make_shared<KVCache>();
    EXPECT_OK(kv->UpdateAndFetch(testing::RandomArray(DType::kBF16, {1, 4, 300, 64}, 100 + i),
                                 testing::RandomArray(DType::kBF16, {1, 4, 300, 64}, 200 + i)));
    if (i == 2) {
      auto q = kv->ToQuantized(64, 4);
      EXPECT_OK(q);
      cache.push_back(std::shared_ptr<Cache>(std::move(q).value()));
    } else {
      cache.push_back(kv);
    }
  }
  return cache;
}

std::vector<std::string> Fingerprints(const PromptCache& cache) {
  std::vector<std::string> out;
  for (const auto& c : cache) out.push_back(Fingerprint(*c));
  return out;
}

SavePromptCacheOptions Compressed(ZstdCodec codec = ZstdCodec::kZstd) {
  SavePromptCacheOptions o;
  o.compression_level = 3;
  o.codec = codec;
  o.frame_size = 64 * 1024;
  return o;
}

TEST(StreamingSaveTest, SameBytesAsAnInMemorySave) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = BiggerCache();
  for (const SavePromptCacheOptions& options : {SavePromptCacheOptions{}, Compressed()}) {
    ASSERT_OK(SavePromptCache(env.get(), "/a", cache, {{"model", "m"}}, options));
    std::vector<int> calls(cache.size(), 0);
    LayerSource source = [&](size_t i) -> Result<std::shared_ptr<const Cache>> {
      ++calls[i];
      return std::shared_ptr<const Cache>(cache[i]->Copy());  // a fresh object every time
    };
    ASSERT_OK(SavePromptCache(env.get(), "/b", cache.size(), source, {{"model", "m"}}, options));
    EXPECT_EQ(FileBytes(env.get(), "/a"), FileBytes(env.get(), "/b"));
    // Planned once, written once per element size present in the layer
    // (the quantized layer's U32 codes and BF16 scales are written apart;
    // the last layer planned is still at hand for the first write).
    EXPECT_EQ(calls, std::vector<int>(3, 2));
  }
}

TEST(StreamingSaveTest, PlainSavesAreDeterministicAndVerify) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = BiggerCache();
  ASSERT_OK(SavePromptCache(env.get(), "/a", cache, {}));
  ASSERT_OK(SavePromptCache(env.get(), "/b", cache, {}));
  EXPECT_EQ(FileBytes(env.get(), "/a"), FileBytes(env.get(), "/b"));
  ASSERT_OK_AND_ASSIGN(VerifyReport report, VerifyPromptCacheFile(env.get(), "/a"));
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.bytes_hashed, (*ReadPromptCacheInfo(env.get(), "/a")).tensor_bytes);
}

// The compressed form holds the plain file byte for byte (its header in a
// raw frame written last), for both codecs.
TEST(StreamingSaveTest, CompressedSavesHoldThePlainFile) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = BiggerCache();
  ASSERT_OK(SavePromptCache(env.get(), "/p", cache, {{"model", "m"}}));
  for (ZstdCodec codec : {ZstdCodec::kZstd, ZstdCodec::kBytePlane}) {
    SCOPED_TRACE(ZstdCodecName(codec));
    ASSERT_OK(SavePromptCache(env.get(), "/c", cache, {{"model", "m"}}, Compressed(codec)));
    ASSERT_OK(TranscodePromptCacheFile(env.get(), "/c", "/back", TranscodeOptions{}));
    EXPECT_EQ(FileBytes(env.get(), "/back"), FileBytes(env.get(), "/p"));
  }
  if (std::system("zstd --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "zstd not installed";
  testing::TempDir dir;
  ASSERT_OK(SavePromptCache(Env::Default(), dir.Join("c"), cache, {{"model", "m"}}, Compressed()));
  const std::string cmd = "zstd -q -d -f " + dir.Join("c") + " -o " + dir.Join("plain");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(testing::ReadFileBytes(dir.Join("plain")), FileBytes(env.get(), "/p"));
}

// Flipping any byte of a small compressed file: a verified load fails, or
// returns exactly the original caches (zstd ignores a few descriptor bits).
TEST(StreamingSaveTest, EveryFlippedByteOfACompressedFileFailsOrChangesNothing) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = SmallCache();
  const std::vector<std::string> want = Fingerprints(cache);
  LoadPromptCacheOptions verify;
  verify.verify = true;
  for (ZstdCodec codec : {ZstdCodec::kZstd, ZstdCodec::kBytePlane}) {
    SCOPED_TRACE(ZstdCodecName(codec));
    ASSERT_OK(SavePromptCache(env.get(), "/c", cache, {{"model", "m"}}, Compressed(codec)));
    const std::vector<std::byte> good = FileBytes(env.get(), "/c");
    int failed = 0;
    for (size_t i = 0; i < good.size(); ++i) {
      std::vector<std::byte> bad = good;
      bad[i] ^= std::byte{0x10};
      ASSERT_OK(WriteStringAtomic(env.get(), "/bad", bad));
      Result<LoadedPromptCache> r = LoadPromptCache(env.get(), "/bad", verify);
      if (!r.ok()) {
        ++failed;
        continue;
      }
      EXPECT_EQ(Fingerprints(r->cache), want) << "flip at byte " << i << " returned other data";
    }
    EXPECT_GT(failed, static_cast<int>(good.size()) * 9 / 10);
  }
}

TEST(StreamingSaveTest, SourceErrorsAndChangingLayersFailTheSave) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = SmallCache();
  ASSERT_OK(SavePromptCache(env.get(), "/a", cache, {}));
  const auto before = FileBytes(env.get(), "/a");
  LayerSource failing = [&](size_t i) -> Result<std::shared_ptr<const Cache>> {
    if (i == 1) return Status::IOError("source broke");
    return std::shared_ptr<const Cache>(cache[i]);
  };
  EXPECT_THAT(SavePromptCache(env.get(), "/a", 2, failing, {}), HasCode(StatusCode::kIOError, "source broke"));
  int calls = 0;
  const PromptCache other = BiggerCache();
  LayerSource changing = [&](size_t i) -> Result<std::shared_ptr<const Cache>> {
    if (i == 0 && ++calls > 1) return std::shared_ptr<const Cache>(other[0]);  // a different layer
    return std::shared_ptr<const Cache>(cache[i]);
  };
  EXPECT_THAT(SavePromptCache(env.get(), "/a", 2, changing, {}), HasCode(StatusCode::kInternal, "changed"));
  EXPECT_EQ(FileBytes(env.get(), "/a"), before);
  EXPECT_THAT(SavePromptCache(env.get(), "/a", 1,
                              [](size_t) -> Result<std::shared_ptr<const Cache>> { return nullptr; }, {}),
              HasCode(StatusCode::kInvalidArgument, "null"));
}

TEST(BytePlaneFileTest, LoadsVerifiesAndCompressesBf16Better) {
  std::unique_ptr<Env> env = NewMemEnv();
  PromptCache cache = BiggerCache();
  cache.pop_back();  // only the BF16 layers
  SavePromptCacheOptions zstd = Compressed(ZstdCodec::kZstd), byteplane = Compressed(ZstdCodec::kBytePlane);
  zstd.frame_size = byteplane.frame_size = size_t{4} << 20;
  ASSERT_OK(SavePromptCache(env.get(), "/z", cache, {}, zstd));
  ASSERT_OK(SavePromptCache(env.get(), "/p", cache, {}, byteplane));
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env.get(), "/p"));
  ASSERT_TRUE(info.compression.has_value());
  EXPECT_EQ(info.compression->codec, "zstd-byteplane");
  LoadPromptCacheOptions verify;
  verify.verify = true;
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache loaded, LoadPromptCache(env.get(), "/p", verify));
  EXPECT_EQ(Fingerprints(loaded.cache), Fingerprints(cache));
  EXPECT_LT(FileBytes(env.get(), "/p").size(), FileBytes(env.get(), "/z").size() * 95 / 100);
}

TEST(TranscodeTest, ContainerChangesAreByteExact) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK(SavePromptCache(env.get(), "/plain", BiggerCache(), {{"model", "m"}}));
  TranscodeOptions zstd;
  zstd.compression_level = 1;
  zstd.frame_size = 100'000;
  TranscodeOptions byteplane = zstd;
  byteplane.codec = ZstdCodec::kBytePlane;
  uint64_t last_done = 0, last_total = 0;
  TranscodeOptions plain;
  ASSERT_OK(TranscodePromptCacheFile(env.get(), "/plain", "/z", zstd));
  ASSERT_OK(TranscodePromptCacheFile(env.get(), "/z", "/bp", byteplane));
  plain.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  ASSERT_OK(TranscodePromptCacheFile(env.get(), "/bp", "/back", plain));
  plain.progress = nullptr;
  EXPECT_EQ(FileBytes(env.get(), "/back"), FileBytes(env.get(), "/plain"));
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, FileBytes(env.get(), "/plain").size());
  ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(env.get(), "/z"));
  EXPECT_EQ(info.compression->frames, 1 + (info.tensor_bytes + 99'999) / 100'000);
  // In place, and garbage input leaves the output alone.
  ASSERT_OK(TranscodePromptCacheFile(env.get(), "/z", "/z", plain));
  EXPECT_EQ(FileBytes(env.get(), "/z"), FileBytes(env.get(), "/plain"));
  ASSERT_OK(WriteStringAtomic(env.get(), "/junk", testing::Bytes("not a cache file")));
  EXPECT_THAT(TranscodePromptCacheFile(env.get(), "/junk", "/z", zstd), HasCode(StatusCode::kResourceExhausted, "H2"));
  EXPECT_EQ(FileBytes(env.get(), "/z"), FileBytes(env.get(), "/plain"));
}

// A file with digests whose tensor "1.0" has one flipped byte.
void WriteCorrupted(Env* env, const std::string& path) {
  ASSERT_OK(SavePromptCache(env, path, BiggerCache(), {}));
  ASSERT_OK_AND_ASSIGN(auto st, SafetensorsFile::Open(env, path));
  const TensorInfo* t = st->header().FindTensor("1.0");
  ASSERT_NE(t, nullptr);
  std::vector<std::byte> bytes = FileBytes(env, path);
  bytes[st->header().data_offset() + t->begin + 100] ^= std::byte{1};
  ASSERT_OK(WriteStringAtomic(env, path, bytes));
}

TEST(ConvertTest, CorruptInputFailsEveryConversionAndLeavesTheOutput) {
  std::unique_ptr<Env> env = NewMemEnv();
  WriteCorrupted(env.get(), "/bad");
  TranscodeOptions compress;
  compress.compression_level = 1;
  ASSERT_OK(TranscodePromptCacheFile(env.get(), "/bad", "/bad.zst", compress));  // copies bytes, checks nothing
  ASSERT_OK(WriteStringAtomic(env.get(), "/out", testing::Bytes("previous")));
  struct Case {
    const char* name;
    const char* input;
    bool integrity;
    bool compress;
    bool quantize;
  };
  for (const Case& c : {Case{"copy", "/bad", true, false, false}, Case{"no digests", "/bad", false, false, false},
                        Case{"to zstd", "/bad", true, true, false}, Case{"quantize", "/bad", true, false, true},
                        Case{"from zstd", "/bad.zst", true, false, false}}) {
    SCOPED_TRACE(c.name);
    ConvertOptions options;
    options.output.integrity = c.integrity;
    if (c.compress) options.output.compression_level = 1;
    if (c.quantize) {
      options.transform = [](size_t, std::shared_ptr<Cache> layer) { return QuantizeLayer(layer, 64, 8); };
    }
    EXPECT_THAT(ConvertPromptCacheFile(env.get(), c.input, "/out", options),
                HasCode(StatusCode::kCorruption, "tensor '1.0': SHA-256 mismatch"));
    EXPECT_EQ(FileBytes(env.get(), "/out"), testing::Bytes("previous"));
  }
  ConvertOptions unchecked;
  unchecked.verify_input = false;
  EXPECT_OK(ConvertPromptCacheFile(env.get(), "/bad", "/out", unchecked));
  // A tensor copied unchanged is checked as it is written (no separate read
  // pass), one a transform reads when its layer is read.
  ConvertOptions copy;
  EXPECT_THAT(ConvertPromptCacheFile(env.get(), "/bad", "/out", copy), HasCode(StatusCode::kCorruption, "copied to"));
  copy.transform = [](size_t, std::shared_ptr<Cache> layer) { return CastLayer(layer, DType::kF32); };
  Status cast = ConvertPromptCacheFile(env.get(), "/bad", "/out", copy);
  EXPECT_THAT(cast, HasCode(StatusCode::kCorruption, "tensor '1.0': SHA-256 mismatch"));
  EXPECT_THAT(std::string(cast.message()), ::testing::Not(::testing::HasSubstr("copied to")));
}

// kvtool trim is TrimPromptCacheFile: the same file as trim_prompt_cache on
// the loaded cache, saved in the input's format.
TEST(ConvertTest, TrimFileEqualsTrimPromptCache) {
  std::unique_ptr<Env> env = NewMemEnv();
  int trimmed_files = 0;
  for (const std::string& path : testing::MlxLmFixtures()) {
    SCOPED_TRACE(path);
    Result<LoadedPromptCache> loaded = LoadPromptCache(Env::Default(), path);
    if (!loaded.ok()) continue;
    ASSERT_OK_AND_ASSIGN(PromptCacheInfo info, ReadPromptCacheInfo(Env::Default(), path));
    ConvertOptions options;
    options.output = SameFormatAs(info);
    ASSERT_OK(SavePromptCache(env.get(), "/in", loaded->cache, loaded->user_metadata));
    Result<int64_t> trimmed = TrimPromptCacheFile(env.get(), "/in", "/trimmed", 3, options);
    if (!CanTrimPromptCache(loaded->cache)) {
      EXPECT_THAT(trimmed, HasCode(StatusCode::kNotSupported, "is not trimmable"));
      EXPECT_FALSE(env->FileExists("/trimmed"));
      continue;
    }
    ASSERT_OK(trimmed);
    ASSERT_OK_AND_ASSIGN(int64_t want, TrimPromptCache(loaded->cache, 3));
    EXPECT_EQ(*trimmed, want);
    ASSERT_OK(SavePromptCache(env.get(), "/want", loaded->cache, loaded->user_metadata, options.output));
    EXPECT_EQ(FileBytes(env.get(), "/trimmed"), FileBytes(env.get(), "/want"));
    ASSERT_OK(env->RemoveFile("/trimmed"));
    ++trimmed_files;
  }
  EXPECT_GE(trimmed_files, 5);
}

TEST(ConvertTest, TransformsLayoutsAndInPlace) {
  std::unique_ptr<Env> env = NewMemEnv();
  const PromptCache cache = BiggerCache();
  ASSERT_OK(SavePromptCache(env.get(), "/in", cache, {{"model", "m"}}));
  ConvertOptions q;
  q.transform = [](size_t, std::shared_ptr<Cache> layer) { return QuantizeLayer(layer, 64, 8); };
  q.output.layout = PromptCacheLayout::kMlxSwiftLm;
  ASSERT_OK(ConvertPromptCacheFile(env.get(), "/in", "/q", q));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache quantized, LoadPromptCache(env.get(), "/q"));
  EXPECT_EQ(quantized.layout, PromptCacheLayout::kMlxSwiftLm);
  EXPECT_EQ(quantized.user_metadata, (Metadata{{"model", "m"}}));
  for (size_t i = 0; i < cache.size(); ++i) {
    EXPECT_EQ(quantized.cache[i]->class_name(), "QuantizedKVCache");
    ASSERT_OK_AND_ASSIGN(LayerDiff d, DiffLayers(cache[i], quantized.cache[i]));
    EXPECT_TRUE(d.comparable);
    EXPECT_GT(d.values, 0u);
    if (i < 2) {
      EXPECT_LT(d.max_abs_error, 0.05);  // 8-bit codes of ~N(0,1) values
    } else {
      EXPECT_EQ(d.max_abs_error, 0.0);  // already quantized: copied
    }
  }
  // In place: the input stays mapped while the output replaces it.
  ConvertOptions back;
  back.transform = [](size_t, std::shared_ptr<Cache> layer) { return DequantizeLayer(layer); };
  ASSERT_OK(ConvertPromptCacheFile(env.get(), "/q", "/q", back));
  ASSERT_OK_AND_ASSIGN(LoadedPromptCache again, LoadPromptCache(env.get(), "/q"));
  EXPECT_EQ(again.layout, PromptCacheLayout::kMlxLm);
  EXPECT_EQ(again.cache[0]->class_name(), "KVCache");
}

TEST(ConvertTest, FailedWritesLeaveTheOldFile) {
  std::unique_ptr<Env> mem = NewMemEnv();
  ASSERT_OK(SavePromptCache(mem.get(), "/in", BiggerCache(), {}));
  ASSERT_OK(WriteStringAtomic(mem.get(), "/out", testing::Bytes("previous")));
  FaultInjectionEnv env(mem.get());
  for (auto op : {FaultInjectionEnv::Op::kNewWritable, FaultInjectionEnv::Op::kAppend,
                  FaultInjectionEnv::Op::kWriteAt, FaultInjectionEnv::Op::kSync, FaultInjectionEnv::Op::kRename}) {
    env.Reset();
    env.FailNth(op, 1, Status::IOError("injected EIO"));
    EXPECT_THAT(ConvertPromptCacheFile(&env, "/in", "/out", ConvertOptions{}), HasCode(StatusCode::kIOError, "EIO"));
    EXPECT_EQ(FileBytes(mem.get(), "/out"), testing::Bytes("previous"));
  }
}

// One reader, many threads reading layers; loads of the same file alongside.
TEST(ReaderTest, ConcurrentReadsOfOneFile) {
  testing::TempDir dir;
  const PromptCache cache = BiggerCache();
  for (const SavePromptCacheOptions& options : {SavePromptCacheOptions{}, Compressed()}) {
    const std::string path = dir.Join(options.compression_level ? "c" : "p");
    ASSERT_OK(SavePromptCache(Env::Default(), path, cache, {}, options));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptCacheReader> reader, PromptCacheReader::Open(Env::Default(), path));
    const std::vector<std::string> want = Fingerprints(cache);
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 3; ++round) {
          if (t % 2 == 0) {
            for (size_t i = 0; i < cache.size(); ++i) {
              Result<std::shared_ptr<Cache>> layer = reader->ReadLayer(i, /*verify=*/true);
              if (!layer.ok() || Fingerprint(**layer) != want[i]) ++mismatches;
            }
          } else {
            Result<LoadedPromptCache> loaded = LoadPromptCache(Env::Default(), path);
            if (!loaded.ok() || Fingerprints(loaded->cache) != want) ++mismatches;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
  }
}

}  // namespace
}  // namespace kvstore
