// JSON parse and dump of the header of a 20,000-layer KVCache prompt-cache
// file (about 4 MB: one tensor entry per keys/values array, class names and
// metadata as strings), next to a memcpy of the same bytes. Parsed with keys
// sorted, as mlx-lm (nlohmann's std::map) and kvstore write them, and in
// layer order, as another writer might.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kvstore/json.h"

namespace {

constexpr int kLayers = 20000;

kvstore::Json Header() {
  kvstore::Json header = kvstore::Json::MakeObject();
  kvstore::Json metadata = kvstore::Json::MakeObject();
  const int64_t tensor_bytes = int64_t{1} * 8 * 1024 * 128 * 2;
  int64_t offset = 0;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int k = 0; k < 2; ++k) {
      kvstore::Json tensor = kvstore::Json::MakeObject();
      tensor["dtype"] = "F16";
      tensor["shape"] = kvstore::Json::Array{1, 8, 1024, 128};
      tensor["data_offsets"] = kvstore::Json::Array{offset, offset + tensor_bytes};
      offset += tensor_bytes;
      header.as_object().emplace_back(std::to_string(layer) + "." + std::to_string(k),
                                      std::move(tensor));
    }
    metadata.as_object().emplace_back("0." + std::to_string(layer), "");
    metadata.as_object().emplace_back("2." + std::to_string(layer), "KVCache");
  }
  metadata["1.model"] = "org/some-model-7B";
  header["__metadata__"] = std::move(metadata);
  return header;
}

std::string HeaderText(bool sort_keys) {
  kvstore::Json::DumpOptions options;
  options.sort_keys = sort_keys;
  return Header().Dump(options);
}

void BM_JsonParse20kLayers(benchmark::State& state) {
  const std::string text = HeaderText(state.range(0) != 0);
  for (auto _ : state) {
    kvstore::Result<kvstore::Json> parsed = kvstore::Json::Parse(text);
    if (!parsed.ok()) state.SkipWithError("parse");
    benchmark::DoNotOptimize(parsed);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_JsonParse20kLayers)->ArgName("sorted")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

// Hostile headers for the duplicate-key check, about 4 MB each, against the
// bytes/s of the 20k-layer header: a key costs O(length x log members)
// whatever its bytes. 0: 250,000 short keys in one object in decreasing
// order (never the sorted fast path); 1: 3,600 keys of 1 KiB sharing their
// first 1,000 bytes, in decreasing order (every comparison reads ~1 KiB);
// 2: 27,777 objects of 9 members out of order (a key set per object);
// 3: 4,000 keys that std::hash sends to one slot of the key table (what a
// file crafted against std::hash's fixed seed does; the set then orders them).
std::string HostileText(int64_t kind) {
  std::string text = "{";
  auto add = [&](const std::string& key, const char* value) {
    text.append("\"").append(key).append("\":").append(value).append(",");
  };
  if (kind == 0) {
    for (int i = 250000; i > 0; --i) add("k" + std::to_string(i), "0");
  } else if (kind == 1) {
    const std::string prefix(1000, 'p');
    for (int i = 3600; i > 0; --i) add(prefix + std::to_string(1000000 + i) + std::string(17, 's'), "0");
  } else if (kind == 3) {
    std::vector<std::string> keys;
    for (int i = 0; keys.size() < 4000; ++i) {
      std::string key = "k" + std::to_string(i);
      if ((std::hash<std::string_view>()(key) & 8191) == 0) keys.push_back(std::move(key));
    }
    std::sort(keys.rbegin(), keys.rend());
    for (const std::string& key : keys) add(key, "0");
  } else {
    for (int i = 0; i < 250000 / 9 * 9; i += 9) {
      std::string object = "{";
      for (int k = 8; k >= 0; --k) object.append("\"").append(1, static_cast<char>('a' + k)).append("\":0,");
      object.back() = '}';
      add(std::to_string(i), object.c_str());
    }
  }
  text.back() = '}';
  return text;
}

void BM_JsonParseHostileKeys(benchmark::State& state) {
  const std::string text = HostileText(state.range(0));
  for (auto _ : state) {
    kvstore::Result<kvstore::Json> parsed = kvstore::Json::Parse(text);
    if (!parsed.ok()) state.SkipWithError("parse");
    benchmark::DoNotOptimize(parsed);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_JsonParseHostileKeys)->ArgName("kind")->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

// Dumps with sorted keys, as the safetensors writer does.
void BM_JsonDump20kLayers(benchmark::State& state) {
  const kvstore::Json header = Header();
  kvstore::Json::DumpOptions sorted;
  sorted.sort_keys = true;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = header.Dump(sorted);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_JsonDump20kLayers)->Unit(benchmark::kMillisecond);

void BM_MemcpyJsonHeader(benchmark::State& state) {
  const std::string text = HeaderText(true);
  std::string copy(text.size(), '\0');
  for (auto _ : state) {
    std::memcpy(copy.data(), text.data(), text.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_MemcpyJsonHeader);

}  // namespace
