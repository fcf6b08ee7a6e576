// Behaviour every Env shares, run against the POSIX Env and the MemEnv.
#include "kvstore/env.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "env_test_util.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

class EnvTest : public EnvKindTest {};

// A pattern that differs in every byte position modulo 251, so misplaced or
// lost chunks show up.
std::string Pattern(size_t n, size_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i + seed) % 251);
  return s;
}

TEST_P(EnvTest, RoundTripSmallAndLargeAppends) {
  // Small appends (buffered), one that straddles the buffer and one far
  // larger than it (written straight through), then small ones again.
  std::vector<std::string> chunks = {
      "hello", Pattern(1000, 1), Pattern((1 << 20) - 3, 2), Pattern(3 << 20, 3),
      "x",     Pattern(70000, 4)};
  std::string expected;
  ASSERT_OK_AND_ASSIGN(auto file, env()->NewWritableFile(Path("f")));
  for (const std::string& chunk : chunks) {
    ASSERT_OK(file->Append(AsBytes(chunk)));
    expected += chunk;
    EXPECT_EQ(file->size(), expected.size());
  }
  ASSERT_OK(file->Sync());
  ASSERT_OK(file->Close());
  ASSERT_OK_AND_ASSIGN(std::string got, ReadString(env(), Path("f")));
  EXPECT_TRUE(got == expected) << "sizes " << got.size() << " vs " << expected.size();
  ASSERT_OK_AND_ASSIGN(uint64_t size, env()->GetFileSize(Path("f")));
  EXPECT_EQ(size, expected.size());
}

TEST_P(EnvTest, EmptyFileReadsAsEmptySpan) {
  ASSERT_OK(WriteString(env(), Path("empty"), ""));
  ASSERT_OK_AND_ASSIGN(auto file, env()->OpenReadable(Path("empty")));
  EXPECT_EQ(file->size(), 0u);
  EXPECT_TRUE(file->data().empty());
  EXPECT_EQ(file->path(), Path("empty"));
}

TEST_P(EnvTest, NewWritableFileTruncates) {
  ASSERT_OK(WriteString(env(), Path("f"), "old content"));
  ASSERT_OK(WriteString(env(), Path("f"), "new"));
  EXPECT_THAT(ReadString(env(), Path("f")), IsOk());
  EXPECT_EQ(ReadString(env(), Path("f")).value(), "new");
}

TEST_P(EnvTest, MissingFilesAreNotFoundAndNamed) {
  std::string missing = Path("missing");
  EXPECT_THAT(env()->OpenReadable(missing), HasCode(StatusCode::kNotFound, missing));
  EXPECT_THAT(env()->GetFileSize(missing), HasCode(StatusCode::kNotFound, missing));
  EXPECT_THAT(env()->RemoveFile(missing), HasCode(StatusCode::kNotFound, missing));
  EXPECT_THAT(env()->RenameFile(missing, Path("to")), HasCode(StatusCode::kNotFound, missing));
  EXPECT_THAT(env()->GetChildren(missing), HasCode(StatusCode::kNotFound, missing));
  EXPECT_FALSE(env()->FileExists(missing));
}

TEST_P(EnvTest, WritableFileAfterCloseIsFailedPrecondition) {
  ASSERT_OK_AND_ASSIGN(auto file, env()->NewWritableFile(Path("f")));
  ASSERT_OK(file->Append(AsBytes("abc")));
  ASSERT_OK(file->Close());
  EXPECT_THAT(file->Append(AsBytes("d")), HasCode(StatusCode::kFailedPrecondition, "closed"));
  EXPECT_THAT(file->Sync(), HasCode(StatusCode::kFailedPrecondition, Path("f")));
  EXPECT_OK(file->Close());
  EXPECT_EQ(ReadString(env(), Path("f")).value(), "abc");
}

TEST_P(EnvTest, DestructionFlushesUnclosedFile) {
  {
    ASSERT_OK_AND_ASSIGN(auto file, env()->NewWritableFile(Path("f")));
    ASSERT_OK(file->Append(AsBytes("buffered")));
  }
  EXPECT_EQ(ReadString(env(), Path("f")).value(), "buffered");
}

