// TierWriter: a persistent tier's writes in order off the caller's thread,
// bounded by count and bytes, a newer write of a waiting key replacing it,
// drops counted, nothing written after Close().
#include "libkvstore/tiers/tier_writer.h"

#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "testutil.h"

namespace kvstore {
namespace {

// Writes that record their name; a write named "gate" says it started,
// then waits for Open().
class Recorder {
 public:
  std::function<Status()> Write(std::string name, Status result = Status::OK()) {
    return [this, name, result] {
      if (name == "gate") {
        started_.count_down();
        gate_.wait();
      }
      std::lock_guard<std::mutex> l(mu_);
      done_.push_back(name);
      return result;
    };
  }
  void WaitStarted() { started_.wait(); }
  void Open() { gate_.count_down(); }
  std::vector<std::string> done() {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }

 private:
  std::latch started_{1};
  std::latch gate_{1};
  std::mutex mu_;
  std::vector<std::string> done_;
};

// {written, bytes_written, superseded, dropped, errors}
std::vector<int64_t> Counts(const TierWriter::Stats& s) {
  return {s.written, s.bytes_written, s.superseded, s.dropped, s.errors};
}

TEST(TierWriterTest, WritesRunInOrderOffTheCallersThread) {
  TierWriter writer({.max_pending = 8});
  Recorder r;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  ASSERT_OK(writer.Submit("a", 1, [&] { return ran_on = std::this_thread::get_id(), Status::OK(); }));
  for (const char* name : {"b", "c", "d"}) ASSERT_OK(writer.Submit(name, 1, r.Write(name)));
  writer.Flush();
  EXPECT_NE(ran_on, caller);
  EXPECT_EQ(r.done(), (std::vector<std::string>{"b", "c", "d"}));
  EXPECT_EQ(Counts(writer.stats()), (std::vector<int64_t>{4, 4, 0, 0, 0}));
}

TEST(TierWriterTest, BoundsDropAndANewerWriteReplacesAWaitingOne) {
  TierWriter writer({.max_pending = 2, .max_bytes = 100});
  Recorder r;
  ASSERT_OK(writer.Submit("gate", 1, r.Write("gate")));
  r.WaitStarted();  // running, out of the queue
  ASSERT_OK(writer.Submit("x", 60, r.Write("x1")));
  ASSERT_OK(writer.Submit("x", 70, r.Write("x2")));  // replaces x1 where it waits
  ASSERT_OK(writer.Submit("y", 40, r.Write("y")));   // 70 + 40 > 100 bytes: dropped
  ASSERT_OK(writer.Submit("z", 1, r.Write("z")));
  ASSERT_OK(writer.Submit("w", 1, r.Write("w")));    // two wait already: dropped
  r.Open();
  writer.Flush();
  EXPECT_EQ(r.done(), (std::vector<std::string>{"gate", "x2", "z"}));
  EXPECT_EQ(Counts(writer.stats()), (std::vector<int64_t>{3, 72, 1, 2, 0}));
}

TEST(TierWriterTest, ALargeWriteIsQueuedAloneAndErrorsAreCounted) {
  TierWriter writer({.max_pending = 4, .max_bytes = 10});
  Recorder r;
  ASSERT_OK(writer.Submit("big", 1000, r.Write("big", Status::IOError("disk full"))));
  writer.Flush();
  EXPECT_EQ(r.done(), std::vector<std::string>{"big"});
  EXPECT_EQ(Counts(writer.stats()), (std::vector<int64_t>{0, 0, 0, 0, 1}));
  EXPECT_THAT(writer.stats().last_error, ::testing::HasSubstr("disk full"));
}

TEST(TierWriterTest, CloseFlushesThenDropsLaterWrites) {
  Recorder r;
  TierWriter writer({.max_pending = 4});
  ASSERT_OK(writer.Submit("a", 1, r.Write("a")));
  writer.Close();
  EXPECT_EQ(r.done(), std::vector<std::string>{"a"});
  ASSERT_OK(writer.Submit("b", 1, r.Write("b")));
  writer.Close();  // idempotent
  ASSERT_OK(writer.Submit("c", 1, r.Write("c")));
  EXPECT_EQ(writer.stats().dropped, 2);
  EXPECT_EQ(r.done(), std::vector<std::string>{"a"});
}

TEST(TierWriterTest, TheDestructorFinishesWhatIsQueued) {
  auto writer = std::make_unique<TierWriter>(TierWriter::Options{});
  Recorder r;
  ASSERT_OK(writer->Submit("gate", 1, r.Write("gate")));
  ASSERT_OK(writer->Submit("c", 1, r.Write("c")));
  std::thread opener([&] { r.Open(); });
  writer.reset();
  opener.join();
  EXPECT_EQ(r.done(), (std::vector<std::string>{"gate", "c"}));
}

TEST(TierWriterTest, SynchronousModeWritesOnTheCallersThreadAndReturnsTheError) {
  TierWriter writer({.async = false});
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  ASSERT_OK(writer.Submit("a", 5, [&] { return ran_on = std::this_thread::get_id(), Status::OK(); }));
  EXPECT_EQ(ran_on, caller);
  EXPECT_THAT(writer.Submit("b", 5, [] { return Status::IOError("no space"); }),
              testing::HasCode(StatusCode::kIOError, "no space"));
  EXPECT_EQ(writer.stats().written, 1);
  EXPECT_EQ(writer.stats().errors, 1);
}

}  // namespace
}  // namespace kvstore
