// The POSIX Env's page-cache behaviour when a file replaces another
// (WritableFile::WillReplace): the old file's cached pages are released
// behind a synced writer, and nothing else is touched.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "env_test_util.h"
#include "kvstore/env.h"
#include "libkvstore/io/posix_file.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

constexpr size_t kChunk = kPosixWritebackChunk;

// How many pages of [offset, offset + length) of `path` the page cache
// holds (mincore of a mapping: mapping a file brings nothing in), or -1.
long ResidentPages(const std::string& path, size_t offset, size_t length) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  void* base = mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  close(fd);
  if (base == MAP_FAILED) return -1;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((length + page - 1) / page);
  long resident = -1;
  if (mincore(base, length, in_core.data()) == 0) {
    resident = 0;
    for (unsigned char c : in_core) resident += c & 1;
  }
  munmap(base, length);
  return resident;
}

// Writes `size` bytes of `fill` to `path`, synced, then reads them back so
// that they are cached (and clean).
void WriteCached(const std::string& path, size_t size, char fill) {
  ASSERT_OK(WriteString(Env::Default(), path, std::string(size, fill)));
  // Clean pages whatever the Env's writeback does (the portable build starts none early):
  // POSIX_FADV_DONTNEED drops clean pages only.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fsync(fd), 0);
  close(fd);
  ASSERT_OK_AND_ASSIGN(std::string back, ReadString(Env::Default(), path));
  ASSERT_EQ(back.size(), size);
}

// Appends `n` chunks of 'n' through a fresh writable file at `path`.
Status AppendChunks(WritableFile& file, int n) {
  const std::string chunk(kChunk, 'n');
  for (int i = 0; i < n; ++i) KV_RETURN_IF_ERROR(file.Append(AsBytes(chunk)));
  return Status::OK();
}

TEST(PosixCacheTest, ASyncedReplacementReleasesTheOldFilesCacheBehindItsWrites) {
  TempDir tmp;
  const std::string old_path = tmp.Join("old"), temp = tmp.Join("old.tmp");
  const long pages = static_cast<long>(kChunk / static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  WriteCached(old_path, 3 * kChunk, 'o');
  if (ResidentPages(old_path, 0, 3 * kChunk) != 3 * pages) GTEST_SKIP() << "file system without a page cache";

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, Env::Default()->NewWritableFile(temp));
  file->WillReplace(old_path);
  ASSERT_OK(AppendChunks(*file, 2));
  // Released as far as the new file has written, kept beyond.
  EXPECT_EQ(ResidentPages(old_path, 0, 2 * kChunk), 0);
  EXPECT_EQ(ResidentPages(old_path, 2 * kChunk, kChunk), pages);
  ASSERT_OK(file->Sync());
  ASSERT_OK(file->Close());
  // The old file is whole: only its cache went.
  EXPECT_EQ(ReadString(Env::Default(), old_path).value(), std::string(3 * kChunk, 'o'));
  EXPECT_EQ(ReadString(Env::Default(), temp).value(), std::string(2 * kChunk, 'n'));
}

// A file written without fsync leaves the old file's cache alone (releasing
// dirty pages would start their writeback), and so does a missing, FIFO or
// directory target, which is not even opened.
TEST(PosixCacheTest, OnlyASyncedWriterReleasesAndOnlyARegularFile) {
  TempDir tmp;
  const std::string old_path = tmp.Join("old"), temp = tmp.Join("tmp");
  const long pages = static_cast<long>(kChunk / static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  WriteCached(old_path, kChunk, 'o');
  if (ResidentPages(old_path, 0, kChunk) != pages) GTEST_SKIP() << "file system without a page cache";

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> unsynced, Env::Default()->NewWritableFile(temp));
  unsynced->WillNotSync();
  unsynced->WillReplace(old_path);
  ASSERT_OK(AppendChunks(*unsynced, 2));
  ASSERT_OK(unsynced->Close());
  EXPECT_EQ(ResidentPages(old_path, 0, kChunk), pages);

  const std::string fifo = tmp.Join("fifo"), dir = tmp.Join("dir");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  for (const std::string& target : {fifo, dir, tmp.Join("missing")}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<WritableFile> file, Env::Default()->NewWritableFile(temp));
    file->WillReplace(target);
    // A FIFO opened for reading would let a non-blocking writer open it.
    if (target == fifo) {
      EXPECT_EQ(open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC), -1);
      EXPECT_EQ(errno, ENXIO);
    }
    ASSERT_OK(AppendChunks(*file, 1));
    ASSERT_OK(file->Close());
  }
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// WriteFileAtomic passes its target on: replacing a cached file with a
// synced write leaves none of the old file's pages cached that the new one
// wrote over (they would otherwise stay until the old file's teardown).
TEST(PosixCacheTest, WriteFileAtomicReleasesTheReplacedFilesCache) {
  TempDir tmp;
  const std::string path = tmp.Join("out");
  const long pages = static_cast<long>(kChunk / static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  WriteCached(path, 2 * kChunk, 'o');
  if (ResidentPages(path, 0, 2 * kChunk) != 2 * pages) GTEST_SKIP() << "file system without a page cache";
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const ReadableFile> old_file, Env::Default()->OpenReadable(path));
  long old_resident_during_write = -1;
  ASSERT_OK(WriteFileAtomic(Env::Default(), path, [&](WritableFile& file) {
    KV_RETURN_IF_ERROR(AppendChunks(file, 2));
    // The old file is still the target; its mapping has touched nothing.
    old_resident_during_write = ResidentPages(path, 0, 2 * kChunk);
    return Status::OK();
  }));
  EXPECT_EQ(old_resident_during_write, 0);
  EXPECT_EQ(ReadString(Env::Default(), path).value(), std::string(2 * kChunk, 'n'));
  EXPECT_EQ(ToString(old_file->data()), std::string(2 * kChunk, 'o'));
}

}  // namespace
}  // namespace kvstore::testing