TEST_P(EnvTest, DirectoriesChildrenAndRemoval) {
  ASSERT_OK(env()->CreateDir(Path("a/b/c")));
  ASSERT_OK(env()->CreateDir(Path("a/b")));  // exists: OK
  ASSERT_OK(WriteString(env(), Path("a/one"), "1"));
  ASSERT_OK(WriteString(env(), Path("a/b/two"), "2"));
  EXPECT_TRUE(env()->FileExists(Path("a/b")));
  EXPECT_TRUE(env()->FileExists(Path("a/one")));
  ASSERT_OK_AND_ASSIGN(auto children, env()->GetChildren(Path("a")));
  EXPECT_THAT(children, UnorderedElementsAre("b", "one"));
  ASSERT_OK_AND_ASSIGN(children, env()->GetChildren(Path("a/b/")));
  EXPECT_THAT(children, UnorderedElementsAre("c", "two"));
  ASSERT_OK_AND_ASSIGN(children, env()->GetChildren(Path("a/b/c")));
  EXPECT_TRUE(children.empty());

  ASSERT_OK(env()->RemoveFile(Path("a/one")));
  EXPECT_FALSE(env()->FileExists(Path("a/one")));
  ASSERT_OK_AND_ASSIGN(children, env()->GetChildren(Path("a")));
  EXPECT_THAT(children, ElementsAre("b"));
  EXPECT_OK(env()->SyncDir(Path("a")));
}

TEST_P(EnvTest, CreateDirOverFileIsIOError) {
  ASSERT_OK(WriteString(env(), Path("file"), "x"));
  EXPECT_THAT(env()->CreateDir(Path("file")), HasCode(StatusCode::kIOError, Path("file")));
  EXPECT_THAT(env()->CreateDir(Path("file/sub")), HasCode(StatusCode::kIOError, Path("file")));
}

TEST_P(EnvTest, RenameReplacesTarget) {
  ASSERT_OK(WriteString(env(), Path("from"), "new"));
  ASSERT_OK(WriteString(env(), Path("to"), "old"));
  ASSERT_OK(env()->RenameFile(Path("from"), Path("to")));
  EXPECT_FALSE(env()->FileExists(Path("from")));
  EXPECT_EQ(ReadString(env(), Path("to")).value(), "new");
}

TEST_P(EnvTest, ReaderKeepsOldBytesAfterAtomicReplace) {
  std::string old_content = Pattern(10000, 7);
  ASSERT_OK(WriteStringAtomic(env(), Path("f"), AsBytes(old_content)));
  ASSERT_OK_AND_ASSIGN(auto reader, env()->OpenReadable(Path("f")));
  ASSERT_OK(WriteStringAtomic(env(), Path("f"), AsBytes("replacement")));
  EXPECT_TRUE(ToString(reader->data()) == old_content);
  EXPECT_EQ(ReadString(env(), Path("f")).value(), "replacement");
  // Removal too leaves the reader's bytes alone.
  ASSERT_OK(env()->RemoveFile(Path("f")));
  EXPECT_TRUE(ToString(reader->data()) == old_content);
}

TEST_P(EnvTest, ReadAtCopiesTheBytesItOpenedWhateverHappensToThePath) {
  const std::string old_content = Pattern(100000, 3);
  ASSERT_OK(WriteStringAtomic(env(), Path("f"), AsBytes(old_content)));
  ASSERT_OK_AND_ASSIGN(auto reader, env()->OpenReadable(Path("f")));
  std::string got(5000, '\0');
  auto out = std::as_writable_bytes(std::span(got));
  ASSERT_OK(reader->ReadAt(90000, out));
  EXPECT_TRUE(got == old_content.substr(90000, 5000));
  ASSERT_OK(reader->ReadAt(0, out.first(0)));
  EXPECT_THAT(reader->ReadAt(96000, out), HasCode(StatusCode::kInvalidArgument, "past the end"));
  EXPECT_THAT(reader->ReadAt(uint64_t{1} << 63, out.first(1)), HasCode(StatusCode::kInvalidArgument, "past the end"));
  // Replaced and removed, before and after a read: still the bytes opened.
  ASSERT_OK(WriteStringAtomic(env(), Path("f"), AsBytes(Pattern(100000, 4))));
  ASSERT_OK(reader->ReadAt(10, out));
  EXPECT_TRUE(got == old_content.substr(10, 5000));
  ASSERT_OK_AND_ASSIGN(auto second, env()->OpenReadable(Path("f")));
  ASSERT_OK(second->ReadAt(0, out));
  ASSERT_OK(env()->RemoveFile(Path("f")));
  ASSERT_OK(second->ReadAt(20, out));
  EXPECT_TRUE(got == Pattern(100000, 4).substr(20, 5000));
}

