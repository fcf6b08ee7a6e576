// WriteFileAtomic under injected faults, and its temp-file cleanup; run over
// the POSIX Env and the MemEnv.
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "env_test_util.h"
#include "kvstore/env.h"
#include "testutil.h"

namespace kvstore::testing {
namespace {

using Op = FaultInjectionEnv::Op;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

constexpr std::string_view kOld = "previous complete content";

// Content written in several appends, one of them larger than the POSIX
// write buffer.
const std::vector<std::string>& NewChunks() {
  static const auto* chunks = new std::vector<std::string>{
      "header;", std::string(5000, 'a'), std::string((1 << 20) + 17, 'b'), "tail"};
  return *chunks;
}

std::string NewContent() {
  std::string all;
  for (const std::string& c : NewChunks()) all += c;
  return all;
}

Status WriteChunks(Env* env, const std::string& path) {
  return WriteFileAtomic(env, path, [](WritableFile& file) {
    for (const std::string& c : NewChunks()) KV_RETURN_IF_ERROR(file.Append(AsBytes(c)));
    return Status::OK();
  });
}

std::string OpName(Op op) {
  switch (op) {
    case Op::kAppend:
      return "Append";
    case Op::kSync:
      return "Sync";
    case Op::kRename:
      return "Rename";
    case Op::kSyncDir:
      return "SyncDir";
    case Op::kNewWritable:
      return "NewWritable";
    case Op::kWriteAt:
      return "WriteAt";
  }
  return "?";
}

class AtomicWriteTest : public EnvKindTest {
 protected:
  std::vector<std::string> Children() {
    Result<std::vector<std::string>> children = env()->GetChildren(root());
    EXPECT_OK(children);
    return children.ok() ? *children : std::vector<std::string>{};
  }
};

// AppendToFile creates a missing file and appends after what is there, in
// both Envs (the POSIX one with O_APPEND, the default by re-writing).
TEST_P(AtomicWriteTest, AppendToFileCreatesThenAppends) {
  ASSERT_OK(env()->AppendToFile(Path("log"), AsBytes("one\n"), /*sync=*/false));
  ASSERT_OK(env()->AppendToFile(Path("log"), AsBytes("two\n"), /*sync=*/true));
  EXPECT_EQ(ReadString(env(), Path("log")).value(), "one\ntwo\n");
}

TEST_P(AtomicWriteTest, WritesAndReplaces) {
  ASSERT_OK(WriteStringAtomic(env(), Path("target"), AsBytes(kOld)));
  EXPECT_EQ(ReadString(env(), Path("target")).value(), kOld);
  ASSERT_OK(WriteChunks(env(), Path("target")));
  EXPECT_TRUE(ReadString(env(), Path("target")).value() == NewContent());
  EXPECT_THAT(Children(), ElementsAre("target"));
}

// kWhenReplacing syncs only over an existing file; kAlways and kNone as named.
TEST_P(AtomicWriteTest, DurabilitySyncsAsAsked) {
  FaultInjectionEnv fault(env());
  auto syncs = [&](Durability durability) {
    fault.Reset();
    EXPECT_OK(WriteFileAtomic(
        &fault, Path("target"), [](WritableFile& f) { return f.Append(AsBytes(kOld)); },
        AtomicWriteOptions{.durability = durability}));
    return fault.Count(Op::kSync) + fault.Count(Op::kSyncDir);
  };
  EXPECT_EQ(syncs(Durability::kWhenReplacing), 0);  // a new file
  EXPECT_EQ(syncs(Durability::kWhenReplacing), 2);  // over the file just written: file and directory
  EXPECT_EQ(syncs(Durability::kNone), 0);
  EXPECT_EQ(syncs(Durability::kAlways), 2);
  ASSERT_OK(env()->RemoveFile(Path("target")));
  EXPECT_EQ(syncs(Durability::kAlways), 2);
  EXPECT_EQ(ReadString(env(), Path("target")).value(), kOld);
}

// For each faulting operation and each of its calls during one atomic write:
// the injected error comes back, no temp file remains, and the target holds
// its previous content, except after a failed final directory sync, when the
// rename has already put the complete new content in place.
TEST_P(AtomicWriteTest, EveryInjectedFaultLeavesTargetCompleteAndNoTemp) {
  FaultInjectionEnv fault(env());
  std::string target = Path("target");
  ASSERT_OK(WriteStringAtomic(env(), target, AsBytes(kOld)));
  for (Op op : {Op::kNewWritable, Op::kAppend, Op::kSync, Op::kRename, Op::kSyncDir}) {
    fault.Reset();
    ASSERT_OK(WriteChunks(&fault, target));
    int calls = fault.Count(op);
    ASSERT_GE(calls, 1) << OpName(op);
    ASSERT_OK(WriteStringAtomic(env(), target, AsBytes(kOld)));
    for (int n = 1; n <= calls; ++n) {
      SCOPED_TRACE(OpName(op) + " call " + std::to_string(n));
      fault.Reset();
      Status injected = Status::IOError("write '" + target + "': No space left on device");
      fault.FailNth(op, n, injected);
      Status s = WriteChunks(&fault, target);
      EXPECT_EQ(s.ToString(), injected.ToString());
      EXPECT_THAT(Children(), ElementsAre("target"));
      ASSERT_OK_AND_ASSIGN(std::string content, ReadString(env(), target));
      if (op == Op::kSyncDir) {
        EXPECT_TRUE(content == NewContent());
        ASSERT_OK(WriteStringAtomic(env(), target, AsBytes(kOld)));
      } else {
        EXPECT_EQ(content, kOld);
      }
    }
  }
}

TEST_P(AtomicWriteTest, DefaultInjectedFaultNamesOpAndCall) {
  FaultInjectionEnv fault(env());
  fault.FailNth(Op::kAppend, 2);
  EXPECT_THAT(WriteChunks(&fault, Path("t")),
              HasCode(StatusCode::kIOError, "injected fault: Append call 2"));
  EXPECT_EQ(fault.Count(Op::kAppend), 2);
  fault.FailAlways(Op::kRename);
  EXPECT_THAT(WriteChunks(&fault, Path("t")), HasCode(StatusCode::kIOError, "RenameFile call 1"));
  EXPECT_THAT(WriteChunks(&fault, Path("t")), HasCode(StatusCode::kIOError, "RenameFile call 2"));
  fault.Reset();
  EXPECT_OK(WriteChunks(&fault, Path("t")));
  EXPECT_THAT(Children(), ElementsAre("t"));
}

TEST_P(AtomicWriteTest, FailingOrThrowingFillLeavesNoTrace) {
  ASSERT_OK(WriteStringAtomic(env(), Path("target"), AsBytes(kOld)));
  Status s = WriteFileAtomic(env(), Path("target"), [](WritableFile& file) {
    KV_RETURN_IF_ERROR(file.Append(AsBytes("partial")));
    return Status::Corruption("tensor 'x': bad");
  });
  EXPECT_THAT(s, HasCode(StatusCode::kCorruption, "tensor 'x': bad"));
  EXPECT_THROW((void)WriteFileAtomic(env(), Path("target"),
                                     [](WritableFile& file) -> Status {
                                       (void)file.Append(AsBytes("partial"));
                                       throw std::runtime_error("caller bug");
                                     }),
               std::runtime_error);
  EXPECT_EQ(ReadString(env(), Path("target")).value(), kOld);
  EXPECT_THAT(Children(), ElementsAre("target"));
}

TEST_P(AtomicWriteTest, MissingDirectoryIsNotFoundForPosix) {
  Status s = WriteStringAtomic(env(), Path("nodir/target"), AsBytes(kOld));
  if (GetParam() == EnvKind::kMem) {
    EXPECT_OK(s);  // directories are implicit in memory
  } else {
    // Named as the caller named it: the temp file is an implementation detail.
    EXPECT_THAT(s, HasCode(StatusCode::kNotFound, "open '" + Path("nodir/target") + "': No such file"));
  }
}

// An Env whose processes are fake: this one is pid 100, the live others are
// listed.
class FakePidEnv : public FaultInjectionEnv {
 public:
  FakePidEnv(Env* base, std::set<int64_t> live) : FaultInjectionEnv(base), live_(std::move(live)) {}
  bool ProcessAlive(int64_t pid) override { return pid == 100 || live_.count(pid) > 0; }
  int64_t ProcessId() override { return 100; }

