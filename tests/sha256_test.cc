#include "libkvstore/integrity/sha256.h"

#include <string>

#include "kvstore/array.h"
#include "testutil.h"

namespace kvstore {
namespace {

TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(Sha256(std::string_view("")).ToHex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256(std::string_view("abc")).ToHex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
                .ToHex(),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, IncrementalMillionAAndReuseAfterFinish) {
  Sha256Hasher h;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.Update(chunk);
  EXPECT_EQ(h.Finish().ToHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  h.Update(std::string_view("abc"));  // Finish reset the hasher
  EXPECT_EQ(h.Finish(), Sha256(std::string_view("abc")));
}

TEST(Sha256Test, HexRoundTripAndRejects) {
  const Sha256Digest d = Sha256(std::string_view("abc"));
  EXPECT_EQ(Sha256Digest::FromHex(d.ToHex()), d);
  std::string upper = d.ToHex();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  EXPECT_EQ(Sha256Digest::FromHex(upper), d);
  EXPECT_FALSE(Sha256Digest::FromHex(d.ToHex().substr(1)).has_value());
  EXPECT_FALSE(Sha256Digest::FromHex(d.ToHex() + "0").has_value());
  std::string bad = d.ToHex();
  bad[10] = 'g';
  EXPECT_FALSE(Sha256Digest::FromHex(bad).has_value());
  EXPECT_NE(Sha256Digest(), d);
}

TEST(Sha256Test, ArrayDigestCoversLogicalElementsWhateverTheStrides) {
  Array a = testing::RandomArray(DType::kF16, {2, 3, 8, 4}, 7);
  Array view = a.Slice(2, 2, 6);
  EXPECT_FALSE(view.is_contiguous());
  EXPECT_EQ(Sha256(view), Sha256(view.Clone()));
  const std::vector<std::byte> bytes = view.ToBytes();
  EXPECT_EQ(Sha256(view), Sha256(std::span<const std::byte>(bytes)));
  EXPECT_EQ(Sha256(a.Slice(0, 1, 1)).ToHex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace kvstore
