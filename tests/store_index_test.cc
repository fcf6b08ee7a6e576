// The disk tier's internals: its index never serves a key on a hash match
// alone, and its on-disk names, metadata and manifest lines parse strictly.
#include "libkvstore/tiers/store_index.h"

#include <algorithm>

#include "libkvstore/tiers/prefix_hash.h"
#include "libkvstore/tiers/store_format.h"
#include "testutil.h"

namespace kvstore {
namespace {

using Tokens = std::vector<int32_t>;

StoreIndex::Entry EntryOf(const std::string& file, const std::string& model, Tokens tokens, int64_t bytes = 10) {
  return StoreIndex::Entry{file, StoreKey{model, std::move(tokens)}, bytes};
}

std::string Longest(StoreIndex& index, const std::string& model, const Tokens& query,
                    const std::vector<uint64_t>& hashes, size_t max_len) {
  const StoreIndex::Entry* e = index.FindLongestPrefix(model, query, hashes, max_len);
  return e ? e->file : "";
}

// Every key hashes alike: only the exact comparison tells them apart.
TEST(StoreIndexTest, HashCollisionsNeverServeAnotherKey) {
  StoreIndex index;
  index.Insert(EntryOf("a", "m", {1, 2, 3}), 0);
  index.Insert(EntryOf("b", "m", {7, 8}), 0);
  index.Insert(EntryOf("c", "n", {1, 2}), 0);
  const std::vector<uint64_t> zeros(6, 0);
  EXPECT_EQ(Longest(index, "m", {1, 2, 3, 4}, zeros, 4), "a");
  EXPECT_EQ(Longest(index, "m", {1, 2, 9, 4}, zeros, 4), "");  // "c" is another model's
  EXPECT_EQ(Longest(index, "m", {7, 8, 9}, zeros, 3), "b");
  EXPECT_EQ(Longest(index, "m", {7, 9, 9}, zeros, 3), "");
  EXPECT_EQ(Longest(index, "n", {1, 2, 3}, zeros, 3), "c");
  EXPECT_EQ(Longest(index, "m", {1, 2, 3, 4}, zeros, 2), "");  // max_len bounds the length
}

TEST(StoreIndexTest, FindsTheLongestPrefixWithRealHashes) {
  StoreIndex index;
  for (const Tokens& t : {Tokens{5}, Tokens{5, 6}, Tokens{5, 6, 7, 8}}) {
    index.Insert(EntryOf(std::to_string(t.size()), "m", t), KeyHash("m", t));
  }
  const Tokens query = {5, 6, 7, 8, 9};
  const std::vector<uint64_t> hashes = PrefixHashes("m", query);
  EXPECT_EQ(Longest(index, "m", query, hashes, 5), "4");
  EXPECT_EQ(Longest(index, "m", query, hashes, 3), "2");
  EXPECT_EQ(Longest(index, "m", query, hashes, 1), "1");
  EXPECT_EQ(Longest(index, "other", query, PrefixHashes("other", query), 5), "");
  // The only entry of its length gone, the next length down is probed.
  EXPECT_TRUE(index.Erase("4"));
  EXPECT_EQ(Longest(index, "m", query, hashes, 5), "2");
  index.Insert(EntryOf("4", "m", {5, 6, 7, 8}), KeyHash("m", Tokens{5, 6, 7, 8}));
  EXPECT_EQ(Longest(index, "m", query, hashes, 5), "4");
}

// Which entries delta entries are based on, kept through inserts,
// replacements and erasures.
TEST(StoreIndexTest, CountsTheDeltaEntriesOnEachBase) {
  StoreIndex index;
  auto delta = [](const std::string& file, const std::string& base) {
    StoreIndex::Entry e = EntryOf(file, "m", {1, 2, 3});
    e.base = base;
    return e;
  };
  index.Insert(EntryOf("a", "m", {1, 2}), 1);
  index.Insert(delta("b", "a"), 2);
  index.Insert(delta("c", "a"), 3);
  EXPECT_TRUE(index.HasDependents("a"));
  EXPECT_FALSE(index.HasDependents("b"));
  std::vector<std::string> on_a = index.DependentsOf("a");
  std::sort(on_a.begin(), on_a.end());
  EXPECT_EQ(on_a, (std::vector<std::string>{"b", "c"}));
  index.Insert(EntryOf("b", "m", {1, 2, 3}), 2);  // b replaced by a whole entry
  EXPECT_EQ(index.DependentsOf("a"), std::vector<std::string>{"c"});
  EXPECT_FALSE(index.Erase("c", index.Find("c")->generation + 1));  // another generation: kept
  EXPECT_TRUE(index.HasDependents("a"));
  EXPECT_TRUE(index.Erase("c"));
  EXPECT_FALSE(index.HasDependents("a"));
  EXPECT_TRUE(index.DependentsOf("a").empty());
}

TEST(StoreIndexTest, RecencyBytesAndGenerations) {
  StoreIndex index;
  const uint64_t first = index.Insert(EntryOf("a", "m", {1}, 10), 1).generation;
  index.Insert(EntryOf("b", "m", {2}, 20), 2);
  EXPECT_EQ(index.bytes(), 30);
  EXPECT_EQ(index.LeastRecent()->file, "a");
  const Tokens query = {1, 5};
  EXPECT_EQ(Longest(index, "m", query, PrefixHashes("m", query), 2), "");  // hashes 1 and 2 are not real ones
  EXPECT_EQ(index.FindLongestPrefix("m", query, std::vector<uint64_t>{0, 1, 9}, 2)->file, "a");
  EXPECT_EQ(index.LeastRecent()->file, "b");  // the lookup refreshed "a"
  // Replacing a file's entry gives it a new generation: an old one no longer erases it.
  const uint64_t second = index.Insert(EntryOf("a", "m", {1}, 15), 1).generation;
  EXPECT_NE(first, second);
  EXPECT_FALSE(index.Erase("a", first));
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(index.bytes(), 35);
  EXPECT_TRUE(index.Erase("a", second));
  EXPECT_FALSE(index.Erase("a"));
  std::vector<std::string> files;
  index.ForEach([&](const StoreIndex::Entry& e) { files.push_back(e.file); });
  EXPECT_EQ(files, std::vector<std::string>{"b"});
  EXPECT_EQ(index.bytes(), 20);
}

TEST(StoreFormatTest, NamesAndMetadataFollowTheKey) {
  const Tokens t = {1, -2, 2147483647};
  const std::string name = StoreFileName("m", t);
  EXPECT_EQ(name.size(), 16 + kStoreFileSuffix.size());
  EXPECT_TRUE(name.ends_with(kStoreFileSuffix));
  EXPECT_NE(name, StoreFileName("m", Tokens{1, -2}));
  EXPECT_NE(name, StoreFileName("m2", t));
  const Metadata meta = StoreKeyMetadata("m", t);
  EXPECT_EQ(meta, (Metadata{{"kvstore_model", "m"}, {"kvstore_tokens", "1,-2,2147483647"}}));
  std::optional<StoreKey> key = StoreKeyFromMetadata(meta);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->model, "m");
  EXPECT_EQ(key->tokens, t);
  for (const char* bad : {"1,,2", "1,", ",1", "1 2", "x", "2147483648", "+1"}) {
    EXPECT_FALSE(StoreKeyFromMetadata({{"kvstore_model", "m"}, {"kvstore_tokens", bad}})) << bad;
  }
  EXPECT_FALSE(StoreKeyFromMetadata({{"kvstore_tokens", "1"}}));
  EXPECT_FALSE(StoreKeyFromMetadata({{"kvstore_model", "m"}}));
}

// The names a fetch probes before the directory is indexed are the names
// Put gives, for every prefix length.
TEST(StoreFormatTest, NamesOfEveryPrefixInOnePass) {
  const Tokens tokens = {5, -1, 70000, 0, 2147483647, -2147483647 - 1, 42};
  const std::vector<std::string> names = StoreFileNamesOfPrefixes("model\nwith newline", tokens);
  ASSERT_EQ(names.size(), tokens.size());
  for (size_t n = 1; n <= tokens.size(); ++n) {
    EXPECT_EQ(names[n - 1], StoreFileName("model\nwith newline", std::span(tokens).first(n))) << n;
  }
  EXPECT_TRUE(StoreFileNamesOfPrefixes("m", {}).empty());
}

TEST(StoreFormatTest, ManifestKeepsTheLastLineOfEachFileAndSkipsMalformedOnes) {
  const std::string fp(64, 'a');
  std::string text = ManifestAddLine("a.safetensors", 10, "m", Tokens{1, 2}, "") +
                     ManifestAddLine("b.safetensors", 20, "", Tokens{}, "") +
                     ManifestAddLine("a.safetensors", 11, "m\n x", Tokens{3}, fp) +
                     ManifestAddLine("c.safetensors", 30, "m", Tokens{4}, "") + ManifestRemoveLine("c.safetensors") +
                     "+ j.safetensors 3 6d 5\n"      // a line from before fingerprints
                     "+ k.safetensors 3 6d 5 - x\n"  // a base that is not an entry's name
                     "+ l.safetensors 3 6d 5 - 0123456789abcdef.safetensors x\n"  // a field too many
                     "+ d.safetensors 1 zz 1\n"      // model not hex
                     "+ e.safetensors 1x 6d 1\n"     // bytes not a number
                     "+ f.safetensors 1 6d 1,,2\n"   // empty token
                     "+ g.safetensors 1 6d\n"        // a field missing
                     "? h.safetensors\n"
                     "+ i.safetensors 5 6d 7";       // torn last line
  EXPECT_EQ(ManifestAddLine("b.safetensors", 20, "", Tokens{}, ""), "+ b.safetensors 20 - - -\n");
  // A delta entry's line names its base last.
  text = ManifestAddLine("m.safetensors", 4, "m", Tokens{1, 2, 3}, fp, "0123456789abcdef.safetensors") + text;
  const auto entries = ReadManifest(std::as_bytes(std::span(text)));
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries.at("m.safetensors").base, "0123456789abcdef.safetensors");
  EXPECT_EQ(entries.at("a.safetensors").base, "");
  const ManifestEntry& a = entries.at("a.safetensors");
  EXPECT_EQ(a.bytes, 11);
  EXPECT_EQ(a.key.model, "m\n x");
  EXPECT_EQ(a.key.tokens, Tokens{3});
  EXPECT_EQ(a.fingerprint, fp);
  EXPECT_EQ(entries.at("j.safetensors").fingerprint, "");
  const ManifestEntry& b = entries.at("b.safetensors");
  EXPECT_EQ(b.bytes, 20);
  EXPECT_EQ(b.key.model, "");
  EXPECT_TRUE(b.key.tokens.empty());
}

}  // namespace
}  // namespace kvstore