// What a reader of llama-server's slot files needs: the file is truncated and
// rewritten in place (same inode), and the bytes already read stay as they
// were. (A mapping of the shrunk file would fault with SIGBUS on access.)
TEST_P(EnvTest, ReadIntoMemoryKeepsItsCopyWhenTheFileIsRewrittenInPlace) {
  const std::string old_bytes = Pattern(3 << 20, 7);
  ASSERT_OK(WriteString(env(), Path("slot.bin"), old_bytes));
  ASSERT_OK_AND_ASSIGN(auto copy, env()->ReadIntoMemory(Path("slot.bin")));
  ASSERT_OK(WriteString(env(), Path("slot.bin"), "short"));  // truncates in place
  ASSERT_EQ(copy->size(), old_bytes.size());
  EXPECT_TRUE(std::equal(old_bytes.begin(), old_bytes.end(),
                         reinterpret_cast<const char*>(copy->data().data())));
  EXPECT_EQ(copy->path(), Path("slot.bin"));
  ASSERT_OK(WriteString(env(), Path("empty"), ""));
  ASSERT_OK_AND_ASSIGN(auto empty, env()->ReadIntoMemory(Path("empty")));
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_THAT(env()->ReadIntoMemory(Path("missing")), HasCode(StatusCode::kNotFound, "missing"));
}

TEST_P(EnvTest, LockFileExcludesSecondLockerUntilReleased) {
  std::string lock_path = Path("LOCK");
  ASSERT_OK_AND_ASSIGN(auto lock, env()->LockFile(lock_path));
  EXPECT_TRUE(env()->FileExists(lock_path));
  EXPECT_THAT(env()->LockFile(lock_path),
              HasCode(StatusCode::kFailedPrecondition, "already held by this process"));
  lock.reset();
  ASSERT_OK_AND_ASSIGN(auto again, env()->LockFile(lock_path));
  EXPECT_TRUE(env()->FileExists(lock_path));
}

TEST_P(EnvTest, ConcurrentWritersAndReaders) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string name = Path("t" + std::to_string(t));
      for (int round = 0; round < 20 && results[t].ok(); ++round) {
        std::string content = Pattern(1000 + round, static_cast<size_t>(t));
        results[t] = WriteStringAtomic(env(), name, AsBytes(content));
        if (!results[t].ok()) break;
        Result<std::string> got = ReadString(env(), name);
        if (!got.ok() || *got != content) results[t] = Status::Internal("read back differs");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) EXPECT_OK(s);
}

TEST(MemEnvTest, ReaderIsASnapshotEvenWhenTheFileIsRewrittenInPlace) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto writer, env->NewWritableFile("/f"));
  ASSERT_OK(writer->Append(AsBytes("first")));
  ASSERT_OK_AND_ASSIGN(auto reader, env->OpenReadable("/f"));
  ASSERT_OK(writer->Append(AsBytes(" second")));
  EXPECT_EQ(ToString(reader->data()), "first");
  ASSERT_OK_AND_ASSIGN(auto rewriter, env->NewWritableFile("/f"));
  ASSERT_OK(rewriter->Append(AsBytes("XY")));
  EXPECT_EQ(ToString(reader->data()), "first");
  EXPECT_EQ(ReadString(env.get(), "/f").value(), "XY");
}

TEST(MemEnvTest, WriterFollowsItsFileAcrossRename) {
  std::unique_ptr<Env> env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto writer, env->NewWritableFile("d/tmp"));
  ASSERT_OK(writer->Append(AsBytes("a")));
  ASSERT_OK(env->RenameFile("d/tmp", "d/final"));
  ASSERT_OK(writer->Append(AsBytes("b")));
  EXPECT_EQ(ReadString(env.get(), "d/final").value(), "ab");
  ASSERT_OK_AND_ASSIGN(auto children, env->GetChildren("d"));
  EXPECT_THAT(children, ElementsAre("final"));
  ASSERT_OK_AND_ASSIGN(children, env->GetChildren("."));
  EXPECT_THAT(children, ElementsAre("d"));
}

INSTANTIATE_TEST_SUITE_P(Envs, EnvTest, ::testing::Values(EnvKind::kPosix, EnvKind::kMem),
                         EnvKindName);

TEST(DirNameTest, Cases) {
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("a//c"), "a");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(DirName("//c"), "/");
  EXPECT_EQ(DirName("/a/b"), "/a");
  EXPECT_EQ(DirName("./c"), ".");
}

TEST(ProcessTest, SelfIsAliveAndNonPositiveIdsAreNot) {
  Env* env = Env::Default();
  EXPECT_TRUE(env->ProcessAlive(env->ProcessId()));
  EXPECT_FALSE(env->ProcessAlive(0));
  EXPECT_FALSE(env->ProcessAlive(-1));
  EXPECT_FALSE(env->ProcessAlive(int64_t{1} << 40));
}

}  // namespace
}  // namespace kvstore::testing
