#include "kvstore/prompt_trie.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "testutil.h"

namespace kvstore {
namespace {

using ::kvstore::testing::HasCode;
using Tokens = std::vector<int32_t>;
using Trie = PromptTrie<std::string>;

// "m{1=one{2{3=A2{}}}}": per model, a node is ["=" value] "{" children "}",
// each child written as its token followed by its node, in insertion order.
void DumpNode(const Trie::NodeView& node, std::string& out) {
  if (node.value() != nullptr) out += "=" + *node.value();
  out += "{";
  for (size_t i = 0; i < node.num_children(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(node.child_token(i));
    DumpNode(node.child(i), out);
  }
  out += "}";
}

std::string Dump(const Trie& trie) {
  std::string out;
  for (size_t i = 0; i < trie.num_models(); ++i) {
    if (i > 0) out += " ";
    out += trie.model_name(i);
    DumpNode(trie.root(i), out);
  }
  return out;
}

PromptTrieResult Found(std::optional<Tokens> exact, std::optional<Tokens> shorter,
                       std::optional<Tokens> longer, int64_t common_prefix,
                       std::string model = "m") {
  PromptTrieResult r;
  r.model = std::move(model);
  r.exact = std::move(exact);
  r.shorter = std::move(shorter);
  r.longer = std::move(longer);
  r.common_prefix = common_prefix;
  return r;
}

constexpr std::nullopt_t kNone = std::nullopt;

// The trie of the trie_basic trace after its adds: [1]=one, [1,2,3]=A2,
// [1,2,3,4,5]=B, [1,2,6]=C.
Trie BasicTrie() {
  Trie trie;
  EXPECT_EQ(trie.Add("m", Tokens{1, 2, 3}, "A"), kNone);
  EXPECT_EQ(trie.Add("m", Tokens{1, 2, 3}, "A2"), "A");
  EXPECT_EQ(trie.Add("m", Tokens{1}, "one"), kNone);
  EXPECT_EQ(trie.Add("m", Tokens{1, 2, 3, 4, 5}, "B"), kNone);
  EXPECT_EQ(trie.Add("m", Tokens{1, 2, 6}, "C"), kNone);
  return trie;
}

TEST(PromptTrieTest, AddReturnsPreviousValueAndKeepsInsertionOrder) {
  Trie trie = BasicTrie();
  EXPECT_EQ(Dump(trie), "m{1=one{2{3=A2{4{5=B{}}},6=C{}}}}");
  EXPECT_EQ(trie.size(), 4u);
}

TEST(PromptTrieTest, GetMissingModelNodeOrValueIsNotFound) {
  Trie trie;
  EXPECT_THAT(trie.Get("m", Tokens{1}), HasCode(StatusCode::kNotFound, "no model 'm'"));
  trie = BasicTrie();
  ASSERT_OK_AND_ASSIGN(std::string value, trie.Get("m", Tokens{1, 2, 3}));
  EXPECT_EQ(value, "A2");
  EXPECT_THAT(trie.Get("m", Tokens{1, 2}), HasCode(StatusCode::kNotFound, "holds no value"));
  EXPECT_THAT(trie.Get("m", Tokens{1, 7}),
              HasCode(StatusCode::kNotFound, "no node for token 7 at position 1"));
  EXPECT_EQ(trie.Find("m", Tokens{1, 2}), nullptr);
  ASSERT_NE(trie.Find("m", Tokens{1}), nullptr);
  EXPECT_EQ(*trie.Find("m", Tokens{1}), "one");
  *trie.Find("m", Tokens{1}) = "uno";
  EXPECT_EQ(*std::as_const(trie).Find("m", Tokens{1}), "uno");
}

TEST(PromptTrieTest, SearchFollowsMlxRules) {
  Trie trie;
  EXPECT_EQ(trie.Search("m", Tokens{1, 2}), Found(kNone, kNone, kNone, 0));
  trie = BasicTrie();
  // Exact hit: nothing else is reported and common_prefix stays 0.
  EXPECT_EQ(trie.Search("m", Tokens{1, 2, 3}), Found(Tokens{1, 2, 3}, kNone, kNone, 0));
  // [1] has a value but a 1-token prefix is never `shorter`; the shortest
  // extension of [1,2] is [6] (later inserted branch, explored first).
  EXPECT_EQ(trie.Search("m", Tokens{1, 2}), Found(kNone, kNone, Tokens{1, 2, 6}, 2));
  EXPECT_EQ(trie.Search("m", Tokens{1, 2, 3, 4}),
            Found(kNone, Tokens{1, 2, 3}, Tokens{1, 2, 3, 4, 5}, 4));
  // The walk stops at [1], which has a value: longer = [1] with no extension.
  EXPECT_EQ(trie.Search("m", Tokens{1, 9}), Found(kNone, kNone, Tokens{1}, 1));
  EXPECT_EQ(trie.Search("m", Tokens{1}), Found(Tokens{1}, kNone, kNone, 0));
  EXPECT_EQ(trie.Search("m", Tokens{7}), Found(kNone, kNone, kNone, 0));
  EXPECT_EQ(trie.Search("m", Tokens{}), Found(kNone, kNone, kNone, 0));
  // longer can equal shorter.
  EXPECT_EQ(trie.Search("m", Tokens{1, 2, 3, 4, 5, 6}),
            Found(kNone, Tokens{1, 2, 3, 4, 5}, Tokens{1, 2, 3, 4, 5}, 5));
  EXPECT_EQ(trie.Search("m", Tokens{1, 2, 6, 8}),
            Found(kNone, Tokens{1, 2, 6}, Tokens{1, 2, 6}, 3));
}

TEST(PromptTrieTest, EmptyPromptAndRootValue) {
  Trie trie = BasicTrie();
  EXPECT_EQ(trie.Add("m", Tokens{}, "root"), kNone);
  EXPECT_EQ(Dump(trie), "m=root{1=one{2{3=A2{4{5=B{}}},6=C{}}}}");
  EXPECT_EQ(trie.Search("m", Tokens{}), Found(Tokens{}, kNone, kNone, 0));
  // The root value is never reported for a non-empty query.
  EXPECT_EQ(trie.Search("m", Tokens{7}), Found(kNone, kNone, kNone, 0));
}

TEST(PromptTrieTest, ModelsAreSeparateTries) {
  Trie trie = BasicTrie();
  EXPECT_EQ(trie.Search("other", Tokens{1}), Found(kNone, kNone, kNone, 0, "other"));
  EXPECT_EQ(trie.Add("other", Tokens{1}, "o1"), kNone);
  EXPECT_EQ(Dump(trie), "m{1=one{2{3=A2{4{5=B{}}},6=C{}}}} other{1=o1{}}");
  EXPECT_EQ(trie.Search("other", Tokens{1, 2}), Found(kNone, kNone, Tokens{1}, 1, "other"));
}

TEST(PromptTrieTest, PopPrunesEmptyNodes) {
  Trie trie = BasicTrie();
  ASSERT_OK_AND_ASSIGN(std::string c, trie.Pop("m", Tokens{1, 2, 6}));
  EXPECT_EQ(c, "C");
  EXPECT_EQ(Dump(trie), "m{1=one{2{3=A2{4{5=B{}}}}}}");
  // [1,2,3] keeps its node: it still has a child.
  ASSERT_OK_AND_ASSIGN(std::string a, trie.Pop("m", Tokens{1, 2, 3}));
  EXPECT_EQ(a, "A2");
  EXPECT_EQ(Dump(trie), "m{1=one{2{3{4{5=B{}}}}}}");
  EXPECT_THAT(trie.Pop("m", Tokens{1, 2}), HasCode(StatusCode::kNotFound, "holds no value"));
  EXPECT_THAT(trie.Pop("x", Tokens{}), HasCode(StatusCode::kNotFound, "no model 'x'"));
  EXPECT_EQ(Dump(trie), "m{1=one{2{3{4{5=B{}}}}}}");
  EXPECT_EQ(trie.Search("m", Tokens{1, 2, 3}), Found(kNone, kNone, Tokens{1, 2, 3, 4, 5}, 3));
  // Pruning stops at [1], which holds a value; the model root stays.
  ASSERT_OK(trie.Pop("m", Tokens{1, 2, 3, 4, 5}));
  EXPECT_EQ(Dump(trie), "m{1=one{}}");
  ASSERT_OK(trie.Pop("m", Tokens{1}));
  EXPECT_EQ(Dump(trie), "m{}");
  EXPECT_TRUE(trie.empty());
}

TEST(PromptTrieTest, PopPrefixesRemovesStrictPrefixesIncludingRoot) {
  Trie trie = BasicTrie();
  ASSERT_EQ(trie.Add("m", Tokens{}, "root"), kNone);
  ASSERT_OK(trie.Pop("m", Tokens{1, 2, 6}));
  ASSERT_OK(trie.Pop("m", Tokens{1, 2, 3}));
  using Popped = std::vector<std::pair<int64_t, std::string>>;
  ASSERT_OK_AND_ASSIGN(Popped popped, trie.PopPrefixes("m", Tokens{1, 2, 3, 4, 5}));
  EXPECT_EQ(popped, (Popped{{0, "root"}, {1, "one"}}));
  // No pruning; the full-length node keeps its value.
  EXPECT_EQ(Dump(trie), "m{1{2{3{4{5=B{}}}}}}");
  ASSERT_OK_AND_ASSIGN(popped, trie.PopPrefixes("m", Tokens{1, 2, 3, 4, 5}));
  EXPECT_TRUE(popped.empty());
  EXPECT_EQ(trie.Search("m", Tokens{1, 2, 3, 4, 5}), Found(Tokens{1, 2, 3, 4, 5}, kNone, kNone, 0));
  ASSERT_OK_AND_ASSIGN(popped, trie.PopPrefixes("m", Tokens{}));
  EXPECT_TRUE(popped.empty());
}

TEST(PromptTrieTest, PopPrefixesWithMissingPathChangesNothing) {
  Trie trie;
  ASSERT_EQ(trie.Add("m", Tokens{}, "root"), kNone);
  ASSERT_EQ(trie.Add("m", Tokens{1, 2}, "x"), kNone);
  // mlx-lm would drop the root value before raising on token 9.
  EXPECT_THAT(trie.PopPrefixes("m", Tokens{1, 2, 9}),
              HasCode(StatusCode::kNotFound, "no node for token 9 at position 2"));
  EXPECT_EQ(Dump(trie), "m=root{1{2=x{}}}");
  EXPECT_THAT(trie.PopPrefixes("z", Tokens{1}), HasCode(StatusCode::kNotFound, "no model 'z'"));
}

TEST(PromptTrieTest, LongerTieGoesToLastInsertedBranch) {
  Trie trie;
  ASSERT_EQ(trie.Add("m", Tokens{5, 1, 1}, "first"), kNone);
  ASSERT_EQ(trie.Add("m", Tokens{5, 2, 2}, "second"), kNone);
  EXPECT_EQ(trie.Search("m", Tokens{5}), Found(kNone, kNone, Tokens{5, 2, 2}, 1));
  // A strictly shorter candidate found later still wins.
  ASSERT_EQ(trie.Add("m", Tokens{5, 1}, "short"), kNone);
  EXPECT_EQ(trie.Search("m", Tokens{5}), Found(kNone, kNone, Tokens{5, 1}, 1));
  // Re-adding after pruning moves a branch to the end of the child order.
  ASSERT_OK(trie.Pop("m", Tokens{5, 2, 2}));
  ASSERT_OK(trie.Pop("m", Tokens{5, 1}));
  ASSERT_EQ(trie.Add("m", Tokens{5, 2, 3}, "again"), kNone);
  EXPECT_EQ(Dump(trie), "m{5{1{1=first{}},2{3=again{}}}}");
  EXPECT_EQ(trie.Search("m", Tokens{5, 7}), Found(kNone, kNone, Tokens{5, 2, 3}, 1));
}

TEST(PromptTrieTest, ShorterCandidateFoundLaterWins) {
  Trie trie;
  // Explored first: the branch under 2 (value at depth 3). Then the branch
  // under 1 has a value at depth 2, which is strictly shorter.
  ASSERT_EQ(trie.Add("m", Tokens{0, 1, 1}, "d2"), kNone);
  ASSERT_EQ(trie.Add("m", Tokens{0, 2, 2, 2}, "d3"), kNone);
  EXPECT_EQ(trie.Search("m", Tokens{0}), Found(kNone, kNone, Tokens{0, 1, 1}, 1));
  EXPECT_EQ(trie.Search("m", Tokens{0, 2}), Found(kNone, kNone, Tokens{0, 2, 2, 2}, 2));
}

TEST(PromptTrieTest, ManyChildrenUseIndexAndKeepOrder) {
  Trie trie;
  for (int32_t t = 0; t < 40; ++t) {
    ASSERT_EQ(trie.Add("m", Tokens{100, t}, std::to_string(t)), kNone);
  }
  for (int32_t t = 0; t < 40; t += 3) ASSERT_OK(trie.Pop("m", Tokens{100, t}));
  std::vector<int32_t> order;
  const Trie::NodeView node = trie.root(0).child(0);
  for (size_t i = 0; i < node.num_children(); ++i) order.push_back(node.child_token(i));
  std::vector<int32_t> expected;
  for (int32_t t = 0; t < 40; ++t) {
    if (t % 3 != 0) expected.push_back(t);
  }
  EXPECT_EQ(order, expected);
  for (int32_t t = 0; t < 40; ++t) {
    EXPECT_EQ(trie.Find("m", Tokens{100, t}) != nullptr, t % 3 != 0) << t;
  }
  // Ties among many one-token extensions: the last inserted child wins.
  EXPECT_EQ(trie.Search("m", Tokens{100}), Found(kNone, kNone, Tokens{100, 38}, 1));
  ASSERT_EQ(trie.Add("m", Tokens{100, 3}, "back"), kNone);
  EXPECT_EQ(trie.Search("m", Tokens{100}), Found(kNone, kNone, Tokens{100, 3}, 1));
}

TEST(PromptTrieTest, ForEachIsPreOrderInInsertionOrder) {
  Trie trie = BasicTrie();
  ASSERT_EQ(trie.Add("z", Tokens{9}, "z9"), kNone);
  ASSERT_EQ(trie.Add("m", Tokens{}, "root"), kNone);
  ASSERT_EQ(trie.Add("m", Tokens{0}, "zero"), kNone);
  std::vector<std::string> seen;
  trie.ForEach(
      [&](std::string_view model, std::span<const int32_t> tokens, const std::string& value) {
        std::string line(model);
        for (int32_t t : tokens) line += " " + std::to_string(t);
        seen.push_back(line + "=" + value);
      });
  EXPECT_EQ(seen, (std::vector<std::string>{"m=root", "m 1=one", "m 1 2 3=A2", "m 1 2 3 4 5=B",
                                            "m 1 2 6=C", "m 0=zero", "z 9=z9"}));
}

TEST(PromptTrieTest, DeepTrieHasNoRecursion) {
  // A chain of 300k nodes: destruction, pop pruning and traversal must not
  // recurse per token.
  Tokens deep(300000);
  for (size_t i = 0; i < deep.size(); ++i) deep[i] = static_cast<int32_t>(i % 7);
  auto trie = std::make_unique<Trie>();
  ASSERT_EQ(trie->Add("m", deep, "deep"), kNone);
  Tokens half(deep.begin(), deep.begin() + 150000);
  ASSERT_EQ(trie->Add("m", half, "half"), kNone);
  EXPECT_EQ(trie->Search("m", Tokens{0, 1}), Found(kNone, kNone, half, 2));
  size_t count = 0;
  trie->ForEach([&](std::string_view, std::span<const int32_t>, const std::string&) { ++count; });
  EXPECT_EQ(count, 2u);
  ASSERT_OK(trie->Pop("m", deep));
  EXPECT_EQ(trie->Search("m", deep), Found(kNone, half, half, 150000));
  ASSERT_EQ(trie->Add("m", deep, "again"), kNone);
  trie.reset();
}

TEST(PromptTrieTest, MoveOnlyValues) {
  PromptTrie<std::unique_ptr<int>> trie;
  EXPECT_EQ(trie.Add("m", Tokens{1}, std::make_unique<int>(7)), std::nullopt);
  std::optional<std::unique_ptr<int>> previous = trie.Add("m", Tokens{1}, std::make_unique<int>(8));
  ASSERT_TRUE(previous.has_value());
  EXPECT_EQ(**previous, 7);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<int> popped, trie.Pop("m", Tokens{1}));
  EXPECT_EQ(*popped, 8);
  EXPECT_TRUE(trie.empty());
}

}  // namespace
}  // namespace kvstore
