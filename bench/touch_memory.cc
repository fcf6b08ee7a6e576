// kvstore_touch_memory GIB: allocates and writes GIB GiB, then exits.
//
// On virtual machines whose guest memory is backed lazily by the host, the
// first write to a page the guest has not used (or has returned) costs
// several microseconds; a command that fills the page cache then runs 5-10x
// slower than the same command a moment later. bench/file_bench.sh runs this
// before every timed command so that each one, reference or ours, starts with
// memory the host has already backed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const size_t gib = argc > 1 ? static_cast<size_t>(std::atoll(argv[1])) : 4;
  const size_t chunk = size_t{64} << 20;
  std::vector<char*> blocks;
  for (size_t done = 0; done < (gib << 30); done += chunk) {
    char* p = static_cast<char*>(std::malloc(chunk));
    if (p == nullptr) break;
    std::memset(p, 1, chunk);
    blocks.push_back(p);
  }
  unsigned sum = 0;
  for (char* p : blocks) sum += static_cast<unsigned char>(p[chunk - 1]);
  for (char* p : blocks) std::free(p);
  return sum == 0 && !blocks.empty() ? 1 : 0;
}