 private:
  std::set<int64_t> live_;
};

TEST_P(AtomicWriteTest, RemovesOnlyTempFilesOfDeadProcesses) {
  FakePidEnv fake(env(), {200});
  const std::vector<std::string> kept = {
      "target.kvtmp-100-999999999",  // this process: maybe another thread's write
      "target.kvtmp-200-0",   // a live process
      "other.kvtmp-300-0",    // another file's temp
      "target.kvtmp-300-x",   // not a temp name
      "target.kvtmp-300-",    // not a temp name
      "target.kvtmp--300-1",  // not a temp name
      "targetx.kvtmp-300-1",  // another file's temp
  };
  for (const std::string& name : kept) ASSERT_OK(WriteString(env(), Path(name), "k"));
  ASSERT_OK(WriteString(env(), Path("target.kvtmp-300-0"), "dead"));
  ASSERT_OK(WriteString(env(), Path("target.kvtmp-301-12"), "dead"));
  ASSERT_OK(WriteStringAtomic(&fake, Path("target"), AsBytes(kOld)));
  std::vector<std::string> expected = kept;
  expected.push_back("target");
  EXPECT_THAT(Children(), ::testing::UnorderedElementsAreArray(expected));
}

// A target that is itself a temp file (a store entry being staged) does not
// list the directory: its owner removes its leftovers (PromptCacheStore at
// Open), and a store's fill would otherwise be quadratic.
TEST_P(AtomicWriteTest, ATempFileTargetLeavesTheDirectoryAlone) {
  FakePidEnv fake(env(), {});
  const std::string staged = "entry.kvtmp-300-put0";
  ASSERT_OK(WriteString(env(), Path(staged + ".kvtmp-300-0"), "dead"));
  ASSERT_OK(WriteStringAtomic(&fake, Path(staged), AsBytes(kOld)));
  EXPECT_THAT(Children(), ::testing::UnorderedElementsAre(staged, staged + ".kvtmp-300-0"));
}

INSTANTIATE_TEST_SUITE_P(Envs, AtomicWriteTest, ::testing::Values(EnvKind::kPosix, EnvKind::kMem),
                         EnvKindName);

TEST(AtomicWritePosixTest, StaleTempOfDeadProcessIsCleanedLiveOneKept) {
  TempDir tmp;
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  ASSERT_FALSE(Env::Default()->ProcessAlive(dead));
  std::string dead_temp = "target.kvtmp-" + std::to_string(dead) + "-0";
  std::string own_temp = "target.kvtmp-" + std::to_string(getpid()) + "-99";
  std::string parent_temp = "target.kvtmp-" + std::to_string(getppid()) + "-0";
  for (const std::string& name : {dead_temp, own_temp, parent_temp}) {
    ASSERT_OK(WriteString(Env::Default(), tmp.Join(name), "stale"));
  }
  ASSERT_OK(WriteStringAtomic(Env::Default(), tmp.Join("target"), AsBytes(kOld)));
  ASSERT_OK_AND_ASSIGN(auto children, Env::Default()->GetChildren(tmp.path()));
  EXPECT_THAT(children, UnorderedElementsAre("target", own_temp, parent_temp));
}

TEST(AtomicWritePosixTest, RelativePathInWorkingDirectory) {
  TempDir tmp;
  std::string cwd(4096, '\0');
  ASSERT_NE(getcwd(cwd.data(), cwd.size()), nullptr);
  cwd.resize(cwd.find('\0'));
  ASSERT_EQ(chdir(tmp.path().c_str()), 0);
  ASSERT_OK(WriteString(Env::Default(), "rel.kvtmp-2147483646-0", "stale"));
  Status s = WriteStringAtomic(Env::Default(), "rel", AsBytes(kOld));
  Result<std::vector<std::string>> children = Env::Default()->GetChildren(".");
  ASSERT_EQ(chdir(cwd.c_str()), 0);
  ASSERT_OK(s);
  ASSERT_OK(children);
  EXPECT_THAT(*children, ElementsAre("rel"));
}

}  // namespace
}  // namespace kvstore::testing
