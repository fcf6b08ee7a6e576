#include "kvstore/zstd_seekable.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "kvstore/safetensors.h"
#include "libkvstore/codec/byte_plane.h"
#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;

// Compressible but not trivial bytes.
std::vector<std::byte> Content(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((rng() % 7) + (i / 1000) % 3);
  return out;
}

std::vector<std::byte> Compress(std::span<const std::byte> header, std::span<const std::byte> body,
                                ZstdWriteOptions options, uint64_t* frames = nullptr) {
  std::unique_ptr<Env> env = NewMemEnv();
  auto file = env->NewWritableFile("/c").value();
  ZstdSeekableWriter w(file.get(), options);
  EXPECT_OK(w.Append(header));
  EXPECT_OK(w.EndFrame());
  EXPECT_OK(w.Append(body));
  EXPECT_OK(w.Finish());
  EXPECT_EQ(w.uncompressed_bytes(), header.size() + body.size());
  if (frames) *frames = w.frames();
  EXPECT_OK(file->Close());
  auto r = env->OpenReadable("/c").value();
  return std::vector<std::byte>(r->data().begin(), r->data().end());
}

// Opened over a file, frames are read with ReadAt: the same bytes, both
// codecs; a file cut short under the reader is an error, not a fault.
TEST(ZstdSeekableTest, ReaderOverAFileReadsFramesFromIt) {
  testing::TempDir tmp;
  Env* env = Env::Default();
  const auto header = Content(300, 1);
  const auto body = Content(700'000, 2);
  for (ZstdCodec codec : {ZstdCodec::kZstd, ZstdCodec::kBytePlane}) {
    ZstdWriteOptions options;
    options.frame_size = 64 * 1024;
    options.codec = codec;
    const auto packed = Compress(header, body, options);
    const std::string path = tmp.Join(std::string(ZstdCodecName(codec)));
    ASSERT_OK(WriteStringAtomic(env, path, packed));
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const ReadableFile> file, env->OpenReadable(path));
    ASSERT_OK_AND_ASSIGN(ZstdSeekableReader r, ZstdSeekableReader::Open(*file));
    EXPECT_EQ(r.codec(), codec);
    std::vector<std::byte> all(r.decompressed_size());
    ASSERT_OK(r.ReadAll(all, 2));
    EXPECT_TRUE(std::equal(header.begin(), header.end(), all.begin()));
    EXPECT_TRUE(std::equal(body.begin(), body.end(), all.begin() + header.size()));
    std::vector<std::byte> part(1000);
    ASSERT_OK(r.Read(400'000, part));
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 400'000));
    ASSERT_EQ(truncate(path.c_str(), 4096), 0);
    EXPECT_THAT(r.ReadAll(all, 2), HasCode(StatusCode::kIOError, "shrank"));
  }
}

TEST(ZstdSeekableTest, RoundTripWholeAndRanges) {
  const auto header = Content(300, 1);
  const auto body = Content(1'000'000, 2);
  ZstdWriteOptions options;
  options.frame_size = 64 * 1024;
  uint64_t frames = 0;
  const auto packed = Compress(header, body, options, &frames);
  EXPECT_EQ(frames, 1u + (body.size() + options.frame_size - 1) / options.frame_size);
  EXPECT_TRUE(IsZstdFrame(packed));
  EXPECT_LT(packed.size(), body.size());
  ASSERT_OK_AND_ASSIGN(ZstdSeekableReader r, ZstdSeekableReader::Open(packed));
  ASSERT_EQ(r.decompressed_size(), header.size() + body.size());
  EXPECT_EQ(r.frames()[0].decompressed_size, header.size());  // the header has its own frame
  std::vector<std::byte> all(r.decompressed_size());
  ASSERT_OK(r.ReadAll(all));
  EXPECT_TRUE(std::equal(header.begin(), header.end(), all.begin()));
  EXPECT_TRUE(std::equal(body.begin(), body.end(), all.begin() + header.size()));
  for (auto [off, len] : {std::pair<uint64_t, size_t>{0, 300}, {10, 5}, {290, 200000}, {999'000, 1300}}) {
    std::vector<std::byte> part(len);
    ASSERT_OK(r.Read(off, part));
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + off)) << off;
  }
  std::vector<std::byte> too_far(10);
  EXPECT_THAT(r.Read(r.decompressed_size() - 5, too_far), HasCode(StatusCode::kInvalidArgument, "past"));
}

TEST(ZstdSeekableTest, ZstdCommandLineDecompressesToTheOriginal) {
  if (std::system("zstd --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "zstd not installed";
  testing::TempDir dir;
  const auto header = Content(100, 3);
  const auto body = Content(300'000, 4);
  ZstdWriteOptions options;
  options.frame_size = 50'000;
  const auto packed = Compress(header, body, options);
  {
    std::ofstream out(dir.Join("f.zst"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(packed.data()), static_cast<std::streamsize>(packed.size()));
  }
  const std::string cmd = "zstd -q -d -f " + dir.Join("f.zst") + " -o " + dir.Join("f");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const auto plain = testing::ReadFileBytes(dir.Join("f"));
  ASSERT_EQ(plain.size(), header.size() + body.size());
  EXPECT_TRUE(std::equal(header.begin(), header.end(), plain.begin()));
  EXPECT_TRUE(std::equal(body.begin(), body.end(), plain.begin() + header.size()));
}

TEST(ZstdSeekableTest, EveryCorruptionIsAnError) {
 for (ZstdCodec codec : {ZstdCodec::kZstd, ZstdCodec::kBytePlane}) {
  SCOPED_TRACE(ZstdCodecName(codec));
  const auto packed = Compress(Content(50, 5), Content(5000, 6), ZstdWriteOptions{3, 1024, 2, codec});
  // Flip each byte: open or decompression must fail, never return other bytes.
  std::vector<std::byte> expect;
  {
    ASSERT_OK_AND_ASSIGN(ZstdSeekableReader r, ZstdSeekableReader::Open(packed));
    expect.resize(r.decompressed_size());
    ASSERT_OK(r.ReadAll(expect));
  }
  for (size_t i = 0; i < packed.size(); ++i) {
    std::vector<std::byte> bad = packed;
    bad[i] ^= std::byte{0x01};
    Result<ZstdSeekableReader> r = ZstdSeekableReader::Open(bad);
    if (!r.ok()) continue;
    std::vector<std::byte> out(r->decompressed_size());
    Status s = r->ReadAll(out);
    if (s.ok()) {
      EXPECT_EQ(out, expect) << "flip at " << i << " returned different bytes";
    }
  }
  // Truncation anywhere.
  for (size_t n = 0; n < packed.size(); n += 7) {
    std::span<const std::byte> cut(packed.data(), n);
    Result<ZstdSeekableReader> r = ZstdSeekableReader::Open(cut);
    if (r.ok()) {
      std::vector<std::byte> out(r->decompressed_size());
      EXPECT_FALSE(r->ReadAll(out).ok()) << n;
    }
  }
 }
}

TEST(ZstdSeekableTest, DeclaredSizesAreCappedBeforeAllocation) {
  const auto packed = Compress(Content(50, 7), Content(5000, 8), ZstdWriteOptions{});
  ZstdReadLimits tight;
  tight.max_frame_size = 10;
  EXPECT_THAT(ZstdSeekableReader::Open(packed, tight), HasCode(StatusCode::kResourceExhausted, "declares"));
  ZstdReadLimits total;
  total.max_decompressed_size = 100;
  EXPECT_THAT(ZstdSeekableReader::Open(packed, total), HasCode(StatusCode::kResourceExhausted, "total"));
  std::vector<std::byte> not_seekable = Content(100, 9);
  EXPECT_THAT(ZstdSeekableReader::Open(not_seekable), HasCode(StatusCode::kCorruption, "footer"));
}

// The names and default levels kvtool and Python take from the library: the
// name files carry ("zstd-byteplane") and the short flag ("byteplane") both parse.
TEST(ZstdSeekableTest, CodecNamesAndDefaultLevels) {
  for (ZstdCodec codec : {ZstdCodec::kZstd, ZstdCodec::kBytePlane}) {
    EXPECT_EQ(ParseZstdCodec(ZstdCodecName(codec)), codec) << ZstdCodecName(codec);
  }
  EXPECT_EQ(ParseZstdCodec("byteplane"), ZstdCodec::kBytePlane);
  EXPECT_FALSE(ParseZstdCodec("Zstd").has_value());
  EXPECT_FALSE(ParseZstdCodec("").has_value());
  EXPECT_EQ(DefaultZstdLevel(ZstdCodec::kZstd), 3);
  EXPECT_EQ(DefaultZstdLevel(ZstdCodec::kBytePlane), 1);
}

TEST(BytePlaneTest, SplitsEvenThenOddBytesAndMergesBack) {
  const std::string in = "ABCDEFG";
  std::vector<std::byte> planes(in.size()), back(in.size());
  SplitBytePlanes(std::as_bytes(std::span(in)), planes);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(planes.data()), planes.size()), "ACEGBDF");
  MergeBytePlanes(planes, back);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(back.data()), back.size()), in);
  // Every length around the vector width, so both the SIMD and scalar paths run.
  for (size_t n = 0; n < 200; ++n) {
    const auto data = Content(n, static_cast<uint32_t>(n));
    std::vector<std::byte> p(n), m(n);
    SplitBytePlanes(data, p);
    for (size_t i = 0; i < n / 2; ++i) {
      ASSERT_EQ(p[i], data[2 * i]) << n;
      ASSERT_EQ(p[n - n / 2 + i], data[2 * i + 1]) << n;
    }
    MergeBytePlanes(p, m);
    ASSERT_EQ(m, data) << n;
  }
}

TEST(BytePlaneTest, ContainerReadsBackTheOriginal) {
  const auto header = Content(300, 21);
  const auto body = Content(700'001, 22);  // odd: the last frame has an odd length
  ZstdWriteOptions options;
  options.frame_size = 64 * 1024;
  options.codec = ZstdCodec::kBytePlane;
  const auto packed = Compress(header, body, options);
  ASSERT_OK_AND_ASSIGN(ZstdSeekableReader r, ZstdSeekableReader::Open(packed));
  EXPECT_EQ(r.codec(), ZstdCodec::kBytePlane);
  ASSERT_EQ(r.decompressed_size(), header.size() + body.size());
  EXPECT_EQ(r.frames()[0].decompressed_size, header.size());
  std::vector<std::byte> all(r.decompressed_size());
  ASSERT_OK(r.ReadAll(all));
  EXPECT_TRUE(std::equal(header.begin(), header.end(), all.begin()));
  EXPECT_TRUE(std::equal(body.begin(), body.end(), all.begin() + header.size()));
  for (auto [off, len] : {std::pair<uint64_t, size_t>{0, 300}, {1, 1}, {299, 2}, {65'000, 70'000}, {700'000, 301}}) {
    std::vector<std::byte> part(len);
    ASSERT_OK(r.Read(off, part, 2));
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + off)) << off;
  }
}

// `zstd -d` on a byte-plane file yields the magic first: no safetensors
// reader takes that for a header length.
TEST(BytePlaneTest, ZstdCommandLineOutputIsRefusedBySafetensorsReaders) {
  if (std::system("zstd --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "zstd not installed";
  testing::TempDir dir;
  const auto header = Content(100, 23);
  ZstdWriteOptions options;
  options.codec = ZstdCodec::kBytePlane;
  const auto packed = Compress(header, Content(1000, 24), options);
  {
    std::ofstream out(dir.Join("f.zst"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(packed.data()), static_cast<std::streamsize>(packed.size()));
  }
  const std::string cmd = "zstd -q -d -f " + dir.Join("f.zst") + " -o " + dir.Join("f");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const auto plain = testing::ReadFileBytes(dir.Join("f"));
  ASSERT_GE(plain.size(), 8u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(plain.data()), 8), std::string("KVBP\x01\x02\0\0", 8));
  EXPECT_THAT(ParseSafetensors(plain), HasCode(StatusCode::kResourceExhausted, "H2"));
}

}  // namespace
}  // namespace kvstore
